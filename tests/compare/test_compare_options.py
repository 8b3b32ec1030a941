"""How thresholds are spelled on the command line."""

from __future__ import annotations

import pytest

from mpbench.compare import parse_format
from mpbench.errors import InvalidInput
from mpbench.parsers import parse_fraction, parse_min_speedup, parse_points


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10%", 0.10), ("0.1", 0.10), (" 2.5 % ", 0.025), ("0", 0.0), ("150%", 1.5), ("1", 1.0)],
)
def test_fraction_accepts_percent_or_fraction(text: str, expected: float) -> None:
    assert parse_fraction("--max-slowdown", text) == pytest.approx(expected)


def test_fraction_none_means_no_gate() -> None:
    assert parse_fraction("--max-slowdown", None) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10", "ambiguous: write 10% for a percentage or 0.1 for a fraction"),
        ("ten%", "expected a percentage like 10% or 0.1"),
        ("-5%", "must not be negative"),
        ("nan", "expected a percentage"),
    ],
)
def test_fraction_refuses_what_it_cannot_read(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_fraction("--max-slowdown", text)


@pytest.mark.parametrize(("text", "expected"), [("0.5", 0.5), ("0.5pp", 0.5), ("1 PP", 1.0)])
def test_points(text: str, expected: float) -> None:
    assert parse_points("--max-accuracy-drop", text) == expected


def test_points_refuse_percent_because_it_is_ambiguous() -> None:
    with pytest.raises(InvalidInput, match=r"percentage points; write 0\.5 or 0\.5pp"):
        parse_points("--max-accuracy-drop", "0.5%")


def test_min_speedup_resolves_aliases_and_x_suffix() -> None:
    parsed = parse_min_speedup(["bf16=1.5", "AMP_FP16=0.9x"])
    assert parsed == {"mixed_bfloat16": 1.5, "mixed_float16": 0.9}
    # two limits for one policy (an alias is the same policy) are refused, not one dropped
    with pytest.raises(InvalidInput, match="both set the limit for mixed_float16"):
        parse_min_speedup(["mixed_float16=1.0x", "AMP_FP16=0.9"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bf16", "expected POLICY=RATIO"),
        ("=1.5", "expected POLICY=RATIO"),
        ("fp4=1.5", "unknown policy 'fp4'; valid choices: tf32, mixed_float16"),
        ("all=1.5", "name one policy per limit"),
        ("float32=1.2", "measured against float32 itself"),
        ("bf16=fast", "expected a ratio like 1.5"),
        ("bf16=0", "must be positive"),
    ],
)
def test_min_speedup_errors(spec: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_min_speedup([spec])


def test_format_names() -> None:
    assert parse_format("Markdown") == "markdown"
    with pytest.raises(InvalidInput, match="unknown format 'pdf'; valid choices: table, markdown"):
        parse_format("pdf")
