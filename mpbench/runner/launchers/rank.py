"""One rank of a torchrun job (launchers/torchrun.py): `python -m mpbench.runner.launchers.rank`.

torchrun gives each rank RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT; the cell process
gives the spec and the events directory (MPBENCH_RANK_DIR). The rank trains the cell with
DistributedDataParallel (backends/torch/distributed.py) and writes the same events a
single-process cell sends to rank<R>.jsonl. A rank that fails writes why and exits 1, so
torchrun ends the job at once instead of leaving the others waiting in an all-reduce.

The first rank of each node (LOCAL_RANK 0) speaks for its node: progress, and the final
`done` with the job's figures. Those are rank 0's: on several nodes rank 0 sends them to
the others at the end, so every node's run records the same job.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

from mpbench.backends.base import CellSpec
from mpbench.runner.faults import inject, requested_fault
from mpbench.runner.launchers.cell import PR_SET_PDEATHSIG, Events, send_failure
from mpbench.runner.launchers.torchrun import LAUNCHER_ENV, RANK_DIR_ENV, SPEC_FILE


def die_with_launcher() -> None:
    """No rank outlives its cell. PR_SET_PDEATHSIG: SIGKILL when the torchrun agent (our
    parent) dies, as the parent's timeout, Ctrl-C or death kills the agent's process group.
    A thread watching the cell process covers the moment before prctl and an agent that
    lingers: pidfd_open (Linux 5.3+) wakes it when the cell process exits."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    launcher = int(os.environ[LAUNCHER_ENV])
    threading.Thread(target=_watch, args=(launcher,), daemon=True).start()


def _watch(launcher: int) -> None:
    try:
        import select

        fd = os.pidfd_open(launcher)
        select.select([fd], [], [])  # readable once the process has exited
    except (AttributeError, OSError):  # no pidfd here, or already gone: poll
        while _alive(launcher):
            threading.Event().wait(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RankEvents(Events):
    """Events into this rank's file; progress and phases from the node's first rank only
    (one line on the display)."""

    def __init__(self, path: Path, rank: int, world: int, speaks: bool) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        super().__init__(fd)
        self.rank, self.world, self.speaks = rank, world, speaks
        self.announced = False

    def progress(self, step: int, total: int) -> None:
        if not self.announced:  # into the log: tests and users see training has begun
            self.announced = True
            print(f"mpbench: rank {self.rank} of {self.world} training", flush=True)
        if self.speaks:
            super().progress(step, total)

    def phase(self, name: str, **plan: int) -> None:
        if self.speaks:
            super().phase(name, **plan)


def main() -> NoReturn:
    die_with_launcher()
    rank_dir = Path(os.environ[RANK_DIR_ENV])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    speaks = int(os.environ["LOCAL_RANK"]) == 0  # for its node
    spec = CellSpec(**json.loads((rank_dir / SPEC_FILE).read_text(encoding="utf-8")))
    events = RankEvents(rank_dir / f"rank{rank}.jsonl", rank, world, speaks)
    try:
        fault = requested_fault(f"{spec.cell_id}#rank{rank}")  # tests: one rank's fault
        if fault:
            inject(fault)
        from mpbench.backends.torch import backend

        measurements = backend.run_cell(
            spec, events, lambda message: events.send("warning", message=message)
        )
        figures = measurements.to_dict()
        if spec.nnodes > 1:
            figures = _from_rank_zero(figures)
    except Exception as exc:
        send_failure(events, exc)
        _exit_at_once(1)
    if speaks:
        events.send("done", measurements=figures)
    _finish()


def _from_rank_zero(figures: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's figures, on every rank (a collective: every rank calls it). They are the
    job's (its step time is the slowest rank's; its loss, memory and telemetry are rank 0's)
    and so the record of every node, whose own ranks trained the same model."""
    import torch.distributed as dist

    box = [figures]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _exit_at_once(code: int) -> NoReturn:
    """End a failed rank without the interpreter's teardown. Its process group may be in use
    still (a collective that failed, gloo's threads holding its work), and tearing it down
    at exit aborts the process: "terminate called without an active exception", SIGABRT,
    which torchrun would report instead of this rank's exit code. Destroying the group first
    is no way out: it may block on a collective its peers never finish."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _finish() -> NoReturn:
    """End a rank that finished: wait until every rank has (so none leaves while a peer still
    needs it for a collective), then exit without tearing the process group down. Its
    teardown, in destroy_process_group or at interpreter exit, can abort the process with
    "terminate called without an active exception" (seen in a two-node loopback job on
    torch 2.13 with gloo), which torchrun reports as the job's failure; exiting closes the
    sockets anyway."""
    import torch.distributed as dist

    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.barrier()
    _exit_at_once(0)


if __name__ == "__main__":
    main()
