"""The telemetry side files of the compared records (schema v4), for `--plot`.

A record names its side file relative to its run directory; compare knows each run's
directories from the paths it read (results/sources.py's Sources.directories). A side file
that is missing, malformed, leaves its run directory or belongs to another cell never stops
the comparison: its curves are left out and a note names the file and the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mpbench.compare.summary.cells import CellKey
from mpbench.results import CellRecord
from mpbench.results.identity import RecordKey, record_key
from mpbench.results.sidefile import SideFile, SideFileError, read_side_file


def _read(record: CellRecord, dirs: list[Path]) -> SideFile:
    """The record's side file from the first of `dirs` that holds it (SideFileError if none)."""
    reference = record.telemetry.side_file  # type: ignore[union-attr]
    first: SideFileError | None = None
    for directory in dirs:
        try:
            side = read_side_file(reference, run_dir=directory)
        except SideFileError as exc:
            first = first or exc
            continue
        if side.identity != record_key(record):
            run_id, cell_id, repeat = side.identity
            first = first or SideFileError(
                f"{side.path}: holds run {run_id}, cell {cell_id}, repeat {repeat}, not this cell"
            )
            continue
        return side
    assert first is not None
    raise first


def load_side_files(
    records: Iterable[tuple[CellKey, CellRecord]],
    dirs: dict[str, list[Path]],
    label,
) -> tuple[dict[RecordKey, SideFile], list[str]]:
    """Every readable side file of `records` by identity, and a note per one that is not.

    Records without a reference (older schema versions) are passed over quietly, as are
    records of runs whose directory is not known (records handed over in memory)."""
    found: dict[RecordKey, SideFile] = {}
    notes: list[str] = []
    for key, record in records:
        telemetry = record.telemetry
        if telemetry is None or not telemetry.side_file:
            continue
        where = dirs.get(record.run_id)
        if not where:
            continue
        try:
            found[record_key(record)] = _read(record, where)
        except SideFileError as exc:
            notes.append(
                f"{label(key)} (run {record.run_id}, repeat {record.repeat}): telemetry side "
                f"file not used, its curves are left out of the plot: {_one_line(str(exc))}"
            )
    return found, notes


def _one_line(text: str) -> str:
    return " ".join(text.split())
