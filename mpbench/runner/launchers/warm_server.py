"""A warm server's own side (warm.py has the run's, and what both share): bind the socket,
import the framework, then fork a per-run server for each run that connects, which serves
the run's cells with zygote.py's loop; leave after the idle time without a new run."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

from mpbench.runner.launchers.cell import exit_now
from mpbench.runner.launchers.process_names import SERVER_NAME, WARM_SERVER_NAME, set_process_name
from mpbench.runner.launchers.warm import IDLE_ENV, IDLE_S, take_log
from mpbench.runner.launchers.zygote import fork_hazard, preload, send, serve_cells


def serve_warm(framework: str, path: Path) -> int:
    """Bind, import, then fork a per-run server for each run that connects; exit after
    IDLE_S seconds without one."""
    set_process_name(WARM_SERVER_NAME)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if not _bind(listener, path):
        return 0  # another warm server of this state got there first: the run connects to it
    listener.listen(64)
    mine = os.stat(path).st_ino
    path.with_suffix(".pid").write_text(str(os.getpid()))
    started = time.monotonic()
    try:
        preload(framework)
    except BaseException:
        traceback.print_exc()
        _unlink(path, mine)
        return 1  # the runs waiting get no ready message: each starts its own server
    print(f"{framework} imported in {time.monotonic() - started:.2f} s", flush=True)
    # Its per-run servers are reaped by the kernel; each sets the default back, to wait for
    # its own cells.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    idle_s = float(os.environ.get(IDLE_ENV) or IDLE_S)
    while select.select([listener], [], [], idle_s)[0]:
        if not _fork_for_a_run(framework, listener):
            _unlink(path, mine)
            return 1
    _unlink(path, mine)  # idle: no new run can find it now; serve those already queued
    while select.select([listener], [], [], 0)[0]:
        _fork_for_a_run(framework, listener)
    return 0


def _fork_for_a_run(framework: str, listener: socket.socket) -> bool:
    """Accept a run and fork its server; False if no fork may be made (CUDA in use here)."""
    channel, _ = listener.accept()
    creds = channel.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    print(f"serving run {struct.unpack('3i', creds)[0]}", flush=True)
    hazard = fork_hazard(framework)
    if hazard:
        send(channel, {"ready": False, "error": hazard})
        channel.close()
        return False
    sys.stdout.flush()
    if os.fork() == 0:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        set_process_name(SERVER_NAME)
        if not take_log(channel):
            exit_now(0)  # the run is gone before it said where to log: nothing to serve
        send(channel, {"ready": True, "import_s": 0.0, "pid": os.getpid()})
        exit_now(serve_cells(framework, channel))
    channel.close()
    return True


def _bind(listener: socket.socket, path: Path) -> bool:
    """Bind the socket at `path`, taking over a stale one (its server died); False if a
    live warm server holds it."""
    try:
        listener.bind(str(path))
        return True
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect(str(path))
        return False  # alive (the per-run server it forks for the probe sees it close)
    except ConnectionRefusedError:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    finally:
        probe.close()
    try:
        listener.bind(str(path))
        return True
    except OSError:
        return False  # another new server took it over between the two


def _unlink(path: Path, inode: int) -> None:
    """Remove the socket (and pid file) if it is still this server's."""
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == inode:
            path.unlink()
            path.with_suffix(".pid").unlink(missing_ok=True)


if __name__ == "__main__":
    exit_now(serve_warm(sys.argv[1], Path(sys.argv[2])))
