"""What runs on a fleet's node: one machine's whole run, as `mpbench run --out DIR --resume`.

The driver wrote the run's run.json (and, after a node was lost, the records it had already
received); the node continues that run in a folder of its own, in a new mpbench process, and
sends back what it measures as it goes: each new record as soon as results.jsonl holds it,
environment.json and side files once written, and every file of the run at the end. So a
node lost mid-run costs only its cell in flight: the records it sent are kept, and another
node of the kind resumes from them (driver.py).

The node's run is the run a person would start there by hand, in the node's environment,
with one addition: the machine kind names the machine (MPBENCH_MACHINE=KIND) unless the
node's environment names it already. Two kinds with the same hardware are then two machines,
never pooled (docs/fleet.md).

Plain Python: no Ray here (ray_engine.py runs `serve_machine` in an actor on the node), so
the Slurm engine and the tests run it as it is.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mpbench.machine import MACHINE_ENV
from mpbench.results.io import RESULTS_FILE

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Looked up once, here: the run is forked from a process with many threads (a Ray worker's),
# and a forked child that called dlopen could wait for ever on a loader lock another thread
# held at the fork. None where there is no prctl (macOS: a driver, never a node).
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
POLL_S = 0.25
# Files the node never sends while the run goes on: the lock, and logs that grow all the time.
NOT_STREAMED = {"run.lock", RESULTS_FILE}


@dataclass
class Event:
    """One message from a node: `kind` is "started" (facts: the node's name and versions),
    "records" (lines: new lines of results.jsonl), "file" (files: a path and its bytes),
    "done" (exit_code, files: every file of the run, output: the run's own output)."""

    kind: str
    facts: dict[str, str | None] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    exit_code: int | None = None
    output: str = ""


def node_facts() -> dict[str, str | None]:
    """What a node runs, read without importing a framework (warned about when nodes differ)."""

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "node": platform.node(),
        "python": platform.python_version(),
        "mpbench": version("mpbench"),
        "torch": version("torch"),  # "2.6.0+cu124": the CUDA build is in the version
        "tensorflow": version("tensorflow"),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def serve_machine(
    seed: dict[str, bytes],
    kind: str,
    poll_s: float = POLL_S,
    stop: threading.Event | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Event]:
    """Continue the run `seed` holds (path in the run directory -> bytes) on this node, as
    machine kind `kind`, yielding what it measures as it comes. Closing the generator, or
    setting `stop`, stops the run: its cells are stopped as by Ctrl-C, and no "done" follows.
    `env`: the node's environment (this process's unless given)."""
    yield Event("started", facts=node_facts())
    run_dir = Path(tempfile.mkdtemp(prefix="mpbench-fleet-"))
    process = None
    try:
        write_files(run_dir, seed)
        results = run_dir / RESULTS_FILE
        sent = len(seed.get(RESULTS_FILE, b""))  # the records the driver has already
        seen: dict[str, tuple[int, int]] = {}
        output = open(run_dir / "node-output.log", "wb")  # noqa: SIM115 (closed below)
        process = start_run(run_dir, output, kind, env)
        while True:
            if stop is not None and stop.is_set():
                return  # the finally below stops the run as Ctrl-C does
            running = process.poll() is None
            sent, lines = new_lines(results, sent)
            if lines:
                yield Event("records", lines=lines)
            changed = changed_files(run_dir, seen)
            if changed:
                yield Event("file", files=changed)
            if not running:
                break
            time.sleep(poll_s)
        output.close()
        files = read_files(run_dir)
        tail = files.get("node-output.log", b"")[-4000:].decode(errors="replace")
        yield Event("done", exit_code=process.returncode, files=files, output=tail)
    finally:
        if process is not None and process.poll() is None:
            process.terminate()  # mpbench run stops its cells as on Ctrl-C, keeps its records
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(run_dir, ignore_errors=True)


def run_in_place(run_dir: str, kind: str) -> int:
    """Continue the run in `run_dir`, a folder the driver also sees (a Slurm site's shared
    file system): what the run writes is already where the driver reads it."""
    with open(Path(run_dir) / "node-output.log", "ab") as output:
        return start_run(Path(run_dir), output, kind).wait()


def start_run(
    run_dir: Path, output, kind: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen:
    command = [sys.executable, "-m", "mpbench", "run", "--out", str(run_dir), "--resume"]
    return subprocess.Popen(
        command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=run_environment(kind, os.environ if env is None else env),
        preexec_fn=_die_with_parent,
    )  # fmt: skip


def run_environment(kind: str, node_env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a machine's run: the node's, where the kind names the machine
    unless the node's environment names it (a name a site gave wins). So two kinds whose
    hardware is the same are two machines, and a node's name is the same on every node
    of its kind (a resumed run keeps one fingerprint)."""
    env = dict(node_env)
    if not env.get(MACHINE_ENV, "").strip():
        env[MACHINE_ENV] = kind
    return env


def _die_with_parent() -> None:
    """The run gets SIGTERM (mpbench run's Ctrl-C) when the process that serves it dies: Ray
    kills a cancelled or lost task's worker with SIGKILL, which nothing can catch."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def new_lines(path: Path, offset: int) -> tuple[int, list[str]]:
    """The complete lines of `path` past `offset` (a line being written waits for its end)."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            data = file.read()
    except FileNotFoundError:
        return offset, []
    end = data.rfind(b"\n") + 1
    lines = [line.decode() for line in data[:end].splitlines() if line.strip()]
    return offset + end, lines


def changed_files(run_dir: Path, seen: dict[str, tuple[int, int]]) -> dict[str, bytes]:
    """Files other than logs and results.jsonl that are new or changed since last asked:
    environment.json, run.json, the cells' side files."""
    changed = {}
    for path in run_dir.rglob("*"):
        name = path.relative_to(run_dir).as_posix()
        if not path.is_file() or name in NOT_STREAMED or name.startswith("logs/"):
            continue
        if name == "node-output.log" or name.endswith(".tmp"):  # write_atomically's temporary
            continue
        stat = path.stat()
        if seen.get(name) != (stat.st_size, stat.st_mtime_ns):
            seen[name] = (stat.st_size, stat.st_mtime_ns)
            changed[name] = path.read_bytes()
    return changed


def read_files(run_dir: Path) -> dict[str, bytes]:
    return {
        path.relative_to(run_dir).as_posix(): path.read_bytes()
        for path in sorted(run_dir.rglob("*"))
        if path.is_file() and path.name != "run.lock"
    }


def write_files(run_dir: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
