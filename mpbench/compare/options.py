"""What `mpbench compare` was asked to do, parsed from the user's spelling of it.

Thresholds are parsed here (not in the CLI) so that every front end accepts the same forms:
`10%` or `0.1` for relative limits, `0.5` or `0.5pp` for percentage points, `bf16=1.5` for a
minimum speed-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mpbench.errors import InvalidInput, unknown_choice
from mpbench.policies import BASELINE, POLICIES, SELECTORS, resolve

FORMATS = ("table", "markdown", "json", "csv", "benchmark-action")


@dataclass
class CompareOptions:
    """Everything `run_compare` needs; the CLI fills it from its options."""

    paths: list[Path] = field(default_factory=list)  # none: the latest run under results_dir
    results_dir: Path = Path("results")
    baseline: Path | None = None
    max_slowdown: float | None = None  # fraction: 0.10 = 10 % slower step time allowed
    max_memory_increase: float | None = None  # fraction
    max_accuracy_drop_pp: float | None = None  # percentage points
    min_speedup: dict[str, float] = field(default_factory=dict)  # canonical policy -> ratio
    max_accuracy_delta_pp: float | None = None  # percentage points, either direction
    allow_different_hardware: bool = False
    require_conclusive: bool = False  # an inconclusive gate (interval straddles it) fails
    format: str = "table"
    output: Path | None = None
    plot: Path | None = None

    @property
    def has_baseline_gates(self) -> bool:
        return any(
            v is not None
            for v in (self.max_slowdown, self.max_memory_increase, self.max_accuracy_drop_pp)
        )

    @property
    def has_ratio_gates(self) -> bool:
        return bool(self.min_speedup) or self.max_accuracy_delta_pp is not None


def parse_fraction(option: str, text: str | float | None) -> float | None:
    """`10%` or `0.1` -> 0.1. A bare number above 1 is refused: `10` could mean 10 % or 10x."""
    if text is None:
        return None
    raw = str(text).strip()
    percent = raw.endswith("%")
    number = _number(option, raw[:-1] if percent else raw, "a percentage like 10% or 0.1")
    if number < 0:
        raise InvalidInput(f"{option} {raw!r}: must not be negative")
    if percent:
        return number / 100
    if number > 1:
        raise InvalidInput(
            f"{option} {raw!r} is ambiguous: write {number:g}% for a percentage "
            f"or {number / 100:g} for a fraction"
        )
    return number


def parse_points(option: str, text: str | float | None) -> float | None:
    """Percentage points: `0.5` or `0.5pp`. `0.5%` is refused (relative or absolute?)."""
    if text is None:
        return None
    raw = str(text).strip()
    if raw.endswith("%"):
        raise InvalidInput(
            f"{option} {raw!r}: accuracy limits are percentage points; write {raw[:-1]} or "
            f"{raw[:-1]}pp (0.5 means 91.0 % -> 90.5 % is allowed)"
        )
    body = raw[:-2] if raw.lower().endswith("pp") else raw
    number = _number(option, body, "percentage points like 0.5 or 0.5pp")
    if number < 0:
        raise InvalidInput(f"{option} {raw!r}: must not be negative")
    return number


def parse_min_speedup(specs: list[str] | None) -> dict[str, float]:
    """`["bf16=1.5", "mixed_float16=1.0x"]` -> `{"mixed_bfloat16": 1.5, "mixed_float16": 1.0}`."""
    out: dict[str, float] = {}
    for spec in specs or []:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InvalidInput(
                f"--min-speedup {spec!r}: expected POLICY=RATIO, e.g. mixed_bfloat16=1.5"
            )
        policy = _speedup_policy(spec, name)
        text = value.strip().rstrip("x×").strip()
        ratio = _number("--min-speedup", text, "a ratio like 1.5 or 1.5x")
        if ratio <= 0:
            raise InvalidInput(f"--min-speedup {spec!r}: the ratio must be positive")
        out[policy] = ratio
    return out


def _gated_names() -> list[str]:
    """What --min-speedup accepts: every policy but float32, canonical names then aliases."""
    gated = [p for p in POLICIES.values() if p.name != BASELINE]
    return [p.name for p in gated] + [a for p in gated for a in p.aliases]


def _speedup_policy(spec: str, name: str) -> str:
    """The canonical policy a --min-speedup names.

    `all` (and `auto`) are refused rather than read as "every policy measured": a speed-up that
    one policy must reach rarely suits another on the same machine (on a CPU, bf16 may be 2x
    faster than float32 while emulated fp16 is 5x slower), so each limit is named on its own.
    """
    key = name.strip().lower()
    if key in (BASELINE, *POLICIES[BASELINE].aliases):
        raise InvalidInput(
            f"--min-speedup {spec!r}: speed-ups are measured against float32 itself; "
            f"name another policy: {', '.join(_gated_names())}"
        )
    if key in SELECTORS:
        raise InvalidInput(
            f"--min-speedup {spec!r}: name one policy per limit (repeat the option for "
            f"several): {', '.join(_gated_names())}"
        )
    if key not in _gated_names():
        raise InvalidInput(
            f"--min-speedup {spec!r}: unknown policy {name.strip()!r}; "
            f"valid choices: {', '.join(_gated_names())}"
        )
    return resolve(key).name


def parse_format(text: str) -> str:
    value = text.strip().lower()
    if value not in FORMATS:
        raise unknown_choice("format", text, FORMATS)
    return value


def _number(option: str, text: str, expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"{option} {text!r}: expected {expected}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidInput(f"{option} {text!r}: expected {expected}")
    return value
