"""Warm fork servers: fork servers that outlive the run that started them and serve the
runs after it, so that a run does not import its framework again (4.6-5.5 s of CPU here
for torch with torch._dynamo).

Opt-in: MPBENCH_WARM_SERVERS=DIR (a folder of yours; the test suite sets it). A run then
looks in DIR for a warm server of its framework whose *import state* is its own, connects to
it, and gets a per-run server forked from it: zygote.py's server loop, in a process that has
already imported everything, serving this run's cells exactly as a server it had started
itself would (one cell at a time, each cell a fork with the run's own environment). Without
a matching warm server the run starts one in DIR and connects to it.

The import state is what a server's imports could have read, so a warm server serves only
runs that would have imported alike: its framework, the interpreter, mpbench's version and
source files (their modification times), the CPU affinity (a cell sizes its thread pools by
it), the resource limits, the whole environment but for the variables no import reads (a
cell's timeout, pytest's current test name, DIR itself, the machine's name, what Ray and
Slurm set per job on a fleet's node, and those named in MPBENCH_WARM_IGNORE), and the
working directory where an import could read it. Each distinct state gets its own warm
server, named by a digest of it; it is started without the variables left out, and each
cell gets the run's whole environment, as always.

The working directory: a new interpreter puts it first on sys.path, so anything there could
shadow what the server imports. Where nothing the server imports is found there (mpbench is
not under it, PYTHONPATH has no relative entry, Python is 3.11 or later), the warm server is
started with `-P` (no working directory on sys.path) in `/`, and runs from any folder share
it: each fork (a cell, a helper job) moves into its run's folder and puts it first on
sys.path, as `python -m` in that folder would have (zygote.py). Otherwise the folder is part
of the state, as before.

A warm server exits after IDLE_S seconds without a new run (MPBENCH_WARM_IDLE_S sets
another; `pkill mpbench-warmsrv` ends it sooner). A run that cannot use one (a path too
long for a Unix socket, a server that does not answer) starts its own server, as it does
without DIR.

Protocol: the run connects to DIR/<framework>-<digest>.sock (SOCK_SEQPACKET) and sends
{"log": true} with one descriptor, its own fork-server log; the warm server forks, and the
fork takes that log as its stdout and stderr (what it prints lands in the run's folder, as a
server of the run's own would print it, and every process of a run holds a file of the run
open), answers {"ready": true, "import_s": 0, "pid": its pid}, then speaks zygote.py's
protocol on that connection. It ends when the run closes its end.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import mpbench
from mpbench.machine import MACHINE_ENV
from mpbench.runner.launchers.process_names import WARM_SERVER_NAME

WARM_ENV = "MPBENCH_WARM_SERVERS"
SERVER_MODULE = "mpbench.runner.launchers.warm_server"  # what a warm server runs
# Names (comma-separated) of more variables that differ between your runs and that no
# import reads, such as a per-run output folder read only when a cell runs.
IGNORE_ENV = "MPBENCH_WARM_IGNORE"
IDLE_S = 120.0
IDLE_ENV = "MPBENCH_WARM_IDLE_S"  # another idle time, in seconds
# Variables that differ from run to run and that no import reads: they do not keep a run
# from a warm server started under other values, and a warm server is started without them
# (each cell gets the run's own, as always).
# (A cell's timeout is not in the environment given here: zygote.py's _import_environment
# leaves it out of every server's.) The machine's name is read when a run writes its records.
# A fleet's node runs: Ray gives each job's worker processes the job's id and their node's
# raylet pid, and Slurm gives each job its SLURM_* variables (its id, partition, ports, task
# pid); with them a node would import its framework again for every job (seven warm servers
# for tests/fleet/test_fleet_ray.py's runs, three for test_fleet_slurm.py's, which differ in
# nothing else).
NOT_READ_BY_IMPORTS = frozenset(
    {"PYTEST_CURRENT_TEST", WARM_ENV, IGNORE_ENV, MACHINE_ENV, "RAY_JOB_ID", "RAY_RAYLET_PID"}
)
NOT_READ_BY_IMPORTS_PREFIXES = ("SLURM_",)


def _read_by_imports(env: Mapping[str, str]) -> dict[str, str]:
    ignored = NOT_READ_BY_IMPORTS | {n.strip() for n in env.get(IGNORE_ENV, "").split(",")}
    return {
        key: value
        for key, value in sorted(env.items())
        if key not in ignored and not key.startswith(NOT_READ_BY_IMPORTS_PREFIXES)
    }


# A Unix socket's path is at most 107 bytes (sun_path); longer: no warm server.
_MAX_SOCKET_PATH = 100
_BIND_WAIT_S = 30.0  # a new warm server binds its socket before it imports anything
_LIMITS = ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_STACK")


def import_state(framework: str, env: Mapping[str, str]) -> dict[str, object]:
    """What a server's imports could have read (the module docstring says why each)."""
    package = Path(mpbench.__file__).parent
    sources = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        sources.update(f"{path}:{path.stat().st_mtime_ns}\n".encode())
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {
        "framework": framework,
        "python": sys.executable,
        "mpbench": mpbench.__version__,
        "sources": sources.hexdigest(),
        "cwd": os.getcwd() if imports_read_cwd(env) else None,
        "cpus": affinity,
        "limits": [resource.getrlimit(getattr(resource, name)) for name in _LIMITS],
        "env": _read_by_imports(env),
    }


def imports_read_cwd(env: Mapping[str, str]) -> bool:
    """Whether a server's imports could read the working directory (the module docstring):
    mpbench itself lives under it (a checkout run as `python -m mpbench` from its root), a
    PYTHONPATH entry is relative to it, or Python has no -P (before 3.11)."""
    if sys.version_info < (3, 11):
        return True
    if Path(mpbench.__file__).resolve().is_relative_to(Path.cwd().resolve()):
        return True
    entries = env.get("PYTHONPATH", "")
    return bool(entries) and not all(os.path.isabs(e) for e in entries.split(os.pathsep))


def socket_path(folder: Path, framework: str, env: Mapping[str, str]) -> Path:
    state = json.dumps(import_state(framework, env), sort_keys=True).encode()
    return folder / f"{framework}-{hashlib.sha256(state).hexdigest()[:16]}.sock"


class RunServer:
    """The per-run server forked by a warm server: not this run's child, so it is watched
    through a pidfd (its exit, a kill), and its exit status is not the run's to read."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)

    def wait(self, timeout: float | None = None) -> None:
        """Until it has ended (no exit status: see the class docstring)."""
        if not self._gone(timeout):
            raise subprocess.TimeoutExpired(f"fork server {self.pid}", timeout or 0)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def _gone(self, timeout: float | None) -> bool:
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(ready)


def connect(
    framework: str,
    env: Mapping[str, str],
    folder: Path,
    server_env: Mapping[str, str],
    log_path: Path,
) -> socket.socket | None:
    """A connection to the warm server for this import state, starting one in `folder` if
    there is none, with `log_path` handed to the per-run server it forks (the module
    docstring's protocol); None where none can serve (the run then starts its own server)."""
    path = socket_path(folder, framework, env)
    if len(str(path)) > _MAX_SOCKET_PATH or not hasattr(os, "pidfd_open"):
        return None
    folder.mkdir(parents=True, exist_ok=True)
    started: subprocess.Popen | None = None
    deadline = time.monotonic() + _BIND_WAIT_S
    while time.monotonic() < deadline:
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            channel.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            channel.close()
        else:
            return _with_log(channel, log_path)
        if started is None:
            # Where no import reads the folder, none is on the server's sys.path and it
            # runs in / (its first run's folder may be gone long before it is).
            anywhere = not imports_read_cwd(env)  # as socket_path's state has it
            with open(path.with_suffix(".log"), "ab") as log:
                started = subprocess.Popen(
                    [sys.executable, *(["-P"] if anywhere else []), "-m", SERVER_MODULE,
                     framework, str(path.absolute())],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # it outlives this run, and its Ctrl-C
                    env=_read_by_imports(server_env),
                    cwd="/" if anywhere else None,
                )  # fmt: skip
        elif started.poll() not in (None, 0):
            return None  # it failed before it could bind: its log says why
        time.sleep(0.02)
    return None


def _with_log(channel: socket.socket, log_path: Path) -> socket.socket | None:
    """The channel, once the run's log has been sent on it; None if it could not be (the
    warm server went meanwhile: the run starts its own server)."""
    try:
        with open(log_path, "ab") as log:
            socket.send_fds(channel, [json.dumps({"log": True}).encode()], [log.fileno()])
    except OSError:
        channel.close()
        return None
    return channel


def take_log(channel: socket.socket) -> bool:
    """In a per-run server: the run's log as stdout and stderr; False if the run left before
    it sent one."""
    try:
        _, fds, _, _ = socket.recv_fds(channel, 1024, 1)
    except OSError:
        return False
    if not fds:
        return False
    for target in (1, 2):
        os.dup2(fds[0], target)
    os.close(fds[0])
    return True


def stop_warm_servers(folder: Path) -> int:
    """SIGTERM every warm server of `folder` (their per-run servers end with their runs);
    how many there were."""
    stopped = 0
    for pid_file in folder.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            # Only a warm server: the pid of one that already ended may be another's now.
            if Path(f"/proc/{pid}/comm").read_text().strip() == WARM_SERVER_NAME:
                os.kill(pid, signal.SIGTERM)
                stopped += 1
    return stopped
