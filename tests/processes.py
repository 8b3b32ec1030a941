"""Finding a test's processes: every process a test starts carries MPBENCH_MARK=<mark> in its
environment (inherited by cells, their lifeline watchers and grandchildren), so "nothing was
left behind" is a scan for that mark."""

from __future__ import annotations

import subprocess

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
