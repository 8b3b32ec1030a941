"""Writing result files: results.jsonl (append + fsync per record), results.csv,
environment.json. The reader and its validation live in `io.py`."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.results import frame
from mpbench.results.io import CSV_FILE, ENVIRONMENT_FILE, RESULTS_FILE
from mpbench.results.schema import CellRecord


class ResultsWriteError(InvalidInput):
    """A results file could not be written (a full disk, a read-only mount): one line, exit 2.
    What was on disk before the failed write is left exactly as it was."""


def append_record(run_dir: Path, record: CellRecord) -> None:
    """Append one record and fsync it, so an interrupted run keeps every finished cell.

    A failed write (ENOSPC, EIO, EROFS) is cut back to the file's previous length, so a
    half-written line never reaches the file: the cell that finished is then missing, and
    `--resume` measures it again, rather than a torn record that a reader must refuse."""
    line = json.dumps(record.to_dict(), allow_nan=False, default=_jsonable) + "\n"
    path = run_dir / RESULTS_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ResultsWriteError(_cannot_write(path, exc, record)) from None
    try:
        before = os.fstat(fd).st_size
        try:
            _write_all(fd, line.encode("utf-8"))
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise ResultsWriteError(_cannot_write(path, exc, record)) from None
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _cannot_write(path: Path, exc: OSError, record: CellRecord) -> str:
    return (
        f"cannot write {path}: {exc.strerror or exc}; the records written before are kept, "
        f"and cell {record.cell_id} (finished, not saved) is measured again by "
        f"'mpbench run --out {path.parent} --resume'"
    )


def drop_torn_tail(run_dir: Path) -> str | None:
    """Cut bytes after the last newline of results.jsonl (a line torn by a crash or a full
    disk mid-write; every complete record ends with one) and say what was dropped."""
    path = run_dir / RESULTS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    keep = data.rfind(b"\n") + 1
    if keep == len(data):
        return None
    with open(path, "r+b") as fh:
        fh.truncate(keep)
    return (
        f"dropped a torn last line of {path} ({len(data) - keep} bytes, a record cut short "
        "when the run stopped); its cell runs again"
    )


def _jsonable(value: Any) -> Any:
    # numpy scalars and the like: anything with .item() becomes a plain number.
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def flat_row(record: CellRecord) -> dict[str, Any]:
    """One CSV row as plain values: nested fields as dotted columns, lists and objects as JSON,
    raw step times left out (mpbench.results.frame, which `load()` shares)."""
    return {
        name: json.dumps(value) if isinstance(value, (list, dict)) else value
        for name, value in frame.flat_row(record).items()
    }


def write_csv(run_dir: Path, records: Iterable[CellRecord]) -> Path:
    """results.csv: the rows and columns of `mpbench.results.load(run_dir)`, as text."""
    out = run_dir / CSV_FILE
    write_atomically(out, frame.csv_text(records))
    return out


def write_environment(run_dir: Path, environment: dict[str, Any]) -> Path:
    out = run_dir / ENVIRONMENT_FILE
    write_atomically(out, json.dumps(environment, indent=2, default=str) + "\n")
    return out


def write_atomically(path: Path, text: str) -> None:
    """Write a whole file or nothing: a temporary file beside it, fsynced, renamed over it.
    ResultsWriteError (one line, exit 2) when it cannot be written."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise ResultsWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
