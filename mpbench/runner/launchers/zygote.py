"""Fork servers: one process per framework that has imported it once and forks each cell.

A cell is still its own process, with a fresh framework state: the server imports the
framework (and what a cell imports on its first step) but builds nothing, touches no
device and starts no thread pool, so each fork begins where a new interpreter would be
after its imports, less the seconds they take. docs/architecture.md ("Starting a cell")
says what is shared, what is not, and why fork is safe here.

Used only where it was verified: Linux, a cell of one process, torch on the CPU or a
CUDA GPU, TensorFlow on the CPU. A torch server imports torch but never initialises CUDA, so
each fork creates its own CUDA context, as a new interpreter would: PyTorch marks a child as
a bad fork only when its parent had initialised CUDA. The server checks before each fork that
CUDA is still untouched, and each fork checks torch's own bad-fork flag before it runs a
cell; if either finds CUDA in use, the run warns and starts that framework's cells as new
processes. TensorFlow's import already loads the CUDA libraries
(tensorflow/tensorflow#29876) and has not been tried forked on a GPU, so TensorFlow GPU cells
start as new processes, as do torchrun jobs (their ranks are new processes anyway).
MPBENCH_FORK_SERVER=0 turns the servers off.

Protocol, over a SOCK_SEQPACKET socket pair (one JSON message per packet):
    server -> run    {"ready": true, "import_s": s} | {"ready": false, "error": "..."}
    run -> server    {"env": {...}} with 4 descriptors: stdin, events, stdout, stderr
                     and "cwd": the run's folder (a helper: also "main": "module:function"
                     and "argv": [...], its events descriptor unused: launchers/helper.py)
    server -> run    {"started": pid}, then {"exited": pid, "returncode": code}
                     | {"refused": "why"}: CUDA is in use in the server, or the fork found
                       itself a bad fork; the fork (if any) has exited, no cell ran
The server serves one cell at a time (cells never overlap) and exits when the run closes
its end; it dies with the run (parent-death signal) like a cell.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from mpbench.backends.base import CellSpec
from mpbench.runner.launchers import warm
from mpbench.runner.launchers.cell_timeout import CELL_TIMEOUT_ENV
from mpbench.runner.launchers.exits import how_it_ended
from mpbench.runner.launchers.process_names import SERVER_NAME, set_process_name

FORK_SERVER_ENV = "MPBENCH_FORK_SERVER"  # "0": every cell starts as a new process
# What a cell of each framework imports before its first step is done; torch imports
# torch._dynamo when an optimizer first steps (about 1 s here).
PRELOAD = {
    "torch": ("torch", "torch._dynamo", "mpbench.backends.torch.backend"),
    "tensorflow": ("tensorflow", "keras", "mpbench.backends.tensorflow.backend"),
}
# Set in a torch server's own environment (never a cell's): torch.cuda.is_available() then
# asks NVML and leaves CUDA uninitialised, should anything imported call it.
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
# A fork's own exit code when it found CUDA unusable before running anything (EX_TEMPFAIL).
BAD_FORK_EXIT = 75
READY_TIMEOUT_S = 300.0  # a first TensorFlow import from a cold disk can take a minute
_MESSAGE_BYTES = 1 << 20  # an environment is a few KiB
# ---------------------------------------------------------------------------------------
# The run's side


def usable(spec: CellSpec, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this cell may be forked from a server (the module docstring says why not)."""
    on_cpu = spec.device == "cpu"
    torch_on_cuda = spec.framework == "torch" and spec.device.split(":")[0] == "cuda"
    return (
        sys.platform.startswith("linux")
        and environ.get(FORK_SERVER_ENV, "1").strip() != "0"
        and spec.framework in PRELOAD
        and (on_cpu or torch_on_cuda)
        and spec.world_size == 1
    )


class ServerGone(RuntimeError):
    """The server closed its socket or died: the run falls back to new processes."""


class ForkRefused(ServerGone):
    """The server found CUDA in use (in itself, or in the fork): no cell can be forked."""


class ForkedCell:
    """A cell forked by a server, with the part of subprocess.Popen the runner uses. The
    cell is the server's child, so its exit status comes from the server."""

    def __init__(self, server: ForkServer, pid: int, stdin: IO[bytes] | None) -> None:
        self._server = server
        self.pid = pid
        self.stdin = stdin
        self.returncode: int | None = None
        self.args = f"cell {pid} forked by the {server.framework} fork server"
        # Why the cell died with its server (killed from outside, or crashed), or None: such
        # a cell was never measured, and runs again as a new process (launchers/process.py).
        self.server_died: str | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._server.await_exit(self, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._server.await_exit(self, timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """The run's handle on one server process: its own child, or the per-run fork of a warm
    server in `warm_dir` (warm.py), which this run then did not start."""

    def __init__(
        self,
        framework: str,
        env: Mapping[str, str],
        log_path: Path,
        warm_dir: Path | None = None,
        warm_only: bool = False,
    ) -> None:
        """`warm_only`: ServerGone where no warm server in `warm_dir` answers, instead of
        starting a server of this run's own (a helper job is then a new interpreter)."""
        self.framework = framework
        self.env = dict(env)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        server_env = dict(self.env)
        if framework == "torch":
            server_env[NVML_CHECK_ENV] = "1"  # the server's alone: a fork takes the cell's
        started = time.monotonic()
        channel = None
        if warm_dir is not None:
            channel = warm.connect(framework, self.env, warm_dir, server_env, log_path)
        self.warm = channel is not None
        if channel is not None:
            self._socket = channel
        elif warm_only:
            raise ServerGone(f"no warm {framework} server answered in {warm_dir}")
        else:
            self._socket, self.process = self._start(framework, server_env, log_path)
        reply = self._receive(READY_TIMEOUT_S)
        if reply is None or not reply.get("ready"):
            self._socket.close()
            if not self.warm:
                self.close()
            why = "no reply" if reply is None else reply.get("error", "no reason given")
            where = warm_dir if self.warm else log_path
            raise ServerGone(f"the {framework} fork server did not start: {why} (log: {where})")
        if self.warm:
            self.process = warm.RunServer(int(reply["pid"]))
        self.import_s = float(reply["import_s"])
        self.start_s = time.monotonic() - started

    @staticmethod
    def _start(
        framework: str, server_env: Mapping[str, str], log_path: Path
    ) -> tuple[socket.socket, subprocess.Popen]:
        """A server of this run's own: a new interpreter that imports the framework."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, framework, str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal is the run's to handle
                env=dict(server_env),
            )
        theirs.close()
        return ours, process

    def fork(
        self,
        env: Mapping[str, str],
        stdin: int,
        events: int,
        stdout: int,
        stderr: int,
        helper: Mapping[str, Any] | None = None,
    ) -> int:
        """Fork a cell with these descriptors as its 0, events, 1 and 2; its pid. `helper`
        ({"main": "module:function", "argv": [...]}) forks that instead. Either runs in this
        process's working directory."""
        request = {"env": dict(env), "cwd": os.getcwd(), **(helper or {})}
        payload = json.dumps(request).encode()
        try:
            socket.send_fds(self._socket, [payload], [stdin, events, stdout, stderr])
        except OSError as exc:
            raise ServerGone(f"the {self.framework} fork server is gone ({exc})") from exc
        reply = self._receive(READY_TIMEOUT_S)
        if reply is not None and "refused" in reply:
            raise ForkRefused(f"the {self.framework} fork server cannot fork: {reply['refused']}")
        if reply is None or "started" not in reply:
            raise ServerGone(f"the {self.framework} fork server did not fork: {reply}")
        return int(reply["started"])

    def await_exit(self, cell: ForkedCell, timeout: float | None) -> bool:
        """Wait up to `timeout` seconds (None: for ever) for the cell's exit status."""
        reply = self._receive(timeout)
        if reply is None:
            return False
        if reply.get("gone"):
            # The server died (killed from outside); its cells die with it (parent-death
            # signal), so the cell's own status is lost: report the kill that ended it.
            cell.returncode = -9
            cell.server_died = self.how_it_ended()
            return True
        if reply.get("exited") != cell.pid:
            raise ServerGone(f"the {self.framework} fork server answered {reply}")
        cell.returncode = int(reply["returncode"])
        return True

    def how_it_ended(self) -> str:
        """How the server process ended, in words ("was killed by SIGKILL"), once it has."""
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        # A warm server's fork is not this run's child: its exit status is not ours to read.
        return "ended" if self.warm else how_it_ended(code)

    def _receive(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message, None after `timeout` seconds, {"gone": True} if the server went."""
        ready, _, _ = select.select([self._socket], [], [], timeout)
        if not ready:
            return None
        try:
            data = self._socket.recv(_MESSAGE_BYTES)
        except OSError:
            data = b""
        return json.loads(data) if data else {"gone": True}

    def close(self) -> None:
        """End the server: it exits when its socket closes; SIGKILL if it has not in 5 s."""
        self._socket.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkServers:
    """The run's servers, started on a framework's first CPU cell, between cells (never
    while one is timed), and closed when the run ends. One server per framework: a cell
    whose environment differs from its server's (the import reads it) gets a new one."""

    def __init__(self, log_dir: Path, warn: Callable[[str], None] = lambda message: None) -> None:
        self._log_dir = log_dir
        self._warm_tried: set[str] = set()
        self._warn = warn
        self._servers: dict[str, ForkServer] = {}
        self._failed: set[str] = set()

    def start(
        self, spec: CellSpec, env: Mapping[str, str], events: int, stdout: int, stderr: int
    ) -> ForkedCell | None:
        """The cell forked from its framework's server, with a new lifeline pipe as its
        stdin (launchers/cell.py), or None: start it as a new process."""
        if not usable(spec, env) or spec.framework in self._failed:
            return None
        server = self._server(spec.framework, env)
        if server is None:
            return None
        lifeline_read, lifeline_write = os.pipe()
        try:
            pid = server.fork(env, lifeline_read, events, stdout, stderr)
        except ServerGone as exc:
            os.close(lifeline_write)
            self._give_up(spec.framework, str(exc))
            return None
        finally:
            os.close(lifeline_read)  # the cell has its copy: its write end is ours alone
        return ForkedCell(server, pid, os.fdopen(lifeline_write, "wb", buffering=0))

    def _server(self, framework: str, env: Mapping[str, str]) -> ForkServer | None:
        wanted = _import_environment(env)
        server = self._servers.get(framework)
        if server is not None and _import_environment(server.env) != wanted:
            server.close()  # one server per framework at a time: they hold ~0.5-1 GiB each
            del self._servers[framework]
            server = None
        if server is None:
            log = self._log_dir / f"fork-server-{framework}.log"
            server = self._warm_server(framework, wanted, log)
            if server is None:
                try:
                    server = ForkServer(framework, wanted, log)
                except (ServerGone, OSError) as exc:
                    self._give_up(framework, str(exc))
                    return None
            self._servers[framework] = server
        return server

    def _warm_server(self, framework: str, env: Mapping[str, str], log: Path) -> ForkServer | None:
        """The per-run fork of a warm server (warm.py), where the environment names a folder
        for them; None: the run starts a server of its own, as without one."""
        folder = env.get(warm.WARM_ENV, "").strip()
        if not folder or framework in self._warm_tried:
            return None
        try:
            return ForkServer(framework, env, log, warm_dir=Path(folder))
        except (ServerGone, OSError) as exc:
            self._warm_tried.add(framework)  # once: a server of its own from now on
            self._warn(f"no warm {framework} server in {folder} ({exc}); the run starts its own")
            return None

    def lost(self, cell: ForkedCell) -> str:
        """A cell died with its server: forget the server (its framework's cells start as
        new processes from now on) and say what happened, once."""
        server = cell._server
        why = (
            f"the {server.framework} fork server (pid {server.process.pid}) "
            f"{cell.server_died} while cell {cell.pid} ran; that cell was not measured"
        )
        self._give_up(server.framework, why)
        return why

    def _give_up(self, framework: str, why: str) -> None:
        self._failed.add(framework)
        server = self._servers.pop(framework, None)
        if server is not None:
            server.close()
        self._warn(f"{why}; its cells start as new processes")

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()

    def __enter__(self) -> ForkServers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _import_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a cell's environment its server must have had when it imported: all of
    it, but the cell's timeout, which only mpbench reads, after the fork."""
    return {key: value for key, value in env.items() if key != CELL_TIMEOUT_ENV}


# ---------------------------------------------------------------------------------------
# The server's side


def preload(framework: str) -> None:
    for module in PRELOAD[framework]:
        importlib.import_module(module)
    hazard = fork_hazard(framework)
    if hazard:
        raise RuntimeError(f"{hazard} while importing")


def fork_hazard(framework: str) -> str | None:
    """Why this server must not fork a cell, or None. A server that initialised CUDA would
    hand every fork a context it cannot use ("Cannot re-initialize CUDA in forked
    subprocess"); nothing in the server should, and this makes sure before each fork."""
    if framework == "torch":
        import torch

        if torch.cuda.is_initialized():
            return "torch initialised CUDA in the fork server"
    return None


def bad_fork(framework: str) -> str | None:
    """In a fork, before it runs anything: why CUDA cannot be used here, or None. torch sets
    its bad-fork flag in a child whose parent had initialised CUDA (an atfork handler
    registered at CUDA's first use), whatever the server's own check saw."""
    if framework == "torch":
        import torch

        if torch.cuda._is_in_bad_fork():
            return "the forked cell found CUDA initialised by its parent (a bad fork)"
    return None


def serve(framework: str, fd: int, parent_pid: int) -> int:
    from mpbench.runner.launchers.cell import die_with_parent

    die_with_parent(parent_pid)
    set_process_name(SERVER_NAME)
    channel = socket.socket(fileno=fd)
    started = time.monotonic()
    try:
        preload(framework)
    except BaseException as exc:
        traceback.print_exc()
        send(channel, {"ready": False, "error": f"{type(exc).__name__}: {exc}"[:500]})
        return 1
    send(channel, {"ready": True, "import_s": time.monotonic() - started})
    return serve_cells(framework, channel)


def serve_cells(framework: str, channel: socket.socket) -> int:
    """Fork a cell for each request on `channel` until the run closes its end (the module
    docstring's protocol); a warm server's per-run forks serve here too (warm.py)."""
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(channel, _MESSAGE_BYTES, 4)
        except OSError:
            return 0
        if not data:  # the run closed its end: it is over
            return 0
        request = json.loads(data)
        hazard = fork_hazard(framework)
        if hazard:
            for descriptor in fds:
                os.close(descriptor)
            send(channel, {"refused": hazard})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        # The fork says on this pipe whether it can run a cell before the run is told it
        # started: a refused fork has run nothing, so the run can start the cell anew.
        verdict_read, verdict_write = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns about fork in a process with threads. The one thread here
            # besides ours is numpy's OpenBLAS pool, which stops for a fork and starts again
            # in the child (its pthread_atfork handlers).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            os.close(verdict_read)
            try:
                why = bad_fork(framework)
            except BaseException as exc:  # an unknown torch: say so rather than guess
                why = f"cannot tell whether CUDA is usable in a fork ({exc!r})"
            os.write(verdict_write, json.dumps(why).encode())
            os.close(verdict_write)
            if why:
                os._exit(BAD_FORK_EXIT)
            _become_cell(channel, fds, request, parent=os.getppid())
        os.close(verdict_write)
        verdict = _read_all(verdict_read)
        for descriptor in fds:
            os.close(descriptor)
        if verdict != b"null":
            os.waitpid(pid, 0)
            why = json.loads(verdict) if verdict else "the fork died before it could start"
            send(channel, {"refused": why})
            continue
        send(channel, {"started": pid})
        _, status = os.waitpid(pid, 0)
        send(channel, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _read_all(fd: int) -> bytes:
    """Everything written to a pipe until its last writer closes it; then close ours."""
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _become_cell(channel: socket.socket, fds: list[int], request: dict, parent: int) -> None:
    """In the fork: the descriptors and environment a new cell process would have had, then
    the cell's own main (launchers/cell.py), or the helper's `main(argv)` where the request
    names one (in its `cwd`); never returns."""
    code = 1
    env = request["env"]
    try:
        from mpbench.runner.launchers.cell import exit_now, main

        channel.close()
        os.setsid()  # its own process group, as start_new_session gives a new process
        stdin, events, stdout, stderr = fds
        for source, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(source, target)
        for descriptor in {stdin, stdout, stderr} - {0, 1, 2}:
            os.close(descriptor)
        os.environ.clear()
        os.environ.update(env)
        # Python caches its temporary folder at first use: the cell's comes from its own
        # TMPDIR (a warm server, warm.py, may have been started under another).
        tempfile.tempdir = None
        # As a new process buffers: by line on a terminal (--verbose), else by block.
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
        sys.stderr.reconfigure(line_buffering=True)
        # The run's folder, first on sys.path as `python -m` there would put it (a warm
        # server may serve runs of any folder: warm.py).
        os.chdir(request["cwd"])
        if request["cwd"] not in sys.path and "" not in sys.path:
            sys.path.insert(0, request["cwd"])
        if "main" in request:
            os.close(events)
            module, _, function = request["main"].partition(":")
            code = getattr(importlib.import_module(module), function)(request["argv"])
        else:
            code = main(["cell", str(events), str(parent)])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            exit_now(code)  # as a new cell process ends; never returns
        os._exit(code)  # only if exit_now could not even be imported


def send(channel: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the run is gone: the parent-death signal follows
        channel.send(json.dumps(message).encode())


if __name__ == "__main__":
    from mpbench.runner.launchers.cell import exit_now

    # The server built nothing and holds nothing to save: no teardown of the framework
    # (about 1 s with torch), which the run's end waits for.
    exit_now(serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
