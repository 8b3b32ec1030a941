"""Reading result files: results.jsonl (the truth), validated where it enters."""

from __future__ import annotations

import json
from pathlib import Path

from mpbench.results.schema import CellRecord, SchemaError

RESULTS_FILE = "results.jsonl"
CSV_FILE = "results.csv"
ENVIRONMENT_FILE = "environment.json"


def results_file(path: Path) -> Path:
    """A run directory or a results file -> the JSONL file to read."""
    return path / RESULTS_FILE if path.is_dir() else path


def read_records(path: Path) -> list[CellRecord]:
    """Every record of a run directory or results.jsonl, validated; SchemaError on bad input."""
    file = results_file(Path(path))
    if not file.exists():
        raise SchemaError(f"{file}: no such results file")
    records = []
    with open(file, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SchemaError(f"{file} line {number}: not valid JSON ({exc.msg})") from exc
            try:
                records.append(CellRecord.from_dict(raw))
            except SchemaError as exc:
                raise SchemaError(f"{file} line {number}: {exc}") from exc
    if not records:
        raise SchemaError(f"{file}: contains no records")
    return records
