"""The value parsers: what a value typed on the command line (or written in a config file)
means, one parser per kind of value, and the one wording of a bad one.

Every command reads its values through these (mpbench/options.py's tables, settings.py's run
settings), so a kind of value is spelled, and refused, the same way whichever command takes it:
a value that is none of the valid ones is `--OPTION: unknown KIND 'x'; valid choices: a, b`
(`unknown`), any other bad value `--OPTION 'x': ...` and one line of reason; the CLI exits 2.

The kinds: a choice (parse_choice), a device (parse_device), a policy (parse_policy), a number
(parse_number), a path (parse_path), a duration (parse_seconds), a percentage (parse_fraction),
percentage points (parse_points); and compare's gates (in the manner of asv's
commands/common_args.py): `bf16=1.5` for a minimum speed-up, `bf16@2=1.5` for one at world size
2 only, `2=0.8` for a minimum scaling efficiency at world size 2, with the gate keys they are
stored under. Each gate takes one limit per key: a second one is refused, not allowed to replace
the first without a word.

A leaf under cli.py, options.py, settings.py, result_options.py and compare/ (it imports errors
and policies only).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from mpbench.errors import InvalidInput, unknown_choice
from mpbench.policies import BASELINE, POLICIES, SELECTORS, resolve, valid_names

# What --device takes; whether this machine has the device is asked where it is used
# (detect/measure.py, runner/matrix.py).
DEVICES = ("auto", "cpu", "cuda", "cuda:N", "mps")
_DEVICE = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
WHOLE_NUMBER = re.compile(r"[+-]?\d+")
# A sign is read too, so that -1 is a number below 0, not text that is no duration.
_DURATION = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(s|m|h)?", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600}

# --- choices -------------------------------------------------------------------------------


def unknown(option: str, kind: str, value: str, choices: Iterable[str]) -> InvalidInput:
    """The one wording of a value that is none of the valid ones, whichever command (or config
    key: `config x.toml: [run] device =`) said it: `--by: unknown value 'week'; valid
    choices: commit, date, device`."""
    return InvalidInput(f"{option.removesuffix(' =')}: {unknown_choice(kind, value, choices)}")


def parse_choice(option: str, text: str, choices: Iterable[str], kind: str = "value") -> str:
    """One of `choices`, whatever its case and spaces."""
    value = text.strip().lower()
    if value not in choices:
        raise unknown(option, kind, text, choices)
    return value


def parse_device(option: str, text: str) -> str:
    """auto, cpu, cuda, cuda:N or mps, in lower case."""
    value = text.strip().lower()
    if not _DEVICE.fullmatch(value):
        raise unknown(option, "device", text, DEVICES)
    return value


def parse_policy(option: str, name: str, selectors: Iterable[str] = ()) -> str:
    """A policy's canonical name from any of its spellings in any case (`BF16` ->
    `mixed_bfloat16`), or one of `selectors` (auto, all) where a set of policies is named."""
    key = name.strip().lower()
    if key in selectors:
        return key
    if key not in valid_names():
        raise unknown(option, "policy", name, [*valid_names(), *selectors])
    return resolve(key).name


# --- numbers, paths, durations ------------------------------------------------------------


def parse_number(option: str, text: str | float, whole: bool = False) -> float:
    """A number typed on the command line (typer hands numbers over as text, so that a bad one
    is worded here as every other bad value); `whole`: an int."""
    raw = str(text).strip()
    if whole:
        if not WHOLE_NUMBER.fullmatch(raw):
            raise InvalidInput(f"{option} {str(text)!r}: must be a whole number")
        return int(raw)
    try:
        return float(raw)
    except ValueError:
        raise InvalidInput(f"{option} {str(text)!r}: must be a number") from None


def parse_path(option: str, text: str | Path) -> Path:
    """A path typed on the command line; an empty one is refused rather than read as '.'."""
    if not str(text).strip():
        raise InvalidInput(f"{option} '': empty path")
    return Path(text)


def parse_seconds(option: str, value: float | str) -> float:
    """Seconds, or text with a unit: 600, "600s", "10m", "1.5h"; above 0."""
    seconds = value
    if isinstance(value, str):
        found = _DURATION.fullmatch(value.strip())
        if found is None:
            raise InvalidInput(f"{option} {value!r}: must be seconds, or a number with s, m or h")
        seconds = float(found[1]) * _SECONDS[(found[2] or "s").lower()]
    if not seconds > 0:  # a NaN too
        raise InvalidInput(f"{option} {value!r}: must be above 0 seconds")
    return float(seconds)


# --- percentages and compare's gates --------------------------------------------------------


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
    """Percentage points: `0.5` or `0.5pp`. `0.5%` is refused (relative or absolute?), and so
    is more than 100: accuracy is a percentage, so no two differ by more."""
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
    if number > 100:
        raise InvalidInput(f"{option} {raw!r}: must be at most 100 (points of accuracy)")
    return number


def endpoint_parts(endpoint: str) -> tuple[str, int]:
    """--rdzv-endpoint's HOST:PORT -> (host, port); InvalidInput unless the port is 1-65535
    (the run's check of its config, and the torchrun launcher that splits it)."""
    host, _, port = endpoint.strip().rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidInput(
            f"--rdzv-endpoint {endpoint!r}: must be HOST:PORT with a port from 1 to 65535"
        )
    return host, int(port)


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
        raise unknown(f"{option} {spec!r}", "policy", name.strip(), names)
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
