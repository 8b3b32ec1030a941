"""A data-parallel torch cell as a torchrun job (docs/distributed.md).

The cell process (runner/child.py, with its lifeline, process group, timeout and events
pipe) starts `python -m torch.distributed.run` and becomes the job's launcher: torchrun is
the engine (rendezvous, one process per rank, tearing the job down when a rank fails), never
a launcher of mpbench's making. torchrun starts each rank in a session of its own, and
closes every descriptor but stdin/out/err, so the ranks report through files in a private
directory instead of the events pipe: global rank R appends JSON lines to `rank<R>.jsonl`, the same
events the single-process cell sends (rank 0 alone sends progress and the final `done`).
This module forwards them, and when the job ends it names the rank that failed.

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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mpbench.backends.base import CellSpec
from mpbench.runner.config import endpoint_parts

RANK_DIR_ENV = "MPBENCH_RANK_DIR"  # where the ranks find the spec and write their events
LAUNCHER_ENV = "MPBENCH_LAUNCHER_PID"  # the cell process: ranks end themselves without it
SPEC_FILE = "spec.json"
OUTPUT_FILE = "torchrun.log"
_POLL_S = 0.1

# torchrun's report of a failed job (torch.distributed.elastic ChildFailedError) names the
# first failure under "Root Cause (first observed failure)":
#   rank      : 1 (local_rank: 1)
#   exitcode  : -9 (pid: 1956)
#   traceback : Signal 9 (SIGKILL) received by PID 1956
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:={10,}|\Z)", re.S)
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)(?:\s*\(pid:\s*(\d+)\))?", re.M)


@dataclass
class RankFailure:
    """The rank torchrun saw fail first, as its report says."""

    rank: int
    exitcode: int | None = None
    pid: int | None = None

    def describe(self) -> str:
        code = self.exitcode
        if code is not None and code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        elif code is not None:
            how = f"exited with code {code}"
        else:
            how = "failed"
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"rank {self.rank}{pid} {how}"


def root_cause(output: str) -> RankFailure | None:
    """The first failed rank from torchrun's output; None when it has no such report."""
    found = _ROOT_CAUSE.search(output)
    if not found:
        return None
    block = found.group(1)
    rank = _RANK.search(block)
    if not rank:
        return None
    code = _EXITCODE.search(block)
    return RankFailure(
        int(rank.group(1)),
        int(code.group(1)) if code else None,
        int(code.group(2)) if code and code.group(2) else None,
    )


def torchrun_command(spec: CellSpec) -> list[str]:
    """`python -m torch.distributed.run ... -m mpbench.runner.launchers.rank`.

    One node: --standalone (a c10d store on a free local port). Several nodes: a static
    rendezvous at the endpoint when this node's rank is given (torchrun uses --node-rank only
    there), else a c10d rendezvous that numbers the nodes as they join, with an id every
    node derives alike from the cell (the run ids of the nodes' runs differ)."""
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
    else:
        command += [
            f"--nnodes={spec.nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={spec.rdzv_endpoint}",
            f"--rdzv-id=mpbench-{re.sub(r'[^A-Za-z0-9]+', '-', spec.cell_id)}",
        ]
    # No restarts: a failed rank ends the job, and the cell records it.
    command += [f"--nproc-per-node={spec.nproc}", "--max-restarts=0"]
    return [*command, "-m", "mpbench.runner.launchers.rank"]


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
    progress: Callable[[int, int], None],
) -> None:
    """Run the cell as a torchrun job; `send(event, **payload)` the events the cell process
    sends its parent: progress and warnings as they come, then one final done or failed."""
    from mpbench.runner.execute import memory_cgroup, oom_kill_count

    rank_dir = Path(tempfile.mkdtemp(prefix="mpbench-ranks-"))
    cgroup = memory_cgroup()  # the ranks run in this cell's cgroup, as the cell does
    kills_before = oom_kill_count(cgroup)
    try:
        (rank_dir / SPEC_FILE).write_text(json.dumps(asdict(rank_spec(spec))), encoding="utf-8")
        final, output, code = _watch(spec, rank_dir, send, progress)
        kills_after = oom_kill_count(cgroup)
        oom_killed = None not in (kills_before, kills_after) and kills_after > kills_before
        name, payload = job_outcome(final, output, code, spec, oom_killed)
        send(name, **payload)
    finally:
        shutil.rmtree(rank_dir, ignore_errors=True)


def _watch(
    spec: CellSpec,
    rank_dir: Path,
    send: Callable[..., None],
    progress: Callable[[int, int], None],
) -> tuple[dict[int, dict[str, Any]], str, int]:
    """Start torchrun, forward rank 0's progress and every rank's warnings (and torchrun's
    output, into the cell's log) until it exits; the final event of each rank that sent
    one, torchrun's output and its exit code."""
    output_path = rank_dir / OUTPUT_FILE
    with open(output_path, "wb") as output:
        process = subprocess.Popen(
            torchrun_command(spec),
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
    return final, output_path.read_text(errors="replace"), process.returncode


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
) -> tuple[str, dict[str, Any]]:
    """The cell's final event from the ranks' final events and torchrun's exit.

    Rank 0's `done` is the result. Otherwise the rank torchrun saw fail first is named: its
    own `failed` event where it sent one (an exception, a divergence, a skip every rank
    shares), else how it died (a signal, an exit code). A SIGKILL is `oom` only with the
    cgroup's evidence (`oom_killed`: its oom_kill count rose during the job), as for a
    single-process cell."""
    if code == 0 and final.get(0, {}).get("event") == "done":
        return "done", {"measurements": final[0]["measurements"]}
    failure = root_cause(output)
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
    if code == 0:
        # A node without global rank 0 (several nodes): its ranks finished, node 0 measured.
        return "failed", {
            "status": "skipped",
            "reason": "measured on the node that holds global rank 0 (its run directory has "
            "the record); this node's ranks finished cleanly",
        }
    if failure is not None:
        status = "error"
        if failure.exitcode == -signal.SIGKILL and oom_killed:
            status = "oom"
        return "failed", {
            "status": status,
            "reason": f"{failure.describe()}"
            f"{' from the out-of-memory killer' if status == 'oom' else ''}; "
            "torchrun ended the job's other ranks",
        }
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "")
    return "failed", {
        "status": "error",
        "reason": f"torchrun exited with code {code} without a result: {last.strip()[:300]}",
    }


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
