"""The telemetry side files of the compared records (schema v4), for `--plot`.

A record names its side file relative to its run directory; compare knows each run's
directory from the paths it read (`run_dirs`). A side file that is missing, malformed, leaves
its run directory or belongs to another cell never stops the comparison: its curves are left
out and a note names the file and the reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from mpbench.compare.summary.cells import CellKey
from mpbench.results import CellRecord
from mpbench.results.io import results_file
from mpbench.results.sidefile import SideFile, SideFileError, read_side_file

Identity = tuple[str, str, int]  # (run_id, cell_id, repeat)


def run_dirs(paths: Iterable[Path]) -> dict[str, list[Path]]:
    """run_id -> the directories holding its results file, in the order the paths came.

    The files were read and validated already (results.io.read_runs): this only looks up the
    run id of each line, to know where a record's side file lives."""
    found: dict[str, list[Path]] = {}
    for path in paths:
        file = results_file(Path(path))
        directory = file.parent
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            if not line.strip():
                continue
            try:
                run_id = json.loads(line).get("run_id")
            except (ValueError, AttributeError):
                continue
            if isinstance(run_id, str):
                dirs = found.setdefault(run_id, [])
                if directory not in dirs:
                    dirs.append(directory)
    return found


def identity(record: CellRecord) -> Identity:
    return (record.run_id, record.cell_id, record.repeat)


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
        if side.identity != identity(record):
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
) -> tuple[dict[Identity, SideFile], list[str]]:
    """Every readable side file of `records` by identity, and a note per one that is not.

    Records without a reference (older schema versions) are passed over quietly, as are
    records of runs whose directory is not known (records handed over in memory)."""
    found: dict[Identity, SideFile] = {}
    notes: list[str] = []
    for key, record in records:
        telemetry = record.telemetry
        if telemetry is None or not telemetry.side_file:
            continue
        where = dirs.get(record.run_id)
        if not where:
            continue
        try:
            found[identity(record)] = _read(record, where)
        except SideFileError as exc:
            notes.append(
                f"{label(key)} (run {record.run_id}, repeat {record.repeat}): telemetry side "
                f"file not used, its curves are left out of the plot: {_one_line(str(exc))}"
            )
    return found, notes


def _one_line(text: str) -> str:
    return " ".join(text.split())
