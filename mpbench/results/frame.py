"""Result records as a table: one flat row per cell, for pandas and for results.csv.

One flattening serves both, so that `load()` and `results.csv` never disagree: nested fields
become dotted columns (`step_time.median_s`, `memory.training_bytes`), the free-form objects
become one column per key (`config.batch_size`, `precision.tf32_enabled`, `threads.intra_op`),
and a field whose object is absent (a skipped cell has no `step_time`) still has its columns,
empty. The columns follow the record's field order (schema.py), whatever the records hold.

Raw per-step times are left out unless asked for (`raw=True`): a 1,000-step cell would make
every row a kilobyte of numbers that no summary needs.

One column is derived, not a field: `variant`, right after `policy`, says how the cell ran
beside its policy in the words `mpbench compare` uses (results.variant: `[accumulate=2]`,
`[compile]`, `×2`, `@512`, `[loss scale 1024]`, `(fallback)`), empty for a plain cell. Without
it a groupby over framework, workload and policy would average those cells with the plain
ones: their config entries are left out of the record at the default, so the `config.*`
columns are empty for the plain cells.

This module imports pandas only inside `to_frame` / `load`: `import mpbench.results` (and so
the CLI's start-up) stays free of it.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import types
import typing
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from mpbench.results.io import read_runs
from mpbench.results.schema import CellRecord
from mpbench.results.variant import record_variant

if TYPE_CHECKING:
    import pandas as pd

RAW_STEPS = "step_time.raw_s"
TIMESTAMP = "timestamp"
VARIANT = "variant"  # derived (results.variant), placed after POLICY
POLICY = "policy"

# What a column holds, from the schema's type hints: how it is typed in the frame and
# written in the CSV.
INT, FLOAT, BOOL, STR, LIST, JSON, OBJECT = "int", "float", "bool", "str", "list", "json", "object"
# Free-form objects (`dict[str, Any]`): one column per key that any record has.
_OBJECT_FIELDS = ("config", "precision", "threads")


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    kind: str


def _without_none(hint: Any) -> Any:
    """`X | None` -> X (a hint with other members is returned as it is)."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return hint


def _kind(hint: Any) -> str:
    hint = _without_none(hint)
    origin = typing.get_origin(hint)
    if origin is list:
        return LIST
    if origin is dict or hint is dict:
        return JSON
    if hint is bool:
        return BOOL
    if hint is int:
        return INT
    if hint is float:
        return FLOAT
    if hint is str or (isinstance(hint, type) and issubclass(hint, Enum)):
        return STR
    raise TypeError(f"no column kind for {hint!r}")  # a new field type: teach this module


@functools.cache
def _schema_columns(cls: type = CellRecord, prefix: str = "") -> tuple[Column, ...]:
    """Every fixed column of a record, in field order; OBJECT marks where a free-form object's
    columns go."""
    hints = typing.get_type_hints(cls)
    out: list[Column] = []
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        hint = _without_none(hints[f.name])
        if dataclasses.is_dataclass(hint):
            out += _schema_columns(hint, f"{name}.")
        elif not prefix and f.name in _OBJECT_FIELDS:
            out.append(Column(name, OBJECT))
        else:
            out.append(Column(name, _kind(hint)))
    return tuple(out)


def _object_kind(values: list[Any]) -> str:
    """The kind of a free-form column from the values the records hold."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return BOOL
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return INT
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return FLOAT
    if all(isinstance(v, (list, dict)) for v in present) and present:
        return JSON
    return STR


@functools.cache
def _nested() -> frozenset[str]:
    """The dotted names of the record's nested dataclasses ("step_time", "memory", ...)."""
    return frozenset(c.name.rsplit(".", 1)[0] for c in _schema_columns() if "." in c.name)


def _walk(value: dict[str, Any], prefix: str, row: dict[str, Any]) -> None:
    for key, inner in value.items():
        name = f"{prefix}{key}"
        if name in _nested():
            if inner is not None:
                _walk(inner, f"{name}.", row)
        else:
            row[name] = inner


def flat_row(record: CellRecord, raw: bool = False) -> dict[str, Any]:
    """A record as {dotted column: plain value}; lists stay lists. Only the columns the record
    has: `columns()` gives the full set for several records."""
    data = record.to_dict()
    row: dict[str, Any] = {}
    for field in _OBJECT_FIELDS:
        for key, value in (data.pop(field) or {}).items():
            row[f"{field}.{key}"] = value
    _walk(data, "", row)
    row[VARIANT] = record_variant(record)
    if not raw:
        row.pop(RAW_STEPS, None)
    return row


def columns(rows: list[dict[str, Any]], raw: bool = False) -> list[Column]:
    """The columns of these rows: the schema's, with each free-form object's keys (in order
    of first appearance) where the object stands in the record."""
    out: list[Column] = []
    for column in _schema_columns():
        if column.kind == OBJECT:
            prefix = f"{column.name}."
            keys = dict.fromkeys(k for row in rows for k in row if k.startswith(prefix))
            out += [Column(k, _object_kind([row.get(k) for row in rows])) for k in keys]
        elif column.name != RAW_STEPS or raw:
            out.append(column)
        if column.name == POLICY:
            out.append(Column(VARIANT, STR))
    return out


def table(records: Iterable[CellRecord], raw: bool = False) -> tuple[list[Column], list[dict]]:
    """(columns, rows) of these records: what `to_frame` types and `csv_text` writes. A value
    of a FLOAT column is a float and of an INT column an int, however the record had it."""
    rows = [flat_row(r, raw) for r in records]
    cols = columns(rows, raw)
    cast = {c.name: float for c in cols if c.kind == FLOAT}
    cast.update({c.name: int for c in cols if c.kind == INT})
    out = []
    for row in rows:
        full = {}
        for column in cols:
            value = row.get(column.name)
            convert = cast.get(column.name)
            full[column.name] = convert(value) if convert and value is not None else value
        out.append(full)
    return cols, out


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=isinstance(value, dict))
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same float
    return value


def csv_text(records: Iterable[CellRecord]) -> str:
    """results.csv: the rows of `load()` as text (lists and objects as JSON, missing values
    empty), readable by `pandas.read_csv` and any spreadsheet."""
    cols, rows = table(records)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.name for c in cols])
    for row in rows:
        writer.writerow([_csv_value(row[c.name]) for c in cols])
    return buffer.getvalue()


_DTYPES = {INT: "Int64", FLOAT: "float64", BOOL: "boolean"}


def to_frame(records: Iterable[CellRecord], raw: bool = False) -> pd.DataFrame:
    """A DataFrame of these records, one row per cell (see `load`)."""
    import pandas as pd

    cols, rows = table(records, raw)
    data: dict[str, Any] = {}
    for column in cols:
        values = [row[column.name] for row in rows]
        if column.kind in (JSON, STR):  # sha256 digests, a list in config: text, as in the CSV
            values = [v if v is None or isinstance(v, str) else str(_csv_value(v)) for v in values]
        if column.kind in _DTYPES:
            data[column.name] = pd.array(values, dtype=_DTYPES[column.kind])
        elif column.kind == LIST:
            data[column.name] = pd.Series(values, dtype=object)
        else:
            data[column.name] = pd.Series(values, dtype=_text_dtype(pd))
    frame = pd.DataFrame(data, columns=[c.name for c in cols])
    frame[TIMESTAMP] = pd.to_datetime(frame[TIMESTAMP], utc=True, format="ISO8601")
    return frame


def _text_dtype(pd: Any) -> Any:
    """pandas' string dtype with NaN for missing values (pandas 3's default `str`, as
    `read_csv` gives); before pandas 2.3, `string` (missing values are pd.NA)."""
    try:
        return pd.StringDtype(na_value=float("nan"))
    except TypeError:
        return pd.StringDtype()


def load(paths: str | Path | Iterable[str | Path], raw: bool = False) -> pd.DataFrame:
    """Result records as a pandas DataFrame, one row per cell (each repeat its own row).

    `paths`: a run directory, a results.jsonl, or a list of them (merged; an identical record
    passed twice is read once). Read through the validated reader, so a bad file raises the
    same SchemaError as `mpbench compare` (exit 2 there).

    Columns: the record's fields flattened with dots (`step_time.median_s`,
    `memory.training_bytes`, `end_to_end.samples_per_s`, `accuracy.train_loss_per_epoch` as a
    list), `config.<key>` / `precision.<key>` / `threads.<key>` per key, and after `policy`
    the cell's `variant` as compare names it (`[accumulate=2]`, `@512`, `[loss scale 1024]`,
    `(fallback)`; missing for a plain cell: group by it to keep such cells apart); the same
    columns as results.csv. Whole numbers are `Int64`, other numbers `float64`, flags `boolean` (all
    nullable: a skipped cell has no step time), text pandas' string dtype, `timestamp` a UTC
    datetime.
    `raw=True` adds `step_time.raw_s`, the timed steps (s) as a list per row: one row per step
    with `frame.explode("step_time.raw_s")`.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    return to_frame(read_runs([Path(p) for p in paths]), raw=raw)
