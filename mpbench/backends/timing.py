"""The one step timer every backend uses (docs/measurement.md): synchronise, then read the clock."""

from __future__ import annotations

import time
from collections.abc import Callable


class StepTimer:
    """Times each training step — or a whole end-to-end window, started once and stopped once
    (docs/measurement.md) — `sync` must block until the device has finished queued work
    (torch.cuda.synchronize, or reading a value from the step's outputs in Keras)."""

    def __init__(self, sync: Callable[[], None] = lambda: None) -> None:
        self._sync = sync
        self._started: float | None = None
        self.times_s: list[float] = []

    def start(self) -> None:
        self._sync()
        self._started = time.perf_counter()

    def stop(self) -> float:
        if self._started is None:
            raise RuntimeError("StepTimer.stop() without start()")
        self._sync()
        elapsed = time.perf_counter() - self._started
        self._started = None
        self.times_s.append(elapsed)
        return elapsed
