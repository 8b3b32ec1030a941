"""How busy the host was over the timed steps: the process's CPU time against the wall time
(docs/measurement.md, "What limits a step"). Framework-neutral: both backends meter their
timed steps with it; the device's own busy time is each backend's (torch: profiled.py).

`time.process_time()` is the CPU time of every thread of this process, user and system
(Python's docs: "the sum of the system and user CPU time of the current process"): the
framework's intra-op threads, the Python thread that dispatches the ops, and mpbench's two
samplers beside the steps (docs/measurement.md, "What mpbench holds fixed"). Over the wall
time and the threads the step may use, it says what share of those threads were busy; a
thread waiting for a core another process holds counts as idle, so a contended cell reads
low (its record's `contention` says so).
"""

from __future__ import annotations

import os
import time

from mpbench.backends.base import BusyEvidence

CPU_SOURCE = "process CPU time"
# Why a CPU cell has no device-busy fraction: its cores are the host and the device at once.
CPU_DEVICE_BUSY = (
    "a CPU: its cores are the host and the device at once (host_busy_fraction and the "
    "roofline share stand for it)"
)


def cpu_threads(reported: int | None) -> int:
    """The intra-op threads a framework reports, or where it reports 0 (its default: one per
    core) the cores this process may run on."""
    if reported and reported > 0:
        return reported
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


class HostBusyMeter:
    """Started before the timed steps and stopped after them."""

    def __init__(self) -> None:
        self._cpu = self._wall = 0.0

    def start(self) -> HostBusyMeter:
        self._cpu, self._wall = time.process_time(), time.perf_counter()
        return self

    def stop(self, threads: int, source: str = CPU_SOURCE) -> BusyEvidence:
        """The host's figures; `threads`: those the CPU time is shared out among (the
        intra-op threads on a CPU, 1 where an accelerator runs the math)."""
        wall = time.perf_counter() - self._wall
        cpu = time.process_time() - self._cpu
        return BusyEvidence(source=source, host_cpu_s=cpu, host_wall_s=wall, threads=threads)
