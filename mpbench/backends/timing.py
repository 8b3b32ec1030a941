"""The one step timer every backend uses (DESIGN.md §5): synchronise, then read the clock."""

from __future__ import annotations

import time
from collections.abc import Callable


class StepTimer:
    """Times each training step; `sync` must block until the device has finished queued work
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


class WindowTimer:
    """Times a window of many steps with one synchronisation at its end (end-to-end
    throughput, DESIGN §5): what a training job sees, with the input path and the work
    between steps included and the device free to run ahead of the host."""

    def __init__(self, sync: Callable[[], None] = lambda: None) -> None:
        self._sync = sync
        self._started: float | None = None
        self.seconds: float | None = None

    def start(self) -> None:
        self._sync()  # nothing queued from before the window may count
        self._started = time.perf_counter()

    def stop(self) -> float:
        if self._started is None:
            raise RuntimeError("WindowTimer.stop() without start()")
        self._sync()
        self.seconds = time.perf_counter() - self._started
        self._started = None
        return self.seconds
