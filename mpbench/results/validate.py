"""Building records from parsed JSON, checking every value against the schema on the way in.

One validator for every field, driven by the type hints of the dataclasses in schema.py: a
field is checked as soon as it is declared, and compare and `run --resume` may trust what they
read (docs/architecture.md: user data is validated once, where it enters). The checks:

- types: `int` is a whole number and never a bool, `float` any finite number, `str`, `bool`,
  enums by value, `list[X]`, `dict[str, X]`, nested dataclasses (no unknown fields, no missing
  required ones), `X | None`;
- numbers: every number a record measures is a count, a time, bytes, a ratio, a loss or an
  accuracy, so none may be negative; step times must be positive (ratios are taken of them);
  an accuracy is a fraction;
- free-form objects (`dict[str, Any]`: config, precision, threads): objects, and every number
  in them finite.

Then the record against itself (check_record): one world size, which the config (compare's
grouping and scaling efficiency) and the distributed figures agree on; a stopped cell's figures,
present exactly when its status says stopped. Against its version (no field or status newer
than it): versions.py, which calls this module. Across records (a fallback naming
its diverged cell): io.py.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar, Union

from mpbench.results.schema import BOTTLENECK_KINDS, CellRecord, SchemaError, Status

T = TypeVar("T")


@dataclass(frozen=True)
class Bounds:
    """Where a measured number may lie."""

    low: float = 0.0
    low_open: bool = False  # True: > low; False: >= low
    high: float | None = None

    def allows(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and (self.high is None or value <= self.high)

    def __str__(self) -> str:
        if self.high is not None:
            return f"in [{self.low:g}, {self.high:g}]"
        return f"{'>' if self.low_open else '>='} {self.low:g}"


NOT_NEGATIVE = Bounds()
POSITIVE = Bounds(low_open=True)
FRACTION = Bounds(high=1.0)

# Fields whose bounds are tighter than NOT_NEGATIVE, by dotted path (list indexes left out).
# A step, and the end-to-end window, take time: a zero would make a speed-up infinite.
# stdev_s is not here: one step has a spread of 0.
BOUNDS = {
    **dict.fromkeys(
        (
            "step_time.raw_s",
            "step_time.median_s",
            "step_time.mean_s",
            "step_time.p10_s",
            "step_time.p90_s",
            "step_time.first_half_median_s",
            "step_time.second_half_median_s",
            "end_to_end.seconds",
            "distributed.rank_step_median_s",
            "distributed.world_size",
            "distributed.nodes",
            "distributed.nproc_per_node",
        ),
        POSITIVE,
    ),
    # A slowest rank is never faster than the median one.
    "distributed.straggler_ratio": Bounds(low=1.0),
    "accuracy.test_accuracy": FRACTION,
    "fp8.flop_share_fp8": FRACTION,
    # The share of the end-to-end step outside the timed step (results/bottleneck.py).
    "bottleneck.input_share": FRACTION,
    # The share of the step spent converting dtypes (a 16-bit cell on a CPU).
    "bottleneck.cast_share": FRACTION,
    # A stopped cell ran timed steps, and its ratio is of two step times.
    "stopped.steps": Bounds(low=1.0),
    "stopped.step_s": POSITIVE,
    "stopped.projected_s": POSITIVE,
    "stopped.slower_than_float32": POSITIVE,
    "stopped.float32_step_s": POSITIVE,
}


def build(cls: type[T], raw: Any) -> T:
    """`cls` (a schema dataclass) from a parsed JSON object; SchemaError naming the field."""
    return _dataclass(cls, raw, "", nullable=False)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _check(hint: Any, value: Any, path: str, nullable: bool = False) -> Any:
    """`value` checked against `hint`; what the record holds (enums and dataclasses built)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"{path}: the validator reads `X | None` only, not {hint}")
        if value is None and len(inner) < len(args):
            return None
        return _check(inner[0], value, path, nullable=len(inner) < len(args))
    if hint is Any:
        return _finite_json(value, path)
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint, value, path, nullable)
    if origin is list:
        if not isinstance(value, list):
            raise _wrong(path, "a list", value, nullable)
        return [_check(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(path, "an object", value, nullable)
        return {key: _check(args[1], item, _join(path, key)) for key, item in value.items()}
    if isinstance(hint, type) and issubclass(hint, Enum):
        choices = [member.value for member in hint]
        if not isinstance(value, str) or value not in choices:
            raise _wrong(path, f"one of {', '.join(choices)}", value, nullable)
        return hint(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise _wrong(path, "a boolean", value, nullable)
        return value
    if hint is str:
        if not isinstance(value, str):
            raise _wrong(path, "a string", value, nullable)
        return value
    if hint in (int, float):
        return _number(value, path, whole=hint is int, nullable=nullable)
    raise TypeError(f"{path}: the validator has no rule for {hint}")  # a schema change: add one


def _dataclass(cls: type[T], value: Any, path: str, nullable: bool) -> T:
    if not isinstance(value, dict):
        if not path:
            raise SchemaError(f"a record must be a JSON object, got {shown(value)}")
        raise _wrong(path, "an object", value, nullable)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [_join(path, name) for name in value if name not in fields]
    if unknown:
        raise SchemaError(f"unknown fields: {', '.join(unknown)}")
    missing = [
        _join(path, name)
        for name, f in fields.items()
        if name not in value
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SchemaError(f"missing fields: {', '.join(missing)}")
    hints = _hints(cls)
    values = {name: _check(hints[name], item, _join(path, name)) for name, item in value.items()}
    return cls(**values)


def _number(value: Any, path: str, whole: bool, nullable: bool) -> int | float:
    bounds = BOUNDS.get(re.sub(r"\[\d+\]", "", path), NOT_NEGATIVE)
    expected = f"{'a whole number' if whole else 'a finite number'} {bounds}"
    kind = int if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise _wrong(path, expected, value, nullable)
    if not _is_finite(value) or not bounds.allows(value):
        raise _wrong(path, expected, value, nullable)
    return value


def _is_finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float: no statistic can use it
        return False


def _finite_json(value: Any, path: str) -> Any:
    """Free-form JSON (config, precision state): any shape, but every number finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise _wrong(path, "a finite number", value, nullable=False)
    if isinstance(value, dict):
        return {key: _finite_json(item, _join(path, key)) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite_json(item, f"{path}[{i}]") for i, item in enumerate(value)]
    return value


def _wrong(path: str, expected: str, value: Any, nullable: bool) -> SchemaError:
    null = " or null" if nullable else ""
    return SchemaError(f"{path} must be {expected}{null}, got {shown(value)}")


def shown(value: Any) -> str:
    """The value as JSON spells it, short; NaN and infinities by name."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int) and not isinstance(value, bool) and not _is_finite(value):
        return "an integer too large for a float"
    text = json.dumps(value)  # escapes non-ASCII: the message prints on any terminal
    return text if len(text) <= 40 else text[:37] + "..."


def check_record(record: CellRecord) -> None:
    """SchemaError unless the record agrees with itself (its version: versions.load_record)."""
    _check_world_size(record)
    _check_fp8(record)
    _check_bottleneck(record)
    _check_stopped(record)


def _check_stopped(record: CellRecord) -> None:
    """A stopped cell says why (its `stopped` figures), and only a stopped cell has them:
    compare shows the status with them, and takes no ratio from it."""
    stopped = record.status is Status.STOPPED
    if stopped and record.stopped is None:
        raise SchemaError("status is stopped, but the record has no `stopped` figures")
    if not stopped and record.stopped is not None:
        raise SchemaError(
            f"the record has `stopped` figures, but its status is {record.status.value}"
        )


def _check_bottleneck(record: CellRecord) -> None:
    """compare reads `bottleneck.kind` as one of the classes: it must be one."""
    if record.bottleneck is not None and record.bottleneck.kind not in BOTTLENECK_KINDS:
        raise SchemaError(
            f"bottleneck.kind must be one of {', '.join(BOTTLENECK_KINDS)}, got "
            f"{shown(record.bottleneck.kind)}"
        )


def _check_fp8(record: CellRecord) -> None:
    """compare hides an emulated cell's speed-up by `fp8.mode`: it must be one of the two."""
    if record.fp8 is not None and record.fp8.mode not in ("hardware", "emulated"):
        raise SchemaError(f"fp8.mode must be hardware or emulated, got {shown(record.fp8.mode)}")


def held(record: Any, path: str) -> bool:
    """Whether the dotted field holds a value (not None, not empty)."""
    value = record
    for name in path.split("."):
        value = getattr(value, name, None)
        if value is None:
            return False
    return value not in ({}, [])


# The config keys of a data-parallel cell (backends.base.CellSpec.config) and the field of
# `distributed` that says the same.
_LAYOUT = {"world_size": "world_size", "nproc_per_node": "nproc_per_node", "nnodes": "nodes"}


def _check_world_size(record: CellRecord) -> None:
    """compare groups cells and divides throughputs by config.world_size: it must be what
    the distributed figures say the cell ran on, and an ok cell of several replicas has them."""
    config, stats = record.config, record.distributed
    for key in _LAYOUT:
        value = config.get(key)
        if key in config and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise SchemaError(f"config.{key} must be a whole number >= 1, got {shown(value)}")
    world = config.get("world_size", 1)
    if stats is None:
        if world > 1 and record.status is Status.OK:
            raise SchemaError(
                f"config.world_size is {world}, but the record has no distributed figures "
                "(an ok cell of several replicas records them)"
            )
        return
    if stats.world_size != stats.nodes * stats.nproc_per_node:
        raise SchemaError(
            f"distributed.world_size {stats.world_size} is not distributed.nodes "
            f"{stats.nodes} x distributed.nproc_per_node {stats.nproc_per_node}"
        )
    for key, field in _LAYOUT.items():
        ours, theirs = config.get(key, 1), getattr(stats, field)
        if ours != theirs:
            said = f"config.{key} is {ours}" if key in config else f"config has no {key} ({ours})"
            raise SchemaError(f"{said}, but distributed.{field} is {theirs}")
    comm = config.get("grad_comm")
    if comm is not None and comm != stats.grad_comm:
        raise SchemaError(
            f"config.grad_comm is {shown(comm)}, but distributed.grad_comm is "
            f"{shown(stats.grad_comm)}"
        )
