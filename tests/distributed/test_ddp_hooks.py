"""DDP on this CPU in one process (a gloo group of one): the gradient-communication hooks
mpbench registers, the all-reduce timing it reads, and each rank's slice of the data."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from mpbench.backends.torch.backend import _Batches  # noqa: E402
from mpbench.backends.torch.distributed import DataParallel, job_step_times  # noqa: E402


@pytest.fixture
def group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def parallel(grad_comm: str) -> DataParallel:
    return DataParallel(0, 0, 1, 1, 1, "gloo", grad_comm)


def gradients(module, x, y) -> list:
    module.zero_grad()
    torch.nn.functional.cross_entropy(module(x), y).backward()
    return [p.grad.clone() for p in module.parameters()]


@pytest.mark.parametrize(
    ("grad_comm", "dtype"), [("fp16", torch.float16), ("bf16", torch.bfloat16)]
)
def test_the_hook_all_reduces_the_gradients_in_its_precision(group, grad_comm, dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(32, 20), torch.randint(0, 4, (32,))
    plain = gradients(model, x, y)
    data_parallel = parallel(grad_comm)
    ddp = data_parallel.wrap(model, torch.device("cpu"))
    reduced = gradients(ddp, x, y)
    for before, after in zip(plain, reduced, strict=True):
        # A world of one: the all-reduce is a round trip through the 16-bit type.
        assert torch.equal(after, before.to(dtype).to(torch.float32))
        assert not torch.equal(after, before)  # the rounding really happened
    data_parallel.after_step()
    gradients(ddp, x, y)
    data_parallel.after_step()
    # Each step's own time, the first included (test_ddp_allreduce_per_step.py checks the order).
    assert data_parallel.comm_s[0] > 0 and data_parallel.comm_s[1] > 0


def test_ddp_refuses_its_own_bf16_hook_by_name_on_a_build_without_cuda_and_nccl(group):
    """Why mpbench brings a renamed copy: DDP refuses torch's own bf16 hook, by the hook's
    name, unless the torch build has CUDA (or ROCm) and NCCL 2.10+, whatever the process
    group's backend (torch/nn/parallel/distributed.py, register_comm_hook). A CPU wheel
    refuses it on gloo; a CUDA wheel accepts it there too."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    gpu_build = torch.version.cuda is not None or torch.version.hip is not None
    nccl = dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10)
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    if gpu_build and nccl:
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
        assert ddp._get_ddp_logging_data().get("comm_hook") == "bf16_compress_hook"
    else:
        with pytest.raises(TypeError, match="BF16 all reduce communication hook required"):
            ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)


def test_fp32_registers_no_hook_and_the_report_takes_timed_steps_only(group):
    data_parallel = parallel("fp32")
    ddp = data_parallel.wrap(torch.nn.Linear(8, 2), torch.device("cpu"))
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for _ in range(4):
        gradients(ddp, x, y)
        data_parallel.after_step()
    assert ddp._get_ddp_logging_data().get("comm_hook") in (None, "")
    data_parallel.comm_s = [None, 9.0, 1.0, 3.0]  # as logged: the first step has no time
    report = data_parallel.report([0.5], "shared", warmup=1)
    assert report["allreduce_s_per_step"] == 3.0
    data_parallel.comm_s = [None]
    report = data_parallel.report([0.5], "shared", warmup=0)
    assert report["allreduce_s_per_step"] is None
    assert report["unavailable"]["allreduce_s_per_step"] == "DDP logged no iteration"


def test_ranks_take_disjoint_slices_of_every_global_step():
    x = torch.arange(64).float().unsqueeze(1)
    seen = []
    for rank in range(2):
        batches = _Batches(
            x, x.squeeze(1).long(), 4, 4, torch.Generator().manual_seed(7), accumulate=2
        )
        batches.rank, batches.world = rank, 2
        seen.append([[b[0].flatten().tolist() for b in step] for step in batches.epoch()])
    flat = [v for rank in seen for step in rank for micro in step for v in micro]
    assert sorted(flat) == list(range(64))  # 4 steps x 2 ranks x 2 micro-batches x 4: all once
    assert len(seen[0]) == len(seen[1]) == 4


def test_the_job_step_is_the_slowest_rank_each_step():
    assert job_step_times([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]
    with pytest.raises(ValueError):
        job_step_times([[1.0], [1.0, 2.0]])
