"""A data-parallel torch cell as a torchrun job (docs/distributed.md).

The cell process (runner/launchers/cell.py, with its lifeline, process group, timeout and events
pipe) starts `python -m torch.distributed.run` and becomes the job's launcher: torchrun is
the engine (rendezvous, one process per rank, tearing the job down when a rank fails), never
a launcher of mpbench's making. torchrun starts each rank in a session of its own, and
closes every descriptor but stdin/out/err, so the ranks report through files in a private
directory instead of the events pipe: global rank R appends JSON lines to `rank<R>.jsonl`, the same
events the single-process cell sends (each node's first rank alone sends progress, phases and the
final `done`, with rank 0's figures).
This module forwards them, and when the job ends it names what failed: a rank, the
torchrun agent itself, or the rendezvous where a node waited for the others.

No rank outlives the cell: a rank dies with the torchrun agent (PR_SET_PDEATHSIG, rank.py)
and with this process (rank.py watches it); the agent is in this process's group, which the
parent kills on a timeout, a Ctrl-C or its own death. When one rank fails, torchrun
(--max-restarts 0) ends the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mpbench.backends.base import CellSpec, Progress, enter_phase
from mpbench.parsers import endpoint_parts
from mpbench.runner.launchers.cell_timeout import CELL_TIMEOUT_ENV
from mpbench.runner.launchers.exits import how_it_ended
from mpbench.runner.launchers.oom import memory_cgroup, oom_kill_count

RANK_DIR_ENV = "MPBENCH_RANK_DIR"  # where the ranks find the spec and write their events
LAUNCHER_ENV = "MPBENCH_LAUNCHER_PID"  # the cell process: ranks end themselves without it
# Seconds a node waits at a several-node rendezvous for the others (at most: see
# rendezvous_timeout). Left unset, the wait ends a little before the cell's timeout.
RDZV_TIMEOUT_ENV = "MPBENCH_RDZV_TIMEOUT_S"
SPEC_FILE = "spec.json"
OUTPUT_FILE = "torchrun.log"
_POLL_S = 0.1

# torchrun's report of a failed job (torch.distributed.elastic ChildFailedError) names the
# first failure under "Root Cause (first observed failure)":
#   rank      : 1 (local_rank: 1)
#   exitcode  : -9 (pid: 1956)
#   traceback : Signal 9 (SIGKILL) received by PID 1956
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:={10,}|\Z)", re.S)
# ... and lists the other failed ranks, one `[i]:` block each, before it.
_OTHERS = re.compile(r"^Failures:\n(.*?)^-{10,}\nRoot Cause", re.S | re.M)
_BLOCK = re.compile(r"^\[\d+\]:\n", re.M)
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", re.M)

# How torchrun 2.13's agent ends when the rendezvous never completes (seen on this machine):
# the static rendezvous' store on node 0 (TCPStore, waiting for the other nodes' agents) ...
_STORE_WAIT = re.compile(r"waiting for clients\. (\d+)/(\d+) clients joined")
# ... a static node other than 0, whose store client never reached node 0's store ...
_CLIENT_WAIT = re.compile(r"client socket has timed out after \d+ms while trying to connect")
# ... and a c10d rendezvous' join timeout (a bare exception: it says nothing of who came).
_JOIN_TIMEOUT = re.compile(r"RendezvousTimeoutError")


@dataclass
class RankFailure:
    """The rank torchrun saw fail first, as its report says."""

    rank: int
    exitcode: int | None = None
    pid: int | None = None

    def describe(self) -> str:
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"rank {self.rank}{pid} {how_it_ended(self.exitcode)}"


# A rank's own failure that only says a peer went away (gloo: "Connection reset by peer ...
# typically caused by a remote worker crashing"; NCCL: "remote process exited").
_LOST_PEER = re.compile(r"by peer|remote worker|remote process", re.I)


def root_cause(output: str) -> RankFailure | None:
    """The first failed rank from torchrun's output; None when it has no such report."""
    found = _ROOT_CAUSE.search(output)
    return _failure(found.group(1)) if found else None


def other_failures(output: str) -> list[RankFailure]:
    """The other failed ranks torchrun's report lists (those it ended among them)."""
    found = _OTHERS.search(output)
    if not found:
        return []
    blocks = (_failure(block) for block in _BLOCK.split(found.group(1)))
    return [failure for failure in blocks if failure is not None]


def _failure(block: str) -> RankFailure | None:
    rank = _RANK.search(block)
    if not rank:
        return None
    code = _EXITCODE.search(block)
    return RankFailure(
        int(rank.group(1)),
        int(code.group(1)) if code else None,
        int(code.group(2)) if code and code.group(2) else None,
    )


def torchrun_command(spec: CellSpec, rdzv_timeout: int | None = None) -> list[str]:
    """`python -m torch.distributed.run ... -m mpbench.runner.launchers.rank`.

    One node: --standalone (a c10d store on a free local port). Several nodes: a static
    rendezvous at the endpoint when this node's rank is given (torchrun uses --node-rank only
    there), else a c10d rendezvous that numbers the nodes as they join, with an id every
    node derives alike from the cell (the run ids of the nodes' runs differ). `rdzv_timeout`:
    the seconds a node waits there for the others (the static store's `timeout`, c10d's
    `join_timeout`; torchrun's default for both is 600)."""
    command = [sys.executable, "-m", "torch.distributed.run"]
    if spec.nnodes == 1:
        command.append("--standalone")
    elif spec.node_rank is not None:
        host, port = endpoint_parts(spec.rdzv_endpoint or "")
        command += [
            f"--nnodes={spec.nnodes}",
            f"--node-rank={spec.node_rank}",
            f"--master-addr={host}",
            f"--master-port={port}",
        ]
        if rdzv_timeout is not None:
            command.append(f"--rdzv-conf=timeout={rdzv_timeout}")
    else:
        command += [
            f"--nnodes={spec.nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={spec.rdzv_endpoint}",
            f"--rdzv-id=mpbench-{re.sub(r'[^A-Za-z0-9]+', '-', spec.cell_id)}",
        ]
        if rdzv_timeout is not None:
            command.append(f"--rdzv-conf=join_timeout={rdzv_timeout}")
    # No restarts: a failed rank ends the job, and the cell records it.
    command += [f"--nproc-per-node={spec.nproc}", "--max-restarts=0"]
    return [*command, "-m", "mpbench.runner.launchers.rank"]


def rendezvous_timeout(environ: Mapping[str, str] | None = None) -> int | None:
    """Seconds a node waits at a several-node rendezvous: MPBENCH_RDZV_TIMEOUT_S, and never
    so long that the cell's own timeout comes first. A node left waiting then ends with
    torchrun's account of the rendezvous (who joined, who never came) instead of the bare
    "no result after the timeout" of a cell killed from outside. The margin covers starting
    torchrun (importing torch: seconds on a busy machine) and its report. None: neither is
    known, torchrun's default stands."""
    environ = os.environ if environ is None else environ
    limits = []
    if cell := environ.get(CELL_TIMEOUT_ENV):
        timeout = float(cell)
        limits.append(max(timeout / 2, timeout - min(60.0, max(10.0, timeout / 4))))
    if knob := environ.get(RDZV_TIMEOUT_ENV, "").strip():
        try:
            seconds = float(knob)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise ValueError(f"{RDZV_TIMEOUT_ENV}={knob!r}: must be a number of seconds above 0")
        limits.append(seconds)
    return max(1, int(min(limits))) if limits else None


def rank_environment(spec: CellSpec, rank_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[RANK_DIR_ENV] = str(rank_dir)
    env[LAUNCHER_ENV] = str(os.getpid())
    if spec.device == "cpu":
        # The ranks of a node share its cores: each gets its share of the run's threads
        # (torchrun would set 1 only where OMP_NUM_THREADS is unset; the cell set it).
        env["OMP_NUM_THREADS"] = str(threads_per_rank(spec))
    return env


def threads_per_rank(spec: CellSpec) -> int:
    return max(1, (spec.intra_op_threads or 1) // spec.nproc)


def rank_spec(spec: CellSpec) -> CellSpec:
    """The spec every rank trains: on a CPU, the run's thread pools split among the ranks."""
    if spec.device != "cpu":
        return spec
    share = threads_per_rank(spec)
    return dataclasses.replace(spec, intra_op_threads=share, inter_op_threads=share)


def run_job(
    spec: CellSpec,
    send: Callable[..., None],
    progress: Progress,
) -> None:
    """Run the cell as a torchrun job; `send(event, **payload)` the events the cell process
    sends its parent: warnings as they come, then one final done or failed; `progress` (the
    cell's Events) the steps and phases of this node's first rank."""
    rdzv_timeout = rendezvous_timeout() if spec.nnodes > 1 else None
    rank_dir = Path(tempfile.mkdtemp(prefix="mpbench-ranks-"))
    cgroup = memory_cgroup()  # the ranks run in this cell's cgroup, as the cell does
    kills_before = oom_kill_count(cgroup)
    try:
        (rank_dir / SPEC_FILE).write_text(json.dumps(asdict(rank_spec(spec))), encoding="utf-8")
        job = _watch(spec, rank_dir, torchrun_command(spec, rdzv_timeout), send, progress)
        kills_after = oom_kill_count(cgroup)
        oom_killed = None not in (kills_before, kills_after) and kills_after > kills_before
        name, payload = job_outcome(
            job.final,
            job.output,
            job.code,
            spec,
            oom_killed,
            agent_pid=job.pid,
            rdzv_timeout=rdzv_timeout,
        )
        send(name, **payload)
    finally:
        shutil.rmtree(rank_dir, ignore_errors=True)


@dataclass
class _Job:
    """How a torchrun job ended: each rank's final event (by global rank), torchrun's
    output, its exit code and pid."""

    final: dict[int, dict[str, Any]]
    output: str
    code: int
    pid: int


def _watch(
    spec: CellSpec,
    rank_dir: Path,
    command: list[str],
    send: Callable[..., None],
    progress: Progress,
) -> _Job:
    """Start torchrun, forward this node's progress and every rank's warnings (and torchrun's
    output, into the cell's log) until it exits."""
    output_path = rank_dir / OUTPUT_FILE
    with open(output_path, "wb") as output:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=rank_environment(spec, rank_dir),
        )
    # By global rank: on a node other than the first, the ranks are not 0 .. nproc-1.
    readers: dict[int, _Tail] = {}
    shown = _Tail(output_path)
    final: dict[int, dict[str, Any]] = {}
    try:
        while True:
            exited = process.poll() is not None  # read after: nothing written is missed
            for path in rank_dir.glob("rank*.jsonl"):
                rank = int(path.stem.removeprefix("rank"))
                readers.setdefault(rank, _Tail(path))
            for rank, reader in readers.items():
                for event in reader.events():
                    kind = event["event"]
                    if kind == "step":
                        progress(event["step"], event["total"])
                    elif kind == "phase":
                        plan = {k: v for k, v in event.items() if k not in ("event", "phase")}
                        enter_phase(progress, event["phase"], **plan)
                    elif kind == "warning":
                        send("warning", message=event["message"])
                    elif kind in ("done", "failed"):
                        final[rank] = event
            _echo(shown.read())
            if exited:
                break
            time.sleep(_POLL_S)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            process.kill()  # the ranks follow it (PR_SET_PDEATHSIG)
        raise
    return _Job(final, output_path.read_text(errors="replace"), process.returncode, process.pid)


def _echo(data: bytes) -> None:
    """torchrun's and the ranks' output into the cell's log (or the terminal, --verbose)."""
    if data:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def job_outcome(
    final: dict[int, dict[str, Any]],
    output: str,
    code: int,
    spec: CellSpec,
    oom_killed: bool = False,
    *,
    agent_pid: int | None = None,
    rdzv_timeout: int | None = None,
) -> tuple[str, dict[str, Any]]:
    """The cell's final event from the ranks' final events and torchrun's exit.

    The result is the `done` of this node's first rank (rank 0's figures, which every node's
    first rank receives at the end). Otherwise, the first failure found of: the rank torchrun
    saw fail first, by its own `failed` event where it sent one (an exception, a divergence,
    a skip every rank shares), the torchrun agent (`agent_pid`) killed by a signal (its ranks
    die with it, and nobody writes a report), the rank as torchrun's report says it died, a
    rendezvous that never completed. A SIGKILL is `oom` only with the cgroup's evidence
    (`oom_killed`: its oom_kill count rose during the job), as for a single-process cell."""
    done = sorted(rank for rank, event in final.items() if event["event"] == "done")
    if code == 0 and done:
        return "done", {"measurements": final[done[0]]["measurements"]}
    failure = culprit(output, final)
    failed_rank = failure.rank if failure else None
    if failed_rank is None:
        failed = sorted(rank for rank, event in final.items() if event["event"] == "failed")
        failed_rank = failed[0] if failed else None
    event = final.get(failed_rank) if failed_rank is not None else None
    if event is not None and event["event"] == "failed":
        payload = {k: v for k, v in event.items() if k != "event"}
        if payload["status"] == "error":
            payload["reason"] = f"rank {failed_rank}: {payload['reason']}"
        return "failed", payload
    if code < 0:  # the agent itself was killed: no report, its ranks died with it
        pid = f" (pid {agent_pid})" if agent_pid else ""
        agent = f"the torchrun agent{pid} {how_it_ended(code)}"
        return _killed(agent, code, oom_killed, "its ranks died with it")
    if failure is not None:
        then = "torchrun ended the job's other ranks"
        return _killed(failure.describe(), failure.exitcode, oom_killed, then)
    waited = rendezvous_failure(output, spec, rdzv_timeout)
    if waited:
        return "failed", {"status": "timeout", "reason": waited}
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "")
    if code == 0:
        return "failed", {
            "status": "error",
            "reason": f"torchrun's ranks finished without a result: {last.strip()[:300]}",
        }
    return "failed", {
        "status": "error",
        "reason": f"torchrun exited with code {code} without a result: {last.strip()[:300]}",
    }


def culprit(output: str, final: dict[int, dict[str, Any]]) -> RankFailure | None:
    """The rank that failed first: torchrun's root cause, unless that rank's own failure only
    says a peer went away while another rank was killed by a signal (not torchrun's SIGTERM).
    torchrun stamps each failure with the whole second it saw it, and names the lowest rank
    of a tie: a rank that raised at once on losing its peer, seen in the same look as the peer
    killed from outside, would be blamed for it (more often the busier the machine)."""
    failure = root_cause(output)
    if failure is None:
        return None
    event = final.get(failure.rank, {})
    if event.get("event") == "failed" and _LOST_PEER.search(event.get("reason", "")):
        killed = (other for other in other_failures(output) if _killed_from_outside(other))
        return next(killed, failure)
    return failure


def _killed_from_outside(failure: RankFailure) -> bool:
    """Killed by a signal that is not torchrun's own (it ends the other ranks with SIGTERM)."""
    code = failure.exitcode
    return code is not None and code < 0 and code != -signal.SIGTERM


def _killed(
    who: str, exitcode: int | None, oom_killed: bool, then: str
) -> tuple[str, dict[str, Any]]:
    oom = exitcode == -signal.SIGKILL and oom_killed
    return "failed", {
        "status": "oom" if oom else "error",
        "reason": f"{who}{' from the out-of-memory killer' if oom else ''}; {then}",
    }


def rendezvous_failure(output: str, spec: CellSpec, rdzv_timeout: int | None) -> str | None:
    """What a node waited for where torchrun's agent gave up at the rendezvous (None: it did
    not). `rdzv_timeout` is the wait torchrun was given (None: its default, 600 s)."""
    seconds = rdzv_timeout if rdzv_timeout is not None else 600
    waited = f"waited {seconds} s at rendezvous {spec.rdzv_endpoint}"
    if found := _STORE_WAIT.search(output):
        joined, needed = int(found.group(1)), int(found.group(2))
        missing = needed - joined
        return (
            f"{waited} for {missing} more node{'s' if missing != 1 else ''} "
            f"({joined} of {needed} joined)"
        )
    if _CLIENT_WAIT.search(output):
        return f"{waited} for node 0, which holds it: nothing answered there"
    if _JOIN_TIMEOUT.search(output):
        return f"{waited} for the other nodes (fewer than {spec.nnodes} of {spec.nnodes} joined)"
    return None


class _Tail:
    """The new complete lines (or bytes) of a file another process appends to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> bytes:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return b""
        self.offset += len(data)
        return data

    def events(self) -> list[dict[str, Any]]:
        self.partial += self.read()
        lines = self.partial.split(b"\n")
        self.partial = lines.pop()  # an incomplete last line waits for its end
        return [json.loads(line) for line in lines if line.strip()]
