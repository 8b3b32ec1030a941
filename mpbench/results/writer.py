"""Writing result files: results.jsonl (append + fsync per record), results.csv,
environment.json. The reader and its validation live in `io.py`.

results.jsonl has one writer, this module, for `mpbench run`'s records and the records a
fleet's node sends its driver alike (fleet/machines.py), and it writes a record once: where
the file holds a record of the same identity (results/identity.py's record_key) an identical
copy is not written again, and a different one is refused in one line naming it (identity.py's
one duplicate rule), so nothing measured is doubled or silently replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.results import frame
from mpbench.results.identity import RecordKey, record_key, same_record_or_reason
from mpbench.results.io import CSV_FILE, ENVIRONMENT_FILE, RESULTS_FILE
from mpbench.results.schema import CellRecord, SchemaError
from mpbench.results.versions import load_record


class ResultsWriteError(InvalidInput):
    """A results file could not be written (a full disk, a read-only mount): one line, exit 2.
    What was on disk before the failed write is left exactly as it was."""


class DuplicateRecordError(ResultsWriteError):
    """A record whose identity the results file already holds, with other content: neither
    copy is dropped without a word (the one on disk stays, the new one is not written)."""


def append_record(run_dir: Path, record: CellRecord) -> bool:
    """Append one record and fsync it, so an interrupted run keeps every finished cell. False
    where the file holds this very record already (not written twice); DuplicateRecordError
    where it holds a different record of its identity.

    A failed write (ENOSPC, EIO, EROFS) is cut back to the file's previous length, so a
    half-written line never reaches the file: the cell that finished is then missing, and
    `--resume` measures it again, rather than a torn record that a reader must refuse."""
    line = json.dumps(record.to_dict(), allow_nan=False, default=_jsonable)
    return _write_once(run_dir, line, record)


def append_lines(run_dir: Path, lines: Iterable[str]) -> int:
    """Records another mpbench wrote (a fleet node's results.jsonl lines), each read as a
    reader reads it (SchemaError, one line, where it is no record) and appended as it is
    written, by append_record's rules; how many were written (a record held already is not)."""
    written = 0
    for text in lines:
        if text.strip():
            written += _write_once(run_dir, text.rstrip("\r\n"), _record_of(text, run_dir))
    return written


def _write_once(run_dir: Path, line: str, record: CellRecord) -> bool:
    path = run_dir / RESULTS_FILE
    with _LOCK:  # the fleet's driver writes its machines' files from a thread each
        held = _held(path)
        key = record_key(record)
        if key in held.keys and not _new_in(path, key, _record_of(line, run_dir)):
            return False
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ResultsWriteError(_cannot_write(path, exc, record)) from None
        try:
            before = os.fstat(fd).st_size
            try:
                _write_all(fd, (line + "\n").encode("utf-8"))
                os.fsync(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, before)
                raise ResultsWriteError(_cannot_write(path, exc, record)) from None
            held.keys.add(key)
            held.signature = _signature(os.fstat(fd))
        finally:
            os.close(fd)
    return True


def _new_in(path: Path, key: RecordKey, record: CellRecord) -> bool:
    """Whether `record` is new to the file that holds a record of its identity: False where
    that record is `record` itself; DuplicateRecordError where it is another. (True where the
    file holds none after all: what this process knew of it was out of date.)"""
    held = next((r for r in _records_in(path) if record_key(r) == key), None)
    if held is None:
        return True
    reason = same_record_or_reason(held, record)
    if reason is None:
        return False
    raise DuplicateRecordError(
        f"{path}: {reason}: a record is written once, so the one the file holds is kept and "
        "the other is not written"
    )


# The identities each results file holds, as this process last read or wrote it: a run
# appends to one file all along, and reading every record again before each append would
# cost a run of N cells N²/2 reads. A file changed by anything else since (its device,
# inode, size or modification time differ: a resume's torn tail cut, another process) is
# read again; a record whose identity is found here is looked up in the file itself.
@dataclass
class _Held:
    signature: tuple[int, ...] | None  # the file's (device, inode, size, mtime) when last seen
    keys: set[RecordKey] = field(default_factory=set)


_HELD: dict[str, _Held] = {}
_LOCK = threading.Lock()


def _held(path: Path) -> _Held:
    try:
        signature = _signature(path.stat())
    except FileNotFoundError:
        signature = None
    name = os.path.abspath(path)
    held = _HELD.get(name)
    if held is None or held.signature != signature:
        keys = {record_key(record) for record in _records_in(path)} if signature else set()
        held = _HELD[name] = _Held(signature, keys)
    return held


def _signature(stat: os.stat_result) -> tuple[int, ...]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _records_in(path: Path) -> Iterator[CellRecord]:
    """The file's records; a line that is none (a torn tail, a damaged line) is the readers'
    to refuse, not the writer's (io.py names it with its line number)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for line in data.splitlines():
        try:
            record = load_record(json.loads(line))
        except (ValueError, SchemaError):
            continue
        yield record


def _record_of(line: str, run_dir: Path) -> CellRecord:
    """The record a line holds, validated as a reader validates it (NaN included, which
    json reads and load_record refuses)."""
    try:
        return load_record(json.loads(line))
    except (ValueError, SchemaError) as exc:
        why = f"not JSON ({exc})" if isinstance(exc, ValueError) else str(exc)
        raise SchemaError(
            f"{run_dir / RESULTS_FILE}: a line to append is no record: {why}"
        ) from None


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
