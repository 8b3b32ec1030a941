"""The telemetry side file of a cell: the time series a record does not hold. Its format is
part of the result contract (docs/architecture.md, docs/telemetry.md): `run` writes it from what
`mpbench.telemetry` measured, `compare` reads it, and neither needs the other.

One strict JSON object per cell, `telemetry/<name>.json` in the run directory, referenced
from the cell's record by its path relative to the run directory:

    {"format": "mpbench-telemetry", "version": 1,
     "run_id": str, "cell_id": str, "repeat": int,
     "numerics": {"stride": int,                      # NumericsLog.to_dict()
                  "columns": {"step": [int], "loss": [float|null], "loss_scale": [float|null],
                              "skipped": [bool|null], "grad_norm": [float|null],
                              "nonfinite_grads": [int|null]},   # all of one length
                  "totals": {"total_steps": int, ..., "first_nonfinite_step": int|null}},
     "device": null | {"interval_s": float,
                       "series": {name: [float|null]},          # all of one length
                       "unavailable": {source: reason}}}

The reader trusts nothing: a record is user input, and so is the file it names. Anything
malformed is refused with InvalidInput, one line naming the file, so that `compare` reports
it instead of crashing; a reference that leaves the run directory is refused before any file
is opened. The writer checks what it writes with the same rules.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.results.writer import write_atomically

FORMAT = "mpbench-telemetry"
VERSION = 1
TELEMETRY_DIR = "telemetry"
MAX_BYTES = 64 * 2**20  # far above any real side file; a bigger one is not ours

# The per-step numerics (telemetry.numerics.NumericsLog writes them): its columns, all of one
# length, and its exact totals.
NUMERICS_COLUMNS = ("step", "loss", "loss_scale", "skipped", "grad_norm", "nonfinite_grads")
NUMERICS_TOTALS = (
    "total_steps",
    "skipped_steps",
    "nonfinite_steps",
    "nonfinite_loss_steps",
    "nonfinite_grad_steps",
    "grad_checked_steps",
    "first_nonfinite_step",
    "last_step",
    "min_loss_scale",
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SLUG_CHARS = 80


class SideFileError(InvalidInput):
    """A side file (or a record's reference to one) that cannot be used: exit 2, one line."""


@dataclass(frozen=True)
class NumericsSeries:
    stride: int
    columns: dict[str, list[Any]]
    totals: dict[str, Any]


@dataclass(frozen=True)
class DeviceSeries:
    interval_s: float
    series: dict[str, list[float | None]]
    unavailable: dict[str, str]


@dataclass(frozen=True)
class SideFile:
    path: Path
    run_id: str
    cell_id: str
    repeat: int
    numerics: NumericsSeries
    device: DeviceSeries | None

    @property
    def identity(self) -> tuple[str, str, int]:
        """(run_id, cell_id, repeat): compare it with the record that names this file."""
        return (self.run_id, self.cell_id, self.repeat)


def side_file_name(run_id: str, cell_id: str, repeat: int) -> str:
    """A filesystem-safe, deterministic file name: the cell id made readable (slashes become
    "__" as in the cell's log name, other unsafe characters "_"), then a hash of the exact
    identity, so two distinct cells never share a file even where their readable parts do
    (`a/b` and `a_b`, long ids cut short)."""
    slug = _UNSAFE.sub("_", cell_id.replace("/", "__")).lstrip(".-")[:_SLUG_CHARS] or "cell"
    identity = json.dumps([run_id, cell_id, repeat], ensure_ascii=False)
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
    return f"{slug}.{digest}.json"


def side_file_document(
    run_id: str,
    cell_id: str,
    repeat: int,
    numerics: dict[str, Any],
    device: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "run_id": run_id,
        "cell_id": cell_id,
        "repeat": repeat,
        "numerics": numerics,
        "device": device,
    }


def write_side_file(
    run_dir: Path,
    run_id: str,
    cell_id: str,
    repeat: int,
    numerics: dict[str, Any],
    device: dict[str, Any] | None,
) -> str:
    """Write the cell's side file atomically (whole or not at all); return its path relative
    to `run_dir`, in POSIX form, for the record. ValueError when the content breaks the format
    (a bug in the caller, not user input); ResultsWriteError when the disk refuses it."""
    relative = f"{TELEMETRY_DIR}/{side_file_name(run_id, cell_id, repeat)}"
    document = side_file_document(run_id, cell_id, repeat, numerics, device)
    try:
        _parse_document(document)
    except _Malformed as exc:
        raise ValueError(f"telemetry for {cell_id} breaks the side-file format: {exc}") from None
    text = json.dumps(document, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    write_atomically(Path(run_dir) / relative, text + "\n")
    return relative


def side_file_path(run_dir: Path, reference: str) -> Path:
    """The file a record's reference names, refused (SideFileError) unless it is a relative
    path that stays inside `run_dir`, links included."""
    where = f"telemetry reference {reference!r} in {run_dir}"
    if not isinstance(reference, str) or not reference or "\x00" in reference:
        raise SideFileError(f"{where}: not a file path")
    pure = PurePosixPath(reference.replace("\\", "/"))
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", reference):
        raise SideFileError(f"{where}: an absolute path; it must be relative to the run directory")
    if ".." in pure.parts:
        raise SideFileError(f"{where}: leaves the run directory ('..')")
    root = Path(run_dir).resolve()
    path = (root / Path(*pure.parts)).resolve()
    if not path.is_relative_to(root):
        raise SideFileError(f"{where}: leaves the run directory (through a link)")
    return path


def read_side_file(path: str | Path, run_dir: Path | None = None) -> SideFile:
    """Read and validate a side file. With `run_dir`, `path` is a record's reference,
    relative to it and checked by `side_file_path` first. SideFileError (an InvalidInput)
    names the file and the problem in one line."""
    file = side_file_path(run_dir, str(path)) if run_dir is not None else Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_BYTES:
            raise SideFileError(f"{file}: {size} bytes, more than a side file holds ({MAX_BYTES})")
        text = file.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SideFileError(f"{file}: no such telemetry side file") from None
    except IsADirectoryError:
        raise SideFileError(f"{file}: a directory, not a telemetry side file") from None
    except OSError as exc:
        raise SideFileError(f"{file}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SideFileError(f"{file}: not UTF-8 (at byte {exc.start})") from None
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise SideFileError(f"{file}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except _Malformed as exc:
        raise SideFileError(f"{file}: {exc}") from None
    except RecursionError:
        raise SideFileError(f"{file}: not valid JSON (nested too deeply)") from None
    try:
        fields = _parse_document(document)
    except _Malformed as exc:
        raise SideFileError(f"{file}: {exc}") from None
    return SideFile(file, *fields)


# --- validation ----------------------------------------------------------------------------


class _Malformed(ValueError):
    pass


def _refuse_constant(token: str) -> Any:
    raise _Malformed(f"{token} is not a number (JSON has no NaN or Infinity)")


def _parse_document(
    doc: Any,
) -> tuple[str, str, int, NumericsSeries, DeviceSeries | None]:
    if not isinstance(doc, dict):
        raise _Malformed(f"expected a JSON object, found {_kind(doc)}")
    if doc.get("format") != FORMAT:
        raise _Malformed(f"not an mpbench telemetry file (format {doc.get('format')!r})")
    version = doc.get("version")
    if version != VERSION or isinstance(version, bool):
        raise _Malformed(
            f"telemetry format version {version!r} is not supported; this mpbench reads "
            f"version {VERSION}"
        )
    run_id = _require(doc, "run_id", str)
    cell_id = _require(doc, "cell_id", str)
    repeat = _count(_require(doc, "repeat", int), "repeat")
    numerics = _numerics(_require(doc, "numerics", dict))
    device_doc = doc.get("device")
    device = None if device_doc is None else _device(_expect(device_doc, "device", dict))
    return run_id, cell_id, repeat, numerics, device


def _numerics(doc: dict[str, Any]) -> NumericsSeries:
    stride = _require(doc, "stride", int, "numerics")
    if stride < 1:
        raise _Malformed(f"numerics.stride must be >= 1, not {stride}")
    columns_doc = _require(doc, "columns", dict, "numerics")
    missing = [name for name in NUMERICS_COLUMNS if name not in columns_doc]
    if missing:
        raise _Malformed(f"numerics.columns lacks {', '.join(missing)}")
    unknown = sorted(set(columns_doc) - set(NUMERICS_COLUMNS))
    if unknown:
        raise _Malformed(f"numerics.columns has unknown column(s) {', '.join(unknown)}")
    columns = {}
    for name in NUMERICS_COLUMNS:
        values = _expect(columns_doc[name], f"numerics.columns.{name}", list)
        check = _COLUMN_CHECKS[name]
        for index, value in enumerate(values):
            if not check(value):
                raise _Malformed(
                    f"numerics.columns.{name}[{index}] is {_show(value)}, not {_COLUMN_KINDS[name]}"
                )
        columns[name] = values
    _same_length(columns, "numerics.columns")
    steps = columns["step"]
    for index in range(1, len(steps)):
        if steps[index] <= steps[index - 1]:
            raise _Malformed(f"numerics.columns.step is not increasing at [{index}]")
    totals_doc = _require(doc, "totals", dict, "numerics")
    totals = {}
    for name in NUMERICS_TOTALS:
        if name not in totals_doc:
            raise _Malformed(f"numerics.totals lacks {name}")
        value = totals_doc[name]
        if name == "min_loss_scale":
            ok = value is None or _is_number(value)
        elif name in ("first_nonfinite_step", "last_step"):
            ok = value is None or _is_int(value)
        else:
            ok = _is_int(value) and value >= 0
        if not ok:
            raise _Malformed(f"numerics.totals.{name} is {_show(value)}")
        totals[name] = value
    return NumericsSeries(stride, columns, totals)


def _device(doc: dict[str, Any]) -> DeviceSeries:
    interval = _require(doc, "interval_s", (int, float), "device")
    if isinstance(interval, bool) or not (math.isfinite(interval) and interval > 0):
        raise _Malformed(f"device.interval_s must be a positive number, not {_show(interval)}")
    series_doc = _require(doc, "series", dict, "device")
    series = {}
    for name, values in series_doc.items():
        values = _expect(values, f"device.series.{name}", list)
        for index, value in enumerate(values):
            if not (value is None or _is_number(value)):
                raise _Malformed(f"device.series.{name}[{index}] is {_show(value)}, not a number")
        series[name] = values
    _same_length(series, "device.series")
    unavailable = _require(doc, "unavailable", dict, "device")
    for source, reason in unavailable.items():
        if not isinstance(reason, str):
            raise _Malformed(f"device.unavailable.{source} is {_show(reason)}, not a reason")
    return DeviceSeries(float(interval), series, dict(unavailable))


def _same_length(columns: dict[str, list[Any]], where: str) -> None:
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{name} {length}" for name, length in lengths.items())
        raise _Malformed(f"{where} differ in length ({shown})")


def _require(doc: dict[str, Any], key: str, kind: Any, where: str | None = None) -> Any:
    name = f"{where}.{key}" if where else key
    if key not in doc:
        raise _Malformed(f"{name} is missing")
    return _expect(doc[key], name, kind)


def _expect(value: Any, name: str, kind: Any) -> Any:
    bad_bool = isinstance(value, bool) and kind in (int, (int, float))
    if bad_bool or not isinstance(value, kind):
        raise _Malformed(f"{name} is {_show(value)}, not {_KIND_NAMES.get(kind, 'valid')}")
    return value


def _count(value: int, name: str) -> int:
    if value < 0:
        raise _Malformed(f"{name} must be >= 0, not {value}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    # json.loads gives only finite floats once NaN/Infinity are refused; this checks a
    # document built in memory, too.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), "a value")


def _show(value: Any) -> str:
    text = json.dumps(value) if _jsonable(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


_KIND_NAMES = {
    str: "a string",
    int: "an integer",
    dict: "an object",
    list: "an array",
    (int, float): "a number",
}

_COLUMN_CHECKS = {
    "step": _is_int,
    "loss": lambda v: v is None or _is_number(v),
    "loss_scale": lambda v: v is None or _is_number(v),
    "skipped": lambda v: v is None or isinstance(v, bool),
    "grad_norm": lambda v: v is None or _is_number(v),
    "nonfinite_grads": lambda v: v is None or (_is_int(v) and v >= 0),
}
_COLUMN_KINDS = {
    "step": "an integer",
    "loss": "a number or null",
    "loss_scale": "a number or null",
    "skipped": "true, false or null",
    "grad_norm": "a number or null",
    "nonfinite_grads": "a count or null",
}
