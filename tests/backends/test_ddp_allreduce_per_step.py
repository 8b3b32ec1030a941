"""DDP's all-reduce time is stored against the step that spent it.

DDP fills its logging data for iteration k only in the forward of iteration k+1, so a read
right after step k returned step k-1's times. Here a gloo group of one on this CPU runs the
real timed loop with a comm hook that stalls chosen steps: each stall must show up at its own
step, the last timed step included.
"""

from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from mpbench.backends.base import StepPlan  # noqa: E402
from mpbench.backends.torch import backend  # noqa: E402
from mpbench.backends.torch.distributed import DataParallel  # noqa: E402
from mpbench.backends.torch.precision import apply_policy  # noqa: E402
from mpbench.policies import resolve  # noqa: E402
from mpbench.telemetry.cell import CellTelemetry  # noqa: E402

CPU = torch.device("cpu")
STALL_S = 0.2
STALLS = [False, True, False, True, False, True]  # per step; the last one is a timed step
WARMUP = 2


@pytest.fixture
def group(tmp_path):
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def stalling_all_reduce(stalls: list[bool], calls: list[int]):
    def hook(state, bucket):
        if stalls[len(calls)]:
            time.sleep(STALL_S)  # inside DDP's communication interval
        calls.append(1)
        future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return future.then(lambda done: done.value()[0])

    return hook


def test_each_step_keeps_its_own_allreduce_time(group):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    parallel = DataParallel(0, 0, 1, 1, 1, "gloo", "fp32")
    ddp = parallel.wrap(model, CPU)
    calls: list[int] = []
    ddp.register_comm_hook(None, stalling_all_reduce(STALLS, calls))
    generator = torch.Generator().manual_seed(0)
    x, y = torch.rand(64, 8, generator=generator), torch.randint(0, 4, (64,), generator=generator)
    steps = len(STALLS)
    step_context = backend._Steps(
        model,
        ddp,
        torch.optim.SGD(model.parameters(), lr=0.01),
        apply_policy(resolve("fp32"), CPU),
        backend._Batches(x, y, 8, 8, generator),
        StepPlan(steps_per_epoch=8, epochs=1, total_steps=steps, warmup_steps=WARMUP),
        lambda: None,
        lambda *_: None,
        after_step=parallel.after_step,
    )
    backend._train_synced(step_context, {}, CellTelemetry("cpu", dynamic_scale=False))
    assert len(calls) == steps  # one bucket: one hook call per step
    comm = parallel.comm_s
    assert len(comm) == steps and None not in comm, comm
    stalled = [c for c, stall in zip(comm, STALLS, strict=True) if stall]
    quick = [c for c, stall in zip(comm, STALLS, strict=True) if not stall]
    assert min(stalled) >= STALL_S > max(quick), comm
    assert all(o is not None and o <= c for o, c in zip(parallel.overlap_s, comm, strict=True))
    report = parallel.report([0.1], "shared", WARMUP)
    assert report["allreduce_s_per_step"] == statistics.median(comm[WARMUP:])
    assert "finalisation" in report["comm_source"]


def test_a_read_without_a_new_iteration_keeps_no_time(group):
    parallel = DataParallel(0, 0, 1, 1, 1, "gloo", "fp32")
    ddp = parallel.wrap(torch.nn.Linear(4, 2), CPU)
    torch.nn.functional.cross_entropy(ddp(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
    parallel.after_step()
    parallel.after_step()  # no step in between: the logging data still holds the last one
    assert parallel.comm_s[0] is not None and parallel.comm_s[1] is None
