"""The child process that runs exactly one cell (docs/architecture.md: one process per cell).

Usage: python -m mpbench.runner.launchers.cell EVENTS_FD PARENT_PID
(or forked by a fork server, launchers/zygote.py, which calls main() with the same arguments)
The parent writes the CellSpec as one JSON line on stdin and keeps stdin open: it is the
cell's lifeline, and the cell dies, with all it started, when it closes or the parent dies.
It reports to the parent through JSON lines on EVENTS_FD — progress, warnings, and one final
`done` (measurements) or `failed` (status + reason) event — and never lets an exception
escape as a bare traceback: the parent turns whatever happens into a record.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import sys
import time
import traceback
from typing import Any, NoReturn

from mpbench.backends import INSTALL_HINTS, get_backend
from mpbench.backends.base import CellSpec, Diverged, Unsupported
from mpbench.errors import InvalidInput
from mpbench.runner.faults import inject, requested_fault
from mpbench.runner.launchers.process_names import CELL_NAME, WATCHER_NAME, set_process_name
from mpbench.telemetry.cell import CellDiverged

_OOM_NAMES = {"OutOfMemoryError", "ResourceExhaustedError", "MemoryError", "_ArrayMemoryError"}
_PROGRESS_INTERVAL_S = 0.2  # the parent redraws a few times a second; no need for more
# A failed CPU allocation: torch's "DefaultCPUAllocator: can't allocate memory: you tried to
# allocate N bytes", and ENOMEM's "Cannot allocate memory" wherever else it surfaces.
_OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory")
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class Events:
    """The cell's events to its parent, one JSON line each. It is the backend's `progress`
    too (backends/base.py): called with (step, total) after each step's clock read, it sends
    a `step` event at most every _PROGRESS_INTERVAL_S (and the last step always), keeping
    the latest one it held back; `phase(name)` sends that one first, then the phase, so the
    display never shows a stale count through a long phase."""

    def __init__(self, fd: int) -> None:
        # When the cell began, its spec just read: the time it has taken so far is what a
        # projection of its whole time starts from (backends/stopping.py).
        self.started = time.monotonic()
        self._stream = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
        self._last_progress = 0.0
        self._held: tuple[int, int] | None = None  # a step not sent (too soon after the last)

    def send(self, event: str, **payload: Any) -> None:
        self._stream.write(json.dumps({"event": event, **payload}, default=_plain) + "\n")
        self._stream.flush()

    def progress(self, step: int, total: int) -> None:
        now = time.monotonic()
        if step == total or now - self._last_progress >= _PROGRESS_INTERVAL_S:
            self._last_progress = now
            self._held = None
            self.send("step", step=step, total=total)
        else:
            self._held = (step, total)

    def __call__(self, step: int, total: int) -> None:  # the backends' progress(step, total)
        self.progress(step, total)

    def phase(self, name: str, **plan: int) -> None:
        """The cell enters phase `name` (backends/base.py's phases; `plan`: TRAINING's
        warmup, timed and total steps)."""
        if self._held is not None:
            step, total = self._held
            self._held = None
            self.send("step", step=step, total=total)
        self.send("phase", phase=name, **plan)


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
    if oom or any(text in message.lower() for text in _OOM_MESSAGES):
        return "oom", f"{type(exc).__name__}: {message}"[:500]
    if isinstance(exc, InvalidInput):
        return "error", message
    return "error", f"{type(exc).__name__}: {message}"[:500]


def run(spec: CellSpec, events: Events) -> None:
    fault = requested_fault(spec.cell_id)
    if fault:
        inject(fault)
    if spec.framework == "torch" and spec.world_size > 1:
        # A torchrun job: this process launches it and relays its ranks' events.
        from mpbench.runner.launchers.torchrun import run_job

        if importlib.util.find_spec("torch") is None:
            hint = INSTALL_HINTS["torch"]
            events.send("failed", status="skipped", reason=f"torch is not installed: {hint}")
            return
        run_job(spec, events.send, events)
        return
    try:
        backend = get_backend(spec.framework)
    except ImportError as exc:
        hint = INSTALL_HINTS[spec.framework]
        events.send(
            "failed", status="skipped", reason=f"cannot import {spec.framework} ({exc}): {hint}"
        )
        return
    measurements = backend.run_cell(
        spec, events, lambda message: events.send("warning", message=message)
    )
    events.send("done", measurements=measurements.to_dict())


def die_with_parent(parent_pid: int) -> None:
    """Make sure this cell never outlives its parent (docs/architecture.md), even while it is silent
    or stuck in a C call that holds the GIL."""
    if sys.platform.startswith("linux"):
        # prctl(2) PR_SET_PDEATHSIG: the kernel sends us SIGKILL when the parent *thread* that
        # created us terminates. run_in_child forks from the run's main thread, which lives as
        # long as the run. SIGKILL needs no Python code to run, so a stuck cell dies too. The
        # setting is cleared in a fork's child: the lifeline watcher outlives the cell.
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # A parent that died before prctl sends nothing: we have been re-parented already.
    if os.getppid() != parent_pid:
        _die()


def watch_lifeline() -> None:
    """The portable lifeline: stdin is a pipe whose write end only the parent holds, and end
    of file means the parent is gone (or done with us). A watcher blocked reading it then
    kills our whole process group: this cell and the grandchildren it started (compile or
    data workers). The watcher is a process of its own, not a thread of the cell: when the
    parent dies, the SIGKILL of PR_SET_PDEATHSIG reaches the cell within microseconds of that
    end of file, and a thread would die with the cell, leaving the grandchildren running."""
    cell = os.getpid()
    if os.fork() != 0:
        return
    try:  # the watcher: it holds nothing but stdin, so the parent still sees the cell's exit
        os.closerange(1, os.sysconf("SC_OPEN_MAX"))
        set_process_name(WATCHER_NAME)
        while os.read(0, 4096):  # the parent writes nothing after the spec
            pass
        kill_process_group(cell)
    finally:
        os._exit(0)


def kill_process_group(leader: int) -> None:
    """SIGKILL the cell `leader` and everything it started: run_in_child starts a cell as the
    leader of a new session (start_new_session=True), so its process group id is its pid."""
    with contextlib.suppress(ProcessLookupError):  # no such group: the cell was started by hand
        os.killpg(leader, signal.SIGKILL)


def _die() -> NoReturn:
    kill_process_group(os.getpid())
    os._exit(1)  # still here: not a group leader


def main(argv: list[str]) -> int:
    fd, parent_pid = int(argv[1]), int(argv[2])
    die_with_parent(parent_pid)  # first: the parent may die at any moment
    set_process_name(CELL_NAME)  # what ps shows, forked or not (launchers/zygote.py)
    line = sys.stdin.buffer.readline()  # the spec; stdin then stays open as the lifeline
    if not line.endswith(b"\n"):  # the parent went away before it sent the spec
        _die()
    watch_lifeline()
    spec = CellSpec(**json.loads(line))
    events = Events(fd)
    try:
        run(spec, events)
    except Exception as exc:
        send_failure(events, exc)
    return 0


def send_failure(events: Events, exc: Exception) -> None:
    """The final `failed` event for an exception that ended a cell (or a rank of one)."""
    if isinstance(exc, CellDiverged):  # a divergence signal: what it measured comes along
        events.send(
            "failed",
            status="diverged",
            reason=exc.divergence.reason,
            divergence=exc.divergence.to_dict(),
            telemetry=exc.telemetry,
        )
        return
    status, reason = classify(exc)
    if status == "error":
        traceback.print_exc()  # into the cell's log file, for the curious
    events.send("failed", status=status, reason=reason)


def exit_now(code: int) -> NoReturn:
    """End this process as a new one ends (its atexit handlers, its streams flushed) but
    without the interpreter's teardown of the framework it imported: about 1 s with torch
    loaded, which the run would wait for, or overlap with the next cell. Everything the cell
    measured has gone out on its events pipe before."""
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    try:
        exit_code = main(sys.argv)
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else 1
    exit_now(exit_code)
