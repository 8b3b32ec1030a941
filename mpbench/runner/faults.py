"""Test hooks that make a cell fail on purpose, to prove a failing cell loses nothing else.

Set MPBENCH_FAULT=<kind>[@<text>] in the environment of `mpbench run`; the fault fires in
every cell whose id contains <text> (every cell without it). Kinds:
  raise    the cell raises an exception           -> status error
  oom      the cell exhausts memory (MemoryError) -> status oom
  hang     the cell never finishes                -> status timeout
  crash    the cell process aborts (SIGABRT)      -> status error
  diverge  training with a huge learning rate     -> status diverged
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

FAULT_ENV = "MPBENCH_FAULT"
KINDS = ("raise", "oom", "hang", "crash", "diverge")


def requested_fault(cell_id: str) -> str | None:
    value = os.environ.get(FAULT_ENV, "").strip()
    if not value:
        return None
    kind, _, scope = value.partition("@")
    if kind not in KINDS:
        raise ValueError(f"{FAULT_ENV}={value!r}: kind must be one of {', '.join(KINDS)}")
    return kind if scope in cell_id else None


def inject(kind: str) -> None:
    """Called in the child before training starts."""
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
