"""Run one cell in a child process with a timeout, and turn whatever happens into an outcome.

The child gets its own session (process group) so that a timeout or Ctrl-C kills it and
everything it started, and so the terminal's Ctrl-C reaches only the parent, which decides.
The spec travels on the child's stdin, which the parent then keeps open as the child's
lifeline: nothing is written to disk, and the child dies with the parent (child.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpbench.backends.base import CellSpec, MalformedMeasurements, Measurements
from mpbench.detect.cuda_order import in_pci_order
from mpbench.results.schema import Status
from mpbench.runner.launchers.cell_timeout import CELL_TIMEOUT_ENV
from mpbench.runner.launchers.oom import memory_cgroup, oom_kill_count
from mpbench.runner.launchers.zygote import ForkedCell, ForkServers

# What a `failed` event may say a cell ended as: any status but ok.
FAILED = frozenset(status.value for status in Status if status is not Status.OK)
# on_phase(name, plan): the cell entered a phase (backends/base.py's; `plan` holds the
# training phase's warmup, timed and total steps). STARTING: before the cell's first event.
OnPhase = Callable[[str, dict[str, int]], None]
STARTING = "starting"


@dataclass
class Outcome:
    status: str  # ok, skipped, diverged, oom, timeout, error
    reason: str | None = None
    measurements: Measurements | None = None
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    # From the request to start the cell to its first training step done (None: no step
    # ran): the cost of starting a cell, which the fork servers cut (launchers/zygote.py).
    startup_s: float | None = None
    launcher: str | None = None  # "fork server" or "new process"; None: none started
    rerun: str | None = None  # why a first start was lost and the cell ran again
    # A cell a divergence signal stopped: the signal and the telemetry up to that step.
    divergence: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(log_path: Path) -> str:
    try:
        lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    lines = [line for line in lines if line]
    return lines[-1][:300] if lines else ""


def _kill_group(process: subprocess.Popen | ForkedCell) -> None:
    """SIGTERM the cell's process group, then SIGKILL whatever is left after a grace period."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    # A forked cell calls setsid() itself, just after its fork: timed out before that, it has
    # no group of its own yet, the group kills above miss it, and only its pid reaches it
    # (the wait below would otherwise wait for a cell nothing stopped).
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)
    process.wait()


def cell_environment(spec: CellSpec, base: dict[str, str] | None = None) -> dict[str, str]:
    """The cell process's environment: the user's, plus what makes cells comparable.

    - OMP_NUM_THREADS = the run's intra-op thread count (unless the user set it), so OpenMP
      pools inside the frameworks match the pinned thread count of every policy.
    - CUDA_DEVICE_ORDER=PCI_BUS_ID (unless the user set it): CUDA then numbers GPUs as NVML
      does, so cuda:N is the GPU `detect` rated and fingerprinted (CUDA's default order is
      fastest first; NVML's is PCI bus order; desk review defect 4).
    """
    return thread_environment(spec.intra_op_threads, base)


def thread_environment(threads: int | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """cell_environment's rule for `threads` intra-op threads (None: OMP_NUM_THREADS left as
    the user has it); also what a run's helper job asks a warm server for (helper.py)."""
    env = in_pci_order(os.environ if base is None else base)
    if threads:
        env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and taskset
    narrow), the default size of every cell's thread pools."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no sched_getaffinity
        return os.cpu_count() or 1


def run_in_child(
    spec: CellSpec,
    timeout_s: float,
    log_path: Path,
    on_step: Callable[[int, int], None],
    verbose: bool = False,
    fork_servers: ForkServers | None = None,
    on_phase: OnPhase | None = None,
) -> Outcome:
    """Run the cell in a process of its own: forked from its framework's server where
    `fork_servers` has one for it (launchers/zygote.py), else a new interpreter.
    `on_step(step, total)` and `on_phase(name, plan)` hear the cell's progress as it comes."""
    started = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cgroup = memory_cgroup()
    oom_kills_before = oom_kill_count(cgroup)
    read_fd, write_fd = os.pipe()
    log = None if verbose else open(log_path, "w", encoding="utf-8")  # noqa: SIM115
    process = None
    try:
        env = {**cell_environment(spec), CELL_TIMEOUT_ENV: f"{timeout_s:g}"}
        try:
            if fork_servers is not None:
                out = log.fileno() if log else sys.stdout.fileno()
                err = log.fileno() if log else sys.stderr.fileno()
                process = fork_servers.start(spec, env, write_fd, out, err)
            if process is None:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "mpbench.runner.launchers.cell",
                        str(write_fd),
                        str(os.getpid()),
                    ],
                    # The events pipe and stdin (the lifeline: its write end stays here
                    # alone) are all the child gets; pass_fds implies close_fds, so no other
                    # descriptor leaks.
                    pass_fds=(write_fd,),
                    stdin=subprocess.PIPE,
                    bufsize=0,  # stdin: the spec goes out in one write, nothing lingers
                    stdout=log,
                    stderr=subprocess.STDOUT if log else None,
                    start_new_session=True,
                    env=env,
                )
        finally:
            os.close(write_fd)  # the child has its copy; ours would hide the child's exit
        with contextlib.suppress(BrokenPipeError):  # a child that died at once: _from_exit
            process.stdin.write(json.dumps(asdict(spec)).encode() + b"\n")
        first_step: list[float] = []

        def step(done: int, total: int) -> None:
            if not first_step:
                first_step.append(time.monotonic() - started)
            on_step(done, total)

        outcome = _collect(process, read_fd, started + timeout_s, step, on_phase)
    except BaseException:
        # Ctrl-C (KeyboardInterrupt) or anything else: never leave an orphaned cell running.
        if process is not None and process.poll() is None:
            _kill_group(process)
        raise
    finally:
        os.close(read_fd)
        if process is not None:
            process.stdin.close()
        if log:
            log.close()

    if outcome is None and isinstance(process, ForkedCell) and process.server_died:
        # The cell died with its fork server, unmeasured: it runs again, as a new process
        # (the server is gone), so that nothing is lost and the record says why.
        assert fork_servers is not None
        why = fork_servers.lost(process)
        if on_phase is not None:
            on_phase(STARTING, {})  # from the start again: its steps count from 0
        again = run_in_child(spec, timeout_s, log_path, on_step, verbose, on_phase=on_phase)
        again.warnings.insert(0, f"{why}: it ran again as a new process")
        again.rerun = why
        return again
    if outcome is None:  # no final event: the child died or timed out
        oom_killed = _rose(oom_kills_before, oom_kill_count(cgroup))
        outcome = _from_exit(process, timeout_s, log_path, verbose, oom_killed)
    outcome.wall_s = time.monotonic() - started
    outcome.startup_s = first_step[0] if first_step else None
    outcome.launcher = "fork server" if isinstance(process, ForkedCell) else "new process"
    return outcome


def _collect(
    process: subprocess.Popen | ForkedCell,
    read_fd: int,
    deadline: float,
    on_step: Callable[[int, int], None],
    on_phase: OnPhase | None = None,
) -> Outcome | None:
    buffer = b""
    warnings: list[str] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill_group(process)
            process.timed_out = True  # type: ignore[attr-defined]
            return None
        ready, _, _ = select.select([read_fd], [], [], min(remaining, 0.5))
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:  # the child closed its end: it exited
            process.wait()
            return None
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            event = json.loads(line)
            kind = event["event"]
            if kind == "step":
                on_step(event["step"], event["total"])
            elif kind == "phase":
                if on_phase is not None:
                    plan = {k: v for k, v in event.items() if k not in ("event", "phase")}
                    on_phase(event["phase"], plan)
            elif kind == "warning":
                warnings.append(event["message"])
            elif kind in ("done", "failed"):
                process.wait()
                return _final(event, warnings)


def _final(event: dict[str, Any], warnings: list[str]) -> Outcome:
    """The outcome a cell's final event says: its measurements (`done`), or how it failed.
    An event the runner cannot read fails the cell with the reason, never a traceback."""
    if event["event"] == "done":
        try:
            measurements = Measurements.from_dict(event.get("measurements"))
        except MalformedMeasurements as exc:
            return Outcome(
                "error", f"the cell's measurements cannot be read: {exc}", None, warnings
            )
        # A finished cell may still not be ok (most steps skipped: diverged).
        return Outcome(measurements.status, measurements.reason, measurements, warnings)
    status, reason = event.get("status"), event.get("reason")
    if status not in FAILED or not isinstance(reason, str):
        said = f"status {status!r}, reason {reason!r}"
        return Outcome("error", f"the cell's failure cannot be read ({said})", None, warnings)
    return Outcome(
        status,
        reason,
        None,
        warnings,
        divergence=event.get("divergence"),
        telemetry=event.get("telemetry"),
    )


def _from_exit(
    process: subprocess.Popen | ForkedCell,
    timeout_s: float,
    log_path: Path,
    verbose: bool,
    oom_killed: bool,
) -> Outcome:
    where = "" if verbose else f" (log: {log_path})"
    if getattr(process, "timed_out", False):
        return Outcome("timeout", f"no result after the {timeout_s:g} s timeout{where}")
    code = process.returncode
    if code is not None and code < 0:
        name = _signal_name(-code)
        if -code == signal.SIGKILL:
            # SIGKILL alone is no proof of the OOM killer (a user, a supervisor, a limit can
            # send it): only the cgroup's oom_kill count rising while the cell ran is.
            if oom_killed:
                return Outcome("oom", f"killed by {name} from the out-of-memory killer{where}")
            return Outcome("error", f"killed by {name}{where}")
        return Outcome("error", f"cell process crashed with {name}{where}")
    last = "" if verbose else _last_line(log_path)
    detail = f": {last}" if last else ""
    return Outcome("error", f"cell process exited with code {code} without a result{detail}{where}")


def _rose(before: int | None, after: int | None) -> bool:
    return before is not None and after is not None and after > before
