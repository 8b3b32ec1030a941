"""The GPU's busy time over a few training steps, from torch.profiler (docs/measurement.md,
"What limits a step").

After the end-to-end window, PROFILED_STEPS more steps run under
`torch.profiler.profile(activities=[ProfilerActivity.CUDA])`, each timed as the timed steps
are (StepTimer: synchronise, read the clock), and are then undone (compiled.undone), so the
cell trains exactly the steps it trained before (docs/measurement.md, "Steps trained"). CUDA
activity only: CUPTI records the device's kernels, copies and memsets without the per-op CPU
events, whose recording would lengthen the host's side of the step being measured.

The API, as torch 2.4 to 2.13 have it: `profile.events()` parses the trace into an
`EventList` of `torch.autograd.profiler_util.FunctionEvent`s; an event the device ran has
`device_type == torch.autograd.DeviceType.CUDA` (ROCm's HIP kernels report CUDA too) and its
device timestamps in `time_range.start` / `.end`, microseconds
(torch/autograd/profiler.py, `_parse_kineto_results`). The busy time is the union of those
intervals, so kernels overlapping on several streams count once; their plain sum (what
`key_averages()`'s `self_device_time_total` gives) would count them twice.

A trace with no device event at all means CUPTI recorded nothing (no permission to profile,
a driver without CUPTI): the fraction is then unavailable with that reason, never 0.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mpbench.backends.base import BusyEvidence
from mpbench.backends.timing import StepTimer

# Enough steps to average a step's kernels over, few enough that the profiler's trace stays
# small and the cell barely longer.
PROFILED_STEPS = 5


@contextlib.contextmanager
def quietly(profiler: Any) -> Iterator[Any]:
    """`profiler` entered and exited with file descriptor 2 sent to /dev/null meanwhile, and
    only then: torch 2.13's profiler writes two lines of its own to the process's stderr at
    each start and stop ("USDT: ... SyncActivityProfilerHandler.cpp:52] profiler_start"), Kineto
    or not, whatever KINETO_LOG_LEVEL says; on `--verbose` they reached the user's terminal
    from every profiled cell. The profiled steps themselves write to stderr as usual."""
    with _stderr_silenced():
        entered = profiler.__enter__()
    try:
        yield entered
    finally:
        with _stderr_silenced():
            profiler.__exit__(None, None, None)


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def source(steps: int) -> str:
    return f"torch.profiler CUDA kernel time over {steps} steps"


def busy_us(events: Iterable[Any]) -> float | None:
    """The union of the device events' intervals, microseconds; None when there are none."""
    from torch.autograd import DeviceType

    intervals = sorted(
        (e.time_range.start, e.time_range.end) for e in events if e.device_type == DeviceType.CUDA
    )
    if not intervals:
        return None
    total, (start, end) = 0.0, intervals[0]
    for begin, finish in intervals[1:]:
        if begin > end:
            total += end - start
            start, end = begin, finish
        else:
            end = max(end, finish)
    return total + end - start


def profile_steps(
    step: Callable[[], None], steps: int, sync: Callable[[], None], host: BusyEvidence
) -> BusyEvidence:
    """`host` (the timed steps' CPU figures) with the device's busy time and the wall time
    per step of `steps` calls of `step` under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    timer = StepTimer(sync)
    with quietly(profile(activities=[ProfilerActivity.CUDA])) as profiler:
        for _ in range(steps):
            timer.start()
            step()
            timer.stop()
    busy = busy_us(profiler.events())
    host.source = source(steps)
    host.busy_steps = steps
    host.busy_step_s = sum(timer.times_s) / steps
    if busy is None:
        host.unavailable["device_busy_fraction"] = (
            "torch.profiler recorded no CUDA activity (CUPTI unavailable or not permitted)"
        )
    else:
        host.device_busy_s = busy / 1e6 / steps
    return host


# The op every dtype conversion goes through: autocast's casts of weights and inputs
# (`aten::to` -> `aten::_to_copy`), their gradients' casts back in the backward
# (ToCopyBackward0), and the float32 output's `.float()`. Its inclusive CPU time holds the
# conversion's `aten::copy_` and the new tensor's allocation, and nothing else: a copy that
# converts nothing calls `aten::copy_` directly.
CAST_OP = "aten::_to_copy"


def cast_source(steps: int) -> str:
    return f"torch.autograd.profiler CPU time of {CAST_OP} over {steps} steps"


def cast_us(events: Iterable[Any]) -> float:
    """The inclusive CPU time of the dtype conversions in a profiler's `key_averages()`,
    microseconds (0.0 when none ran: a float32 step)."""
    return sum(e.cpu_time_total for e in events if e.key == CAST_OP)


def cpu_op_profiler() -> Any:
    """A profiler of the per-op CPU events. The autograd profiler's own recorder, without
    Kineto: its first start took 0.3-0.6 ms in a new process, where torch.profiler's (Kineto)
    took 0.86-0.92 s before any parallel work had run and 0.7 ms after a few training steps
    (torch 2.13, a 2-core AMX Xeon, load average 0.4-0.7), so a cell never pays Kineto's
    start-up whatever ran before; both give `key_averages()`. Kineto where a build has no
    other (`use_kineto=False` refused)."""
    import torch

    try:
        return torch.autograd.profiler.profile(use_kineto=False)
    except (TypeError, RuntimeError):
        from torch.profiler import ProfilerActivity, profile

        return profile(activities=[ProfilerActivity.CPU])


def profile_casts(
    step: Callable[[], None], steps: int, sync: Callable[[], None], host: BusyEvidence
) -> BusyEvidence:
    """`host` with the share of the step spent converting dtypes, from `steps` calls of
    `step` under a CPU op profiler (on a CPU the cores are the device: its op events are the
    device's work). A 16-bit step on a CPU converts every input batch and weight to its dtype
    and the gradients back: at small widths that, not the matmuls, is where much of its time
    goes (docs/policies.md, "CPUs"). The profiler's own cost lengthens the profiled steps a
    little; the share is taken of those steps' wall time, so it is a share of like with
    like."""
    timer = StepTimer(sync)
    with quietly(cpu_op_profiler()) as profiler:
        for _ in range(steps):
            timer.start()
            step()
            timer.stop()
    wall_us = sum(timer.times_s) * 1e6
    host.cast_source = cast_source(steps)
    host.cast_share = min(1.0, cast_us(profiler.key_averages()) / wall_us) if wall_us else None
    return host
