"""Test hooks that make a cell fail on purpose, to prove a failing cell loses nothing else.

Set MPBENCH_FAULT=<kind>[@<text>] in the environment of `mpbench run`; the fault fires in
every cell whose id contains <text> (every cell without it). The ranks of a torchrun job
match against `<cell id>#rank<R>`, so `hang@#rank1` hangs rank 1 of every job alone (the
cell process, whose id has no `#`, is spared). A comma-separated list gives each cell the
first fault whose text its id contains (`raise@r0,crash@r1`): the cells of one environment,
so one fork server serves them all (a server is started per environment, zygote.py). Kinds:
  raise    the cell raises an exception                  -> status error
  oom      the cell exhausts memory (MemoryError)        -> status oom
  hang     the cell never finishes                       -> status timeout
  crash    the cell process aborts (SIGABRT)             -> status error
  diverge  training with a huge learning rate            -> status diverged
  alloc    torch's CPU allocator refuses a huge tensor   -> status oom (torch's own message)
  sigkill  the cell process SIGKILLs itself              -> status error, or oom where the
           cgroup's oom_kill count rose meanwhile
  silent   the cell sleeps in a C call that holds the GIL: no events, and no Python code
           runs (signal handlers, the lifeline thread)   -> status timeout
  spawn    the cell starts a grandchild process, and both never finish -> status timeout
  deaf     the cell ignores SIGTERM and never finishes: only the parent's SIGKILL after
           its grace period ends it                      -> status timeout
  slow     every timed step takes SLOW_STEP_S longer (a sleep inside the step timer's
           interval), whatever this CPU is               -> status stopped, where its float32
           twin's step is under a tenth of that (backends/stopping.py)
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import subprocess
import sys
import time

FAULT_ENV = "MPBENCH_FAULT"
KINDS = (
    "raise",
    "oom",
    "hang",
    "crash",
    "diverge",
    "alloc",
    "sigkill",
    "silent",
    "spawn",
    "deaf",
    "slow",
)
SLOW_STEP_S = 0.2


def requested_fault(cell_id: str) -> str | None:
    """The kind of the first fault of MPBENCH_FAULT's list whose text `cell_id` contains."""
    value = os.environ.get(FAULT_ENV, "").strip()
    if not value:
        return None
    faults = [fault.strip().partition("@") for fault in value.split(",")]
    unknown = [kind for kind, _, _ in faults if kind not in KINDS]
    if unknown:
        raise ValueError(
            f"{FAULT_ENV}={value!r}: {unknown[0]!r}: kind must be one of {', '.join(KINDS)}"
        )
    return next((kind for kind, _, scope in faults if scope in cell_id), None)


def inject(kind: str) -> None:
    """Called in the child before training starts."""
    # Into the cell's log: tests wait for this line to know the fault is in place.
    print(f"mpbench: injecting the {kind} fault ({FAULT_ENV})", file=sys.stderr, flush=True)
    if kind == "raise":
        raise RuntimeError(f"injected failure ({FAULT_ENV}=raise)")
    if kind == "oom":
        import numpy as np

        np.empty(1 << 62, dtype=np.uint8)  # numpy refuses: a genuine MemoryError
    if kind == "hang":
        while True:
            time.sleep(3600)
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGABRT)
    if kind == "diverge":
        from mpbench.workloads import spec

        for name, workload in list(spec.WORKLOADS.items()):
            optimizer = dataclasses.replace(workload.optimizer, learning_rate=1e30)
            spec.WORKLOADS[name] = dataclasses.replace(workload, optimizer=optimizer)
    if kind == "alloc":
        import torch

        torch.empty((1 << 50,), dtype=torch.uint8)  # a pebibyte: torch's allocator refuses
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "silent":
        # ctypes.PyDLL calls keep the GIL (CDLL calls release it).
        ctypes.PyDLL(None).sleep(1 << 30)
    if kind == "spawn":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        while True:
            time.sleep(3600)
    if kind == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(3600)
    if kind == "slow":
        _slow_steps()


def _slow_steps() -> None:
    """Every interval the one step timer measures (backends/timing.py) ends SLOW_STEP_S
    later: a step as slow as a policy that cannot pay, on any CPU."""
    from mpbench.backends.timing import StepTimer

    stop = StepTimer.stop

    def slower(timer: StepTimer) -> float:
        time.sleep(SLOW_STEP_S)
        return stop(timer)

    StepTimer.stop = slower  # type: ignore[method-assign]
