"""Writing result files: results.jsonl (append + fsync per record), results.csv,
environment.json. The reader and its validation live in `io.py`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mpbench.results.io import CSV_FILE, ENVIRONMENT_FILE, RESULTS_FILE
from mpbench.results.schema import CellRecord


def append_record(run_dir: Path, record: CellRecord) -> None:
    """Append one record and flush it to disk, so an interrupted run keeps every finished cell."""
    run_dir.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record.to_dict(), allow_nan=False, default=_jsonable)
    with open(run_dir / RESULTS_FILE, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _jsonable(value: Any) -> Any:
    # numpy scalars and the like: anything with .item() becomes a plain number.
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def flat_row(record: CellRecord) -> dict[str, Any]:
    """One CSV row: nested fields as dotted columns; raw step times and long lists left out."""
    row: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        elif isinstance(value, list):
            if prefix not in ("step_time.raw_s",):
                row[prefix] = json.dumps(value)
        else:
            row[prefix] = value

    walk("", record.to_dict())
    return row


def write_csv(run_dir: Path, records: Iterable[CellRecord]) -> Path:
    import pandas as pd  # only the writer needs pandas; the CLI start-up path must not

    frame = pd.DataFrame([flat_row(r) for r in records])
    out = run_dir / CSV_FILE
    frame.to_csv(out, index=False)
    return out


def write_environment(run_dir: Path, environment: dict[str, Any]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    out = run_dir / ENVIRONMENT_FILE
    out.write_text(json.dumps(environment, indent=2, default=str) + "\n", encoding="utf-8")
    return out
