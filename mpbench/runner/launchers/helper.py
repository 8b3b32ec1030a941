"""A run's short Python jobs before its first cell (a user workload's probe,
workloads/user.py; its data check, runner/user_check.py), run where they cost least.

Each imports the user's module, and with it the framework its model is built in. As new
interpreters, a `-w hf:...` run imported torch three times: in the probe, in the check and
in the fork server its cells fork from. Where the run has warm servers (warm.py,
MPBENCH_WARM_SERVERS), a job is forked from the warm server of the framework it will import
instead, as a cell is: torch (or TensorFlow) is imported already, and only the user's module
and what it adds are imported in the fork. Which framework: a zoo name's own (hf:,
torchvision: and timm: are torch, keras: TensorFlow); for a module of the user's, torch
where it is installed (it imports whichever it imports, in the fork, as a new interpreter
would). The job's answer cannot depend on where it ran: it is the same `main(argv)`, with
the run's environment and working directory, its output captured alike.

Without warm servers, or where none can serve (the framework is not installed, the server
does not start), the job is a new interpreter, as it always was.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from mpbench.runner.launchers import warm
from mpbench.runner.launchers.process import available_cores, thread_environment
from mpbench.runner.launchers.zygote import ForkedCell, ForkServer, ServerGone
from mpbench.workloads import spec
from mpbench.workloads.spec import LanguageModel, Workload
from mpbench.workloads.user import UserWorkloadInfo, run_in_new_interpreter


def run_main(
    target: str, argv: list[str], timeout: float, framework: str | None
) -> subprocess.CompletedProcess[str]:
    """`target`'s main ("module:function", called with `argv`; what it returns is the exit
    status) in a process of its own, stdout and stderr captured: forked from `framework`'s
    warm server where there is one (the module docstring), else a new interpreter.
    subprocess.TimeoutExpired past `timeout` seconds, as subprocess.run raises it."""
    framework = framework or _default_framework()
    forked = _forked(target, argv, timeout, framework) if framework else None
    return forked if forked is not None else run_in_new_interpreter(target, argv, timeout)


def _default_framework() -> str | None:
    for framework in ("torch", "tensorflow"):
        if importlib.util.find_spec(framework) is not None:
            return framework
    return None


def _forked(
    target: str, argv: list[str], timeout: float, framework: str
) -> subprocess.CompletedProcess[str] | None:
    """The job forked from the warm server of `framework`; None where there is none to use
    (no MPBENCH_WARM_SERVERS, the framework not installed, the server not answering)."""
    folder = os.environ.get(warm.WARM_ENV, "").strip()
    linux = sys.platform.startswith("linux")
    if not folder or not linux or importlib.util.find_spec(framework) is None:
        return None
    # A default cell's environment (the thread count a cell has unless --threads says
    # otherwise), so that the job finds the server the run's cells will use.
    env = thread_environment(available_cores())
    try:
        server = ForkServer(framework, env, Path(os.devnull), Path(folder), warm_only=True)
    except (ServerGone, OSError):
        return None  # the job goes on as a new interpreter; the run's cells will say more
    try:
        return _run_forked(server, env, target, argv, timeout)
    finally:
        server.close()


def _run_forked(
    server: ForkServer, env: dict[str, str], target: str, argv: list[str], timeout: float
) -> subprocess.CompletedProcess[str] | None:
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    job = {"main": target, "argv": list(argv)}
    try:
        pid = server.fork(env, null, null, out_write, err_write, helper=job)
    except ServerGone:
        for fd in (out_read, err_read):
            os.close(fd)
        return None
    finally:
        for fd in (out_write, err_write, null):
            os.close(fd)
    deadline = time.monotonic() + timeout
    stdout, stderr = _read_both(out_read, err_read, deadline)
    job_process = ForkedCell(server, pid, stdin=None)
    left = max(0.0, deadline - time.monotonic())
    if stdout is None or not server.await_exit(job_process, left):
        for kill in (os.killpg, os.kill):  # its own group (zygote.py), once it has one
            with contextlib.suppress(ProcessLookupError):
                kill(pid, signal.SIGKILL)
        raise subprocess.TimeoutExpired(f"{target} {' '.join(argv)}", timeout)
    command = [f"{target} (forked from the warm {server.framework} server)", *argv]
    return subprocess.CompletedProcess(command, job_process.returncode, stdout, stderr or "")


def _read_both(out_read: int, err_read: int, deadline: float) -> tuple[str | None, str | None]:
    """All the job wrote on both pipes, until it closed them (it ended); (None, None) past
    the deadline. Both descriptors are closed."""
    chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
    open_fds = [out_read, err_read]
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, None
            ready, _, _ = select.select(open_fds, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    chunks[fd].append(chunk)
                else:
                    open_fds.remove(fd)
    finally:
        os.close(out_read)
        os.close(err_read)
    return (
        b"".join(chunks[out_read]).decode(errors="replace"),
        b"".join(chunks[err_read]).decode(errors="replace"),
    )


def describe_workload(name: str) -> Workload | LanguageModel | UserWorkloadInfo:
    """A workload as the run knows it (workloads/spec.py's describe_workload), a user
    workload's probe run by run_main."""
    return spec.describe_workload(name, run_job=run_main)
