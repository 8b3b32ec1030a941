"""The one way tests run the mpbench command: `run_mpbench("run", ..., fork=True)`.

fork=True (the default) runs it in a fork of the test process, which imported mpbench's CLI
once: `mpbench.cli.main(ARGS)` with its own pid, environment, working directory and file
descriptors 1 and 2, exiting with its code. It is `python -m mpbench ARGS` less the ~0.3 s
of a new interpreter and mpbench's imports. fork=False starts `python -m mpbench` itself: for
a test that needs a fresh interpreter (what the test process imported, patched or cached
must not reach the command, as in detect's tests of this machine) or its start (the
streams' encoding: an `env` naming PYTHON*, LC_* or LANG gets one either way). Tests that
send the process signals start it with subprocess.Popen themselves."""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

# A test run inside GitHub Actions must not write to the job's summary: the command gets
# this variable only from a test's own `env`.
_NOT_INHERITED = ("GITHUB_STEP_SUMMARY",)


def run_mpbench(
    *args: object,
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
    cwd: Path | None = None,
    timeout: float = 300,
    fork: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run mpbench with ARGS in a process of its own and capture what it printed, stdout and
    stderr apart; `env` is added to this process's environment, `unset` removed from it."""
    unset = (*unset, *(key for key in _NOT_INHERITED if key not in (env or {})))
    args = [str(arg) for arg in args]
    if not fork or any(key.startswith(_READ_AT_START) for key in env or {}):
        return _python_m_mpbench(args, env, cwd, timeout, unset)
    import mpbench.cli  # imported before the fork, once per test session

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        # The test process's garbage is not the child's to collect: a tf.data iterator left
        # in a cycle by an in-process Keras training waits, when finalized, for its prefetch
        # thread, which a fork does not have, and hung `compare --plot` here for good (its
        # first collection ran inside matplotlib). Frozen, inherited objects are never
        # collected in the child; what the child allocates still is.
        gc.freeze()
        code = 70
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            os.environ.update(env or {})
            for key in unset:
                os.environ.pop(key, None)
            if cwd is not None:
                os.chdir(cwd)
            sys.argv = [str(Path(mpbench.cli.__file__).with_name("__main__.py")), *args]
            code = _main(args)
        except BaseException:  # whatever happened, say it as python would
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    stdout, stderr = _read_both(out_r, err_r, pid, timeout, args)
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(
        ["mpbench", *args], os.waitstatus_to_exitcode(status), stdout, stderr
    )


# What an interpreter reads as it starts (the streams' encoding): a fork has started already.
_READ_AT_START = ("PYTHON", "LC_", "LANG")


def _python_m_mpbench(args, env, cwd, timeout, unset) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset}
    return subprocess.run(
        [sys.executable, "-m", "mpbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=environ,
    )


def _main(argv: list[str]) -> int:
    """`python -m mpbench`'s main, as its __main__ runs it (SystemExit becomes the code)."""
    from mpbench.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def _read_both(out_r: int, err_r: int, pid: int, timeout: float, args) -> tuple[str, str]:
    """Everything written to both pipes until every writer (the child, its cells) closed
    them, as subprocess.run's capture does; past `timeout` the child is killed."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = [out_r, err_r]
    deadline = time.monotonic() + timeout
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            for fd in open_fds:
                os.close(fd)
            raise subprocess.TimeoutExpired(["mpbench", *args], timeout)
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
                os.close(fd)
    return (
        b"".join(chunks[out_r]).decode("utf-8", "replace"),
        b"".join(chunks[err_r]).decode("utf-8", "replace"),
    )
