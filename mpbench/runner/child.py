"""The child process that runs exactly one cell (DESIGN.md §4: one process per cell).

Usage: python -m mpbench.runner.child SPEC_JSON EVENTS_FD
It reports to the parent through JSON lines on EVENTS_FD — progress, warnings, and one final
`done` (measurements) or `failed` (status + reason) event — and never lets an exception
escape as a bare traceback: the parent turns whatever happens into a record.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from typing import Any

from mpbench.backends import INSTALL_HINTS, get_backend
from mpbench.backends.base import CellSpec, Diverged, Unsupported
from mpbench.errors import InvalidInput
from mpbench.runner.faults import inject, requested_fault

_OOM_NAMES = {"OutOfMemoryError", "ResourceExhaustedError", "MemoryError", "_ArrayMemoryError"}
_PROGRESS_INTERVAL_S = 0.2  # the parent redraws a few times a second; no need for more


class Events:
    def __init__(self, fd: int) -> None:
        self._stream = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
        self._last_progress = 0.0

    def send(self, event: str, **payload: Any) -> None:
        self._stream.write(json.dumps({"event": event, **payload}, default=_plain) + "\n")
        self._stream.flush()

    def progress(self, step: int, total: int) -> None:
        now = time.monotonic()
        if step == total or now - self._last_progress >= _PROGRESS_INTERVAL_S:
            self._last_progress = now
            self.send("step", step=step, total=total)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, one-line reason) for an exception raised while running a cell."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, Diverged):
        return "diverged", message
    if isinstance(exc, Unsupported):
        return "skipped", message
    oom = any(t.__name__ in _OOM_NAMES for t in type(exc).__mro__)
    if oom or "out of memory" in message.lower():
        return "oom", f"{type(exc).__name__}: {message}"[:500]
    if isinstance(exc, InvalidInput):
        return "error", message
    return "error", f"{type(exc).__name__}: {message}"[:500]


def run(spec: CellSpec, events: Events) -> None:
    fault = requested_fault(spec.cell_id)
    if fault:
        inject(fault)
    try:
        backend = get_backend(spec.framework)
    except ImportError as exc:
        hint = INSTALL_HINTS[spec.framework]
        events.send(
            "failed", status="skipped", reason=f"cannot import {spec.framework} ({exc}): {hint}"
        )
        return
    measurements = backend.run_cell(
        spec, events.progress, lambda message: events.send("warning", message=message)
    )
    events.send("done", measurements=dataclasses.asdict(measurements))


def main(argv: list[str]) -> int:
    spec_path, fd = argv[1], int(argv[2])
    events = Events(fd)
    with open(spec_path, encoding="utf-8") as fh:
        spec = CellSpec(**json.load(fh))
    try:
        run(spec, events)
    except Exception as exc:
        status, reason = classify(exc)
        if status == "error":
            traceback.print_exc()  # into the cell's log file, for the curious
        events.send("failed", status=status, reason=reason)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
