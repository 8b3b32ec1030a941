"""What the command line's values mean, and `mpbench compare`'s options, declared once.

In the manner of asv's commands/common_args.py, the value parsers more than one layer reads
live here rather than in either layer (settings.py's --precision takes compare's percentages),
and compare's options are one table, COMPARE_OPTIONS: cli.py builds the command's parameters
from it and compare/options.py fills CompareOptions from it, so an option cannot be declared
and then dropped on its way to the comparison.

The thresholds take the same forms from every front end: `10%` or `0.1` for relative limits,
`0.5` or `0.5pp` for percentage points, `bf16=1.5` for a minimum speed-up, `bf16@2=1.5` for
one at world size 2 only, `2=0.8` for a minimum scaling efficiency at world size 2. Each gate
takes one limit per key: a second one is refused, not allowed to replace the first without a
word.

A leaf under cli.py, settings.py and compare/ (it imports errors, policies and formats only):
the CLI reads the table at start-up without importing compare (numpy, the renderers).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.formats import help_text as format_help
from mpbench.policies import BASELINE, POLICIES, SELECTORS, resolve, valid_names

# --- the value parsers --------------------------------------------------------------------


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


def single(option: str, values: list[str] | None) -> str | None:
    """The one value of an option that takes one: given twice, typer would keep the last and
    drop the other limit without a word, so a repeat is refused instead."""
    if not values:
        return None
    if len(values) > 1:
        given = " ".join(f"{option} {value}" for value in values)
        raise InvalidInput(f"{given}: one limit per option; give {option} once")
    return values[0]


def _gate_key(policy: str | None, world: int | None) -> tuple[str, str]:
    """A limit's CompareOptions key and its words: ("mixed_bfloat16@2", "mixed_bfloat16 at
    world size 2"), ("2", "world size 2") or ("mixed_bfloat16", "mixed_bfloat16").
    split_world reads a key back for the gates."""
    if world is None:
        assert policy is not None
        return policy, policy
    if policy is None:
        return str(world), f"world size {world}"
    return f"{policy}@{world}", f"{policy} at world size {world}"


def split_reference(policy_key: str) -> tuple[str, str]:
    """A gate key's policy part as (policy, the policy it is measured against), as
    parse_min_speedup wrote it: `float8:mixed_bfloat16` -> ("float8", "mixed_bfloat16"),
    `mixed_bfloat16` -> ("mixed_bfloat16", "float32")."""
    policy, _, reference = policy_key.partition(":")
    return policy, reference or BASELINE


def split_world(key: str) -> tuple[str | None, int | None]:
    """A gate key as (policy, world size), as _gate_key wrote it: `mixed_bfloat16@2` ->
    ("mixed_bfloat16", 2), `mixed_bfloat16` -> ("mixed_bfloat16", None), `2` -> (None, 2)."""
    name, at, world = key.partition("@")
    if at:
        return name, int(world)
    return (None, int(name)) if name.isdigit() else (name, None)


def _once(
    option: str, out: dict[str, float], key: str, what: str, spec: str, given: dict[str, str]
) -> None:
    """Refuse a second limit on one gate key (`bf16=1.5` and `mixed_bfloat16=0.01`): keeping
    either would silently drop the other. `given`: the spelling each key came in first."""
    if key in out:
        raise InvalidInput(
            f"{option} {given[key]!r} and {option} {spec!r} both set the limit for {what}; give one"
        )
    given[key] = spec


def parse_min_speedup(specs: list[str] | None) -> dict[str, float]:
    """`["bf16=1.5", "mixed_float16@2=1.0x", "fp8:bf16=1.1"]` ->
    `{"mixed_bfloat16": 1.5, "mixed_float16@2": 1.0, "float8:mixed_bfloat16": 1.1}`: `@N`
    gates world size N only; `:REFERENCE` measures against the policy's base (float8's:
    bf16) instead of float32."""
    out: dict[str, float] = {}
    given: dict[str, str] = {}
    for spec in specs or []:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InvalidInput(
                f"--min-speedup {spec!r}: expected POLICY=RATIO, POLICY@WORLD_SIZE=RATIO or "
                "POLICY:REFERENCE=RATIO, e.g. mixed_bfloat16=1.5, bf16@2=1.5 or fp8:bf16=1.1"
            )
        policy_name, at, world_text = name.partition("@")
        policy_name, colon, reference_name = policy_name.partition(":")
        policy = _speedup_policy(spec, policy_name)
        reference = _reference(spec, policy, reference_name) if colon else BASELINE
        if reference != BASELINE:  # `fp8:fp32` is plain `fp8`: one key per gate
            policy += ":" + reference
        world = _world_size("--min-speedup", spec, world_text, 1) if at else None
        key, what = _gate_key(policy, world)
        text = value.strip().rstrip("x×").strip()
        ratio = _number("--min-speedup", text, "a ratio like 1.5 or 1.5x")
        if ratio <= 0:
            raise InvalidInput(f"--min-speedup {spec!r}: the ratio must be positive")
        _once("--min-speedup", out, key, what, spec, given)
        out[key] = ratio
    return out


def parse_min_scaling_efficiency(specs: list[str] | None) -> dict[str, float]:
    """`["2=0.8", "bf16@4=70%"]` -> `{"2": 0.8, "mixed_bfloat16@4": 0.7}`: the lowest
    weak-scaling efficiency at world size N, of every policy or of one."""
    option = "--min-scaling-efficiency"
    out: dict[str, float] = {}
    given: dict[str, str] = {}
    for spec in specs or []:
        name, sep, value = spec.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise InvalidInput(
                f"{option} {spec!r}: expected WORLD_SIZE=EFFICIENCY or "
                "POLICY@WORLD_SIZE=EFFICIENCY, e.g. 2=0.8, 2=80% or bf16@2=0.8"
            )
        policy_name, at, world_text = name.partition("@")
        if not at:
            policy_name, world_text = "", name
        world = _world_size(option, spec, world_text, 2)
        policy = _speedup_policy(spec, policy_name, option, gated=False) if at else None
        key, what = _gate_key(policy, world)
        raw = value.strip()
        percent = raw.endswith("%")
        number = _number(option, raw[:-1] if percent else raw, "an efficiency like 0.8 or 80%")
        efficiency = number / 100 if percent else number
        if efficiency <= 0:
            raise InvalidInput(f"{option} {spec!r}: the efficiency must be positive")
        if efficiency > 1:
            # A fraction of linear scaling (1 = 100 %: N replicas do N times the work): a
            # minimum above 1 demands super-linear scaling, and reading `2=1.5` as 1.5 %
            # would turn a slip into a gate that always passes.
            raise InvalidInput(
                f"{option} {spec!r}: an efficiency is a fraction of linear scaling, at most 1; "
                "write a fraction like 0.8 or a percentage like 80%"
            )
        _once(option, out, key, what, spec, given)
        out[key] = efficiency
    return out


def _world_size(option: str, spec: str, text: str, lowest: int) -> int:
    """The world size of a gate key: a whole number of replicas, at least `lowest`."""
    raw = text.strip()
    if not (raw.isascii() and raw.isdigit()) or int(raw) < lowest:
        why = (
            "world size 1 is the reference every efficiency is taken against"
            if lowest == 2 and raw == "1"
            else f"expected a whole number of replicas, {lowest} or more"
        )
        example = "bf16@2=1.5" if option == "--min-speedup" else "2=0.8"
        raise InvalidInput(
            f"{option} {spec!r}: bad world size {raw!r} ({why}), e.g. {option} {example}"
        )
    return int(raw)


def _gated_names() -> list[str]:
    """What --min-speedup accepts: every policy but float32, canonical names then aliases."""
    gated = [p for p in POLICIES.values() if p.name != BASELINE]
    return [p.name for p in gated] + [a for p in gated for a in p.aliases]


def _speedup_policy(spec: str, name: str, option: str = "--min-speedup", gated: bool = True) -> str:
    """The canonical policy a --min-speedup (or --min-scaling-efficiency) names.

    `all` (and `auto`) are refused rather than read as "every policy measured": a speed-up that
    one policy must reach rarely suits another on the same machine (on a CPU, bf16 may be 2x
    faster than float32 while emulated fp16 is 5x slower), so each limit is named on its own.
    `gated=False`: float32 is a valid name too (a scaling efficiency is not against float32).
    """
    key = name.strip().lower()
    names = _gated_names() if gated else valid_names()
    if gated and key in (BASELINE, *POLICIES[BASELINE].aliases):
        raise InvalidInput(
            f"{option} {spec!r}: speed-ups are measured against float32 itself; "
            f"name another policy: {', '.join(_gated_names())}"
        )
    if key in SELECTORS:
        raise InvalidInput(
            f"{option} {spec!r}: name one policy per limit (repeat the option for "
            f"several): {', '.join(names)}"
        )
    if key not in names:
        raise InvalidInput(
            f"{option} {spec!r}: unknown policy {name.strip()!r}; valid choices: {', '.join(names)}"
        )
    return resolve(key).name


def _reference(spec: str, policy: str, name: str) -> str:
    """The policy a --min-speedup's speed-up is taken against: float32, or the policy it
    builds on (float8's bf16), the two compare measures every cell against."""
    base = POLICIES[policy].base
    choices = [BASELINE, *([base] if base else [])]
    key = name.strip().lower()
    known = resolve(key).name if key in valid_names() and key not in SELECTORS else None
    if known not in choices:
        said = " or ".join(POLICIES[c].short for c in choices)
        raise InvalidInput(
            f"--min-speedup {spec!r}: {POLICIES[policy].short}'s speed-up is measured against "
            f"{said}, not {name.strip()!r}"
        )
    return known


def _number(option: str, text: str, expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidInput(f"{option} {text!r}: expected {expected}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise InvalidInput(f"{option} {text!r}: expected {expected}")
    return value


# --- mpbench compare's options --------------------------------------------------------------


@dataclass(frozen=True)
class CompareOption:
    """One parameter of `mpbench compare` and the CompareOptions field it fills."""

    field: str  # the CompareOptions field, and the name typer hands the value over under
    flags: tuple[str, ...]  # the command-line spellings; (): the positional argument
    help: str
    kind: Any = str  # the type typer parses; a list collects every time the option is given
    default: Any = None  # what typer gives when the option is left out
    # A limit given once: typer collects a list only so that a repeat is seen and refused
    # (`single`), where it would keep the last limit and drop the first without a word.
    once: bool = False
    # (option, what typer gave) -> the field's value, or InvalidInput naming the option;
    # None: typer's value as it is.
    parse: Callable[[str, Any], Any] | None = None

    @property
    def option(self) -> str:
        """The name messages use: the first spelling, or the argument's name."""
        return self.flags[0] if self.flags else self.field

    @property
    def repeatable(self) -> bool:
        """Each time it is given adds a value (a limit per policy, a path)."""
        return typing.get_origin(self.kind) is list and not self.once

    @property
    def annotation(self) -> Any:
        """The type typer parses: it may be None (left out) unless it has a default."""
        return self.kind if self.default is not None else self.kind | None

    def value(self, given: Any) -> Any:
        """What typer gave -> the CompareOptions field's value."""
        if self.once:
            given = single(self.option, given)
        return given if self.parse is None else self.parse(self.option, given)


def _paths(option: str, paths: list[Path] | None) -> list[Path]:
    return list(paths or [])


def _names(option: str, names: list[str] | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in names or [] if n.strip())


def _policy_names(option: str, names: list[str] | None) -> tuple[str, ...]:
    """Canonical policy names (`bf16` -> `mixed_bfloat16`), an unknown one refused."""
    out = []
    for name in _names(option, names):
        if name.lower() not in valid_names() or name.lower() in SELECTORS:
            raise InvalidInput(
                f"{option} {name!r}: unknown policy; valid choices: {', '.join(valid_names())}"
            )
        out.append(resolve(name.lower()).name)
    return tuple(out)


# In `mpbench compare --help`'s order. A new option: one entry here and its CompareOptions
# field (tests/compare/test_compare_options_table.py checks they match, and that each reaches
# CompareOptions from the command line); a new baseline gate also needs its row in
# compare/gates.py.
COMPARE_OPTIONS: tuple[CompareOption, ...] = (
    CompareOption(
        "paths",
        (),
        "Result files, run directories or stores (mpbench store add; default: the latest "
        "run in --results-dir).",
        kind=list[Path],
        parse=_paths,
    ),
    CompareOption(
        "results_dir",
        ("--results-dir",),
        "Where to look for the latest run.",
        kind=Path,
        default=Path("results"),
    ),
    # Which records to compare, from every source; --commits, --since and --until choose
    # among the runs of a store (mpbench store add: docs/history.md).
    CompareOption(
        "devices",
        ("--device",),
        "Only records of devices whose name holds this (h200, xeon) or of this hardware "
        "fingerprint (repeatable).",
        kind=list[str],
        parse=_names,
    ),
    CompareOption(
        "workloads",
        ("--workload", "-w"),
        "Only this workload's records (repeatable).",
        kind=list[str],
        parse=_names,
    ),
    CompareOption(
        "policies",
        ("--policy", "-p"),
        "Only these policies' records (repeatable; add fp32 for speed-ups).",
        kind=list[str],
        parse=_policy_names,
    ),
    CompareOption(
        "commits",
        ("--commits",),
        "A store's runs from commit A to B, both included: A..B, A.. or ..B.",
    ),
    CompareOption("since", ("--since",), "A store's runs from this date or time on (ISO 8601)."),
    CompareOption("until", ("--until",), "A store's runs up to this date or time (included)."),
    CompareOption(
        "baseline",
        ("--baseline", "-b"),
        "Baseline results file or run directory to gate against.",
        kind=Path,
    ),
    CompareOption(
        "max_slowdown",
        ("--max-slowdown",),
        "Median step time per cell vs baseline: 10% or 0.1.",
        kind=list[str],
        once=True,
        parse=parse_fraction,
    ),
    CompareOption(
        "max_memory_increase",
        ("--max-memory-increase",),
        "Peak memory per cell vs baseline: 10% or 0.1.",
        kind=list[str],
        once=True,
        parse=parse_fraction,
    ),
    CompareOption(
        "max_accuracy_drop_pp",
        ("--max-accuracy-drop",),
        "Test accuracy per cell vs baseline, in points: 0.5.",
        kind=list[str],
        once=True,
        parse=parse_points,
    ),
    CompareOption(
        "min_speedup",
        ("--min-speedup",),
        "POLICY=X: speed-up vs float32 of the same run, e.g. bf16=1.5; one policy per "
        "option (repeatable); POLICY@N=X gates world size N only, e.g. bf16@2=1.2; "
        "fp8:bf16=X gates fp8 against bf16 of the same run.",
        kind=list[str],
        parse=lambda option, specs: parse_min_speedup(specs),
    ),
    CompareOption(
        "min_scaling_efficiency",
        ("--min-scaling-efficiency",),
        "N=X: weak-scaling efficiency at world size N vs world size 1 of the same run, "
        "e.g. 2=0.8 or 2=80%; POLICY@N=X for one policy (repeatable).",
        kind=list[str],
        parse=lambda option, specs: parse_min_scaling_efficiency(specs),
    ),
    CompareOption(
        "max_accuracy_delta_pp",
        ("--max-accuracy-delta",),
        "Accuracy vs float32 of the same run: fail a cell shown worse by more than X points "
        "(its whole 95 % interval below -X), e.g. 1.",
        kind=list[str],
        once=True,
        parse=parse_points,
    ),
    CompareOption(
        "accuracy_margin_pp",
        ("--accuracy-margin",),
        "Points a policy's accuracy may fall short of float32's and still be 'no worse' "
        "(its whole 95 % interval above -X; default: the run's accuracy_margin, else 1).",
        kind=list[str],
        once=True,
        parse=parse_points,
    ),
    CompareOption(
        "allow_different_hardware",
        ("--allow-different-hardware",),
        "Compare to a baseline from another machine.",
        kind=bool,
        default=False,
    ),
    CompareOption(
        "require_conclusive",
        ("--require-conclusive",),
        "Fail a gate whose 95 % interval straddles its limit (inconclusive), not only "
        "one whose whole interval is past it.",
        kind=bool,
        default=False,
    ),
    # Checked by compare/options.py's parse_format when the comparison starts, so that a
    # CompareOptions made in code meets the same check (the names: mpbench/formats.py).
    CompareOption("format", ("--format",), format_help(), default="table"),
    CompareOption("output", ("--output", "-o"), "Write the report here.", kind=Path),
    CompareOption(
        "plot",
        ("--plot",),
        "Write a figure: bars with intervals, step-time boxes, loss curves "
        "(.png, .svg, .pdf, .jpg or .jpeg).",
        kind=Path,
    ),
)
