"""The run's signal policy: SIGTERM (CI cancellation, `timeout`, `kill`) and SIGHUP (a closed
terminal) stop a run exactly as Ctrl-C does: the running cell's process group is killed, the
finished records are kept, the resume hint is printed, and the exit code says which signal."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

# SIGHUP does not exist on Windows.
STOPPING_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when a stopping signal arrives; a KeyboardInterrupt, so every
    `except KeyboardInterrupt` / `except BaseException` cleanup path treats it as Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    pass


@contextlib.contextmanager
def stop_on_termination() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise `Terminated` and SIGINT KeyboardInterrupt, once:
    later ones are ignored until the block ends, so that an impatient second Ctrl-C or a
    supervisor's repeated SIGTERM cannot cut short the cleanup that kills the running cell and
    keeps the records. A signal the run was started with ignored (`nohup` ignores SIGHUP)
    stays ignored. Main thread only: Python delivers signals there, and handlers can only be
    installed there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    numbers = [signal.SIGINT, *STOPPING_SIGNALS]
    numbers = [number for number in numbers if signal.getsignal(number) is not signal.SIG_IGN]

    def stop(signum: int, _frame: FrameType | None) -> None:
        for number in numbers:
            signal.signal(number, _ignore)
        raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)

    previous = {number: signal.signal(number, stop) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def interrupted_exit_code(exc: BaseException) -> int:
    """128 + the signal's number, as shells report it: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
