"""Finding a test's processes, so that "nothing was left behind" is a scan:
- by MPBENCH_MARK=<mark> in the environment a process was started with (inherited by new
  cells, their lifeline watchers and grandchildren, torchrun's ranks): `marked`;
- by the files of a folder they hold open: `holding`. A run's forks of the suite's warm
  servers (runner/launchers/warm.py) show the warm server's environment, not the run's, but
  each of a run's processes holds a file of its run folder open: the run its cell's log,
  each cell (and what it starts) that log as stdout and stderr, the run's fork server its
  fork-server log (handed over by the run where the server is a warm server's fork). A
  cell's lifeline watcher holds nothing but its stdin: it is found in its cell's session
  (`run_processes`), while the cell lives; `still_running` then follows those seen."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest

from mpbench.runner.launchers.process_names import WARM_SERVER_NAME


def marked(mark: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose environment has MPBENCH_MARK=mark, but warm
    servers: they outlive runs by design (runner/launchers/warm.py; the session ends them),
    while the server each forks for a run, and that run's cells, must not."""
    found = []
    for process in psutil.process_iter():
        try:
            live = process.status() != psutil.STATUS_ZOMBIE and process.name() != WARM_SERVER_NAME
            if live and process.environ().get("MPBENCH_MARK") == mark:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def holding(folder: Path) -> list[psutil.Process]:
    """Live processes but this one and warm servers (as `marked`) with a file under `folder`
    open: /proc/PID/fd's links, which the kernel keeps whatever the process's environment."""
    inside = f"{Path(folder).resolve()}/"
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid == os.getpid() or process.name() == WARM_SERVER_NAME:
                continue
            if process.status() != psutil.STATUS_ZOMBIE and _holds(process.pid, inside):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def run_processes(folder: Path) -> list[psutil.Process]:
    """`holding(folder)`, and the processes in the sessions they lead: a cell (a session of
    its own) with its lifeline watcher, which holds no file."""
    found = holding(folder)
    leaders = {process.pid for process in found}
    for process in psutil.process_iter():
        try:
            if process.pid not in leaders and os.getsid(process.pid) in leaders:
                found.append(process)
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            continue
    return found


def still_running(seen: list[psutil.Process], folder: Path) -> list[psutil.Process]:
    """Of the processes `seen` earlier, those still alive (not zombies; psutil tells a
    reused pid apart), and whatever holds a file under `folder` now."""
    left = {process.pid: process for process in holding(folder)}
    for process in seen:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.setdefault(process.pid, process)
        except psutil.NoSuchProcess:
            continue
    return list(left.values())


def _holds(pid: int, inside: str) -> bool:
    try:
        entries = list(os.scandir(f"/proc/{pid}/fd"))
    except OSError:  # gone, or not ours to read
        return False
    for entry in entries:
        try:
            if os.readlink(entry.path).startswith(inside):
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def finished(process: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess[str]:
    """A process started with stdout and stderr piped (text), once it ended: what
    subprocess.run(args, capture_output=True, text=True, timeout=timeout) gives, killed past
    `timeout` as run kills it. For runs a module fixture starts together in the background."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def stop(processes) -> None:
    """A module fixture's teardown: kill whichever of its background processes still run,
    and reap them all (their pipes drained), so none outlives the module."""
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


def selected_tests(request: pytest.FixtureRequest) -> list[pytest.Item]:
    """The tests of the requesting module that this session runs (not deselected by -k or
    -m): a module fixture starts only the runs they read."""
    return [item for item in request.session.items if item.path == request.node.path]
