"""Reading result files: results.jsonl (the truth), validated and upgraded where it enters.

Everything that can be wrong with a file is refused here, as a SchemaError (exit 2) naming the
file and line: bytes that are not UTF-8, a line that is not JSON, NaN or Infinity (which
Python's json reads although JSON has neither), a record that breaks the schema or contradicts
itself (validate.py), two different records claiming to be the same repeat of the same cell,
and a fallback record whose diverged cell is not there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpbench.results.identity import RecordKey, record_key, same_record_or_reason
from mpbench.results.schema import CellRecord, SchemaError
from mpbench.results.versions import load_record

RESULTS_FILE = "results.jsonl"
CSV_FILE = "results.csv"
ENVIRONMENT_FILE = "environment.json"
RUN_FILES = (RESULTS_FILE, CSV_FILE, ENVIRONMENT_FILE)  # what `mpbench run` writes per run


def results_file(path: Path) -> Path:
    """A run directory or a results file -> the JSONL file to read."""
    return path / RESULTS_FILE if path.is_dir() else path


def read_records(path: Path) -> list[CellRecord]:
    """Every record of a run directory or results.jsonl, validated; SchemaError on bad input."""
    return read_runs([path])


@dataclass(frozen=True)
class _Origin:
    file: Path
    line: int

    def __str__(self) -> str:
        return f"{self.file} line {self.line}"


def read_runs(paths: Iterable[Path]) -> list[CellRecord]:
    """The records of several run directories or results files, merged and validated.

    A record is identified by results/identity.py's record_key, and a record found twice is
    held to its one rule (same_record_or_reason): two different copies are an error naming both
    places; identical copies are read once: the same run passed twice (a directory and its
    results.jsonl, an overlapping shell glob) is a harmless slip, and refusing it would only
    make the user edit a command line.
    """
    return [record for _, record in read_run_files(paths)]


def read_run_files(paths: Iterable[Path]) -> list[tuple[Path, CellRecord]]:
    """As read_runs, each record with the results file it was first read from (where its
    run's environment.json and run.json are)."""
    seen: dict[RecordKey, tuple[_Origin, CellRecord]] = {}
    records: list[tuple[Path, CellRecord]] = []
    for path in paths:
        for origin, record in _read_file(results_file(Path(path))):
            key = record_key(record)
            first = seen.get(key)
            if first is None:
                seen[key] = (origin, record)
                records.append((origin.file, record))
            elif reason := same_record_or_reason(first[1], record, (first[0], origin)):
                raise SchemaError(reason)
    _check_fallbacks(seen.values())
    return records


def read_environment(directory: Path) -> dict[str, Any] | None:
    """A run directory's environment.json; None where there is none; one line if damaged."""
    path = Path(directory) / ENVIRONMENT_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SchemaError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise SchemaError(f"{path}: not a JSON object")
    return raw


def _check_fallbacks(found: Iterable[tuple[_Origin, CellRecord]]) -> None:
    """A fallback record names the diverged cell it ran again, which the runner wrote before
    it into the same results file: compare shows the two as one story, so both must be there."""
    read = list(found)
    cells = {(record.run_id, record.cell_id) for _, record in read}
    for origin, record in read:
        diverged = record.fallback_of
        if diverged is None:
            continue
        if diverged == record.cell_id:
            raise SchemaError(f"{origin}: fallback_of names the record's own cell {diverged}")
        if (record.run_id, diverged) not in cells:
            raise SchemaError(
                f"{origin}: fallback_of names {diverged}, which is no cell of run "
                f"{record.run_id} in what was read"
            )


def _read_file(file: Path) -> list[tuple[_Origin, CellRecord]]:
    if not file.exists():
        raise SchemaError(f"{file}: no such results file")
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise SchemaError(f"{file}: cannot read ({exc.strerror or exc})") from None
    records = []
    for number, raw_line in enumerate(data.splitlines(), start=1):
        try:
            line = raw_line.decode("utf-8")  # strict: mojibake is no measurement
        except UnicodeDecodeError as exc:
            raise SchemaError(
                f"{file} line {number}: not UTF-8 (byte 0x{raw_line[exc.start]:02x} at column "
                f"{exc.start + 1})"
            ) from None
        if not line.strip():
            continue
        try:
            records.append((_Origin(file, number), load_record(_parse(line))))
        except SchemaError as exc:
            raise SchemaError(f"{file} line {number}: {exc}") from None
    if not records:
        raise SchemaError(f"{file}: contains no records")
    return records


class _NonFinite(ValueError):
    """NaN, Infinity or -Infinity in the text: tokens JSON does not have."""


def _refuse(token: str) -> float:
    raise _NonFinite(token)


def _parse(line: str) -> Any:
    try:
        return json.loads(line, parse_constant=_refuse)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"not valid JSON ({exc.msg})") from None
    except _NonFinite as exc:
        # Say which field holds it: read the line as Python's json would (NaN as a float) and
        # let the validator name the field; it refuses every non-finite number.
        try:
            load_record(json.loads(line))
        except json.JSONDecodeError as later:  # broken further on, too
            raise SchemaError(f"not valid JSON ({later.msg})") from None
        raise SchemaError(f"{exc} is not a number (JSON has no NaN or Infinity)") from None
