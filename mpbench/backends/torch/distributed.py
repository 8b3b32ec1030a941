"""A torch cell as one rank of a DistributedDataParallel job (docs/distributed.md).

torchrun (runner/launchers/torchrun.py) starts one process per rank with RANK, LOCAL_RANK,
WORLD_SIZE and the rendezvous in the environment; run_cell asks `DataParallel.join` whether
it is one of them. Each rank keeps its batch (weak scaling) and takes its own slice of every
global step's samples; after training, rank 0 gathers every rank's step times.

Sources (torch 2.4-2.13):
- gloo on CPU, nccl on CUDA (`init_process_group`); a rank uses cuda:LOCAL_RANK.
- Gradient communication precision: `register_comm_hook` with `default_hooks
  .fp16_compress_hook`; bf16 on NCCL with `bf16_compress_hook`. DDP refuses the bf16 hook on
  any other backend by its *name* (`DDP._check_comm_hook`: "BF16 all reduce communication
  hook required CUDA 11+ and NCCL 2.10+"), although gloo all-reduces bf16 tensors; on gloo
  `bf16_all_reduce` below does the same cast, divide, all-reduce, copy back (research notes
  §4(a), verified on this CPU).
- All-reduce time: DDP's logging data (`_get_ddp_logging_data`, private but present since
  torch 1.9) times each iteration's backward compute, communication and their overlap, on
  CPU with the host clock and on CUDA with events; it samples iterations 1-10 and every
  100th by default, so the rate is set to every iteration (`_set_ddp_runtime_logging_
  sample_rate(1)`). DDP fills those fields for iteration k only in the forward of
  iteration k+1 (`DistributedDataParallel._pre_forward` calls
  `logger.set_runtime_stats_and_log()` before `reducer.prepare_for_forward()`), so a read
  right after step k would return step k-1's times. `after_step` makes the same call itself
  once the step's clock has stopped, and keeps a value only when the logged `iteration`
  moved on since the previous step. On CUDA the reducer's events sit on the compute stream:
  the communication time runs from the first bucket's launch to the reducer's finalisation,
  not NCCL kernel time alone. Where any of this is missing, the record says so instead.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from mpbench.backends.base import CellSpec, Unsupported

# DDP's logging data: ns per iteration (see the module docstring).
_COMM_KEY = "backward_comm_time"
_OVERLAP_KEY = "backward_compute_comm_overlap_time"
COMM_SOURCE = (
    "DDP logging data (backward_comm_time, per timed step, rank 0; on CUDA from the first "
    "bucket's launch to the reducer's finalisation, on the compute stream)"
)


def bf16_all_reduce(process_group, bucket):
    """default_hooks.bf16_compress_hook under another name, so that DDP lets gloo run it.

    No annotations: DDP._check_comm_hook refuses a `bucket` or return annotation other than
    dist.GradBucket / Future[Tensor] objects, and this module's annotations are strings."""
    group = process_group if process_group is not None else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(group.size())

    def decompress(future: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(future.value()[0])  # in place: no second full-size gradient buffer
        return buffer

    return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)


@dataclass
class DataParallel:
    """This process's place in the job, and what it measures of the communication."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    nodes: int
    backend: str
    grad_comm: str
    # Per training step, from the first (None: DDP logged nothing for that step).
    comm_s: list[float | None] = field(default_factory=list)
    overlap_s: list[float | None] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    _ddp: Any = None
    _logged_iteration: int | None = None  # DDP's `iteration` at the previous read

    @classmethod
    def join(cls, spec: CellSpec) -> DataParallel | None:
        """Join the job torchrun started (None for a single-process cell)."""
        if spec.world_size == 1 or "RANK" not in os.environ:
            return None
        cuda = spec.device.startswith("cuda")
        backend = "nccl" if cuda else "gloo"
        if cuda and spec.device not in ("cuda", "cuda:0"):
            # Rank r trains on cuda:r: from cuda:N the record's device (rank 0's, cuda:0)
            # would not be the GPU the run fingerprinted (cuda:N).
            raise Unsupported(
                f"--nproc {spec.nproc} runs rank r on cuda:r, not from {spec.device}: use "
                "--device cuda, and CUDA_VISIBLE_DEVICES to choose the GPUs"
            )
        if cuda:
            local_rank = int(os.environ["LOCAL_RANK"])
            if local_rank >= torch.cuda.device_count():
                raise Unsupported(
                    f"--nproc {spec.nproc}: rank {local_rank} has no GPU of its own "
                    f"(torch sees {torch.cuda.device_count()})"
                )
            torch.cuda.set_device(local_rank)  # before NCCL: each rank its own GPU
        if not dist.is_available() or not dist.is_backend_available(backend):
            raise Unsupported(f"this torch build has no {backend} backend for --nproc")
        # A rank that never reaches a collective is the job's hang; the cell's timeout ends
        # it, so the collective's own timeout only has to outlast the slowest step.
        dist.init_process_group(backend, timeout=timedelta(minutes=30))
        return cls(
            rank=dist.get_rank(),
            local_rank=int(os.environ["LOCAL_RANK"]),
            world_size=dist.get_world_size(),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", spec.nproc)),
            nodes=spec.nnodes,
            backend=backend,
            grad_comm=spec.grad_comm,
        )

    def device(self, requested: str) -> str:
        return f"cuda:{self.local_rank}" if requested.startswith("cuda") else requested

    def wrap(self, model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
        ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids)
        try:
            ddp._set_ddp_runtime_logging_sample_rate(1)
        except (AttributeError, RuntimeError) as exc:
            self.unavailable["allreduce_s_per_step"] = f"DDP logging data not settable ({exc})"
        if self.grad_comm != "fp32":
            ddp.register_comm_hook(None, self._hook())
        self._ddp = ddp
        return ddp

    def _hook(self) -> Any:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        if self.grad_comm == "fp16":
            return default_hooks.fp16_compress_hook
        if self.backend == "nccl":
            return default_hooks.bf16_compress_hook
        return bf16_all_reduce

    def after_step(self) -> None:
        """Read the step's all-reduce and overlap time (outside the timed region)."""
        if self._ddp is None or "allreduce_s_per_step" in self.unavailable:
            return
        try:
            # What DDP would do in the next forward: fill the logging data with the
            # iteration that just finished (module docstring).
            self._ddp.logger.set_runtime_stats_and_log()
            data = self._ddp._get_ddp_logging_data()
        except (AttributeError, RuntimeError) as exc:
            self.unavailable["allreduce_s_per_step"] = f"DDP logging data unreadable ({exc})"
            return
        iteration = data.get("iteration")
        fresh = isinstance(iteration, int) and iteration != self._logged_iteration
        self._logged_iteration = iteration
        comm, overlap = data.get(_COMM_KEY), data.get(_OVERLAP_KEY)
        self.comm_s.append(comm / 1e9 if fresh and isinstance(comm, int) else None)
        self.overlap_s.append(overlap / 1e9 if fresh and isinstance(overlap, int) else None)

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order (a collective: every rank must call it)."""
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, value)
        return gathered

    def report(self, rank_medians: list[float], devices: str, warmup: int) -> dict[str, Any]:
        """Measurements.distributed: the backend's part of DistributedStats; the all-reduce
        figures are medians over the timed steps (warm-up left out, as for step times)."""
        unavailable = dict(self.unavailable)
        comm = _median(self.comm_s[warmup:])
        overlap = _median(self.overlap_s[warmup:])
        if comm is None:
            unavailable.setdefault("allreduce_s_per_step", "DDP logged no iteration")
        return {
            "world_size": self.world_size,
            "nodes": self.nodes,
            "nproc_per_node": self.local_world_size,
            "launcher": "torchrun",
            "backend": self.backend,
            "grad_comm": self.grad_comm,
            "devices": devices,
            "rank_step_median_s": rank_medians,
            "allreduce_s_per_step": comm,
            "allreduce_overlap_s_per_step": overlap,
            "comm_source": COMM_SOURCE if comm is not None else None,
            "unavailable": unavailable,
        }


def _median(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def job_step_times(per_rank: list[list[float]]) -> list[float]:
    """The job's step time, step by step: the slowest rank's (every rank waits for it in
    the next all-reduce)."""
    return [max(times) for times in zip(*per_rank, strict=True)]
