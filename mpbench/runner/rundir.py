"""The run directory: where a run's files go, who may write there, and what it was asked.

- `check_out_path` refuses an `--out` that cannot be a run directory before anything runs.
- `RunLock` lets one `mpbench run` at a time write a directory (an advisory `flock`, which
  the kernel releases however the holder dies, SIGKILL included).
- `run.json` stores the run id and the resolved configuration when the run starts, so that
  `--resume` continues exactly that matrix and refuses options that contradict it; a run with
  a run.json and no (or an empty) results.jsonl is a run with nothing finished yet.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from mpbench.errors import InvalidInput
from mpbench.results.io import RESULTS_FILE
from mpbench.results.run_json import RUN_JSON, read_run_json
from mpbench.results.writer import write_atomically
from mpbench.runner.config import RunConfig

RUN_FILE = RUN_JSON  # one name for the file, results/run_json.py's
LOCK_FILE = ".mpbench.lock"
LOGS = "logs"
# A file name may hold 255 bytes (NAME_MAX on Linux and macOS); a cell's id holds its
# workload's name, which a zoo name with its options or a user's module path can make
# longer than that ("File name too long" ended a run after earlier cells had finished).
LOG_NAME_BYTES = 200

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, runs are not guarded
    fcntl = None  # type: ignore[assignment]


def cell_log(run_dir: Path, cell_id: str) -> Path:
    """Where a cell's output goes: `logs/torch__mnist_dense__float32__r0.log`, the cell id with
    its slashes as "__"; an id too long for a file name keeps its first bytes and gets a hash
    of the whole id, so two cells never share a log."""
    name = cell_id.replace("/", "__")
    if len(name.encode("utf-8")) + len(".log") > LOG_NAME_BYTES:
        digest = hashlib.sha256(cell_id.encode("utf-8")).hexdigest()[:16]
        head = name.encode("utf-8")[: LOG_NAME_BYTES - len(digest) - 6].decode("utf-8", "ignore")
        name = f"{head}.{digest}"
    return run_dir / LOGS / f"{name}.log"


def check_out_path(path: Path, option: str = "--out") -> None:
    """InvalidInput unless `path` is, or can become, a writable directory."""
    if not str(path).strip():
        raise InvalidInput(f"{option} '': empty path; name a directory")
    if path.exists() and not path.is_dir():
        raise InvalidInput(f"{option} {path}: is a file, not a directory")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise InvalidInput(f"{option} {path}: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInput(
            f"{option} {path}: cannot write into {existing} (read-only, or no permission)"
        )


def make_dir(path: Path, option: str = "--out") -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"{option} {path}: cannot create it ({exc.strerror or exc})") from None


class RunLock:
    """Exclusive use of a run directory for as long as the run lasts."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._file: TextIO | None = None

    def __enter__(self) -> RunLock:
        try:
            handle = open(self.path, "a+", encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        if fcntl is not None:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                holder = handle.read().strip() or "another mpbench run"
                handle.close()
                raise InvalidInput(
                    f"{self.path.parent} is in use by {holder}; wait for it to finish, or "
                    "pass another --out"
                ) from None
        handle.seek(0)
        handle.truncate()
        started = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        handle.write(f"mpbench run (pid {os.getpid()} on {socket.gethostname()}, {started})\n")
        handle.flush()
        self._file = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()  # closing releases the flock
            self._file = None


@dataclass
class RunState:
    """What run.json holds: enough to continue the run exactly as it was asked."""

    run_id: str
    created_at: str
    command_line: str
    mpbench_version: str
    config: RunConfig

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "created_at": self.created_at,
            "command_line": self.command_line,
            "mpbench_version": self.mpbench_version,
            "config": self.config.to_dict(),
        }


def write_state(run_dir: Path, state: RunState) -> None:
    write_atomically(run_dir / RUN_FILE, json.dumps(state.to_dict(), indent=2) + "\n")


def read_state(run_dir: Path) -> RunState | None:
    """The stored run, None if the directory holds no run.json; InvalidInput if unreadable."""
    path = run_dir / RUN_FILE
    raw = read_run_json(run_dir)
    if raw is None:
        return None
    texts = {}
    for key in ("run_id", "created_at", "command_line", "mpbench_version"):
        value = raw.get(key)
        if not isinstance(value, str) or (key == "run_id" and not value.strip()):
            raise InvalidInput(f"{path}: {key} must be a string, got {value!r}")
        texts[key] = value
    # The configuration meets the rules a new run's does (runner/config.py, Setting).
    return RunState(**texts, config=RunConfig.from_dict(raw.get("config"), str(path)))


def holds_a_run(run_dir: Path) -> bool:
    return (run_dir / RUN_FILE).exists() or (run_dir / RESULTS_FILE).exists()
