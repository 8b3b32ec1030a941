"""Number formatting shared by every renderer, so a value reads the same in each format."""

from __future__ import annotations

import math

from mpbench.compare.summary.estimate import REPEATS, WITHIN_RUN, Estimate

DASH = "—"
WITHIN_RUN_MARK = "†"  # every within-run-only interval carries it; the footnote says why


def interval_kind(estimate: Estimate) -> str:
    """What the interval rests on, in words: `within-run only`, `over 3 repeats`, or why there
    is none (`too few timed steps for an interval`)."""
    if estimate.kind == WITHIN_RUN:
        return WITHIN_RUN
    if estimate.kind == REPEATS:
        return f"over {estimate.n} repeat{'' if estimate.n == 1 else 's'}"
    return estimate.no_interval or "no interval"


def _with_interval(estimate: Estimate | None, one, span) -> str:
    """`value (low–high)`, `†` after a within-run interval; where an interval was wanted but
    could not be taken, the reason in its place: `0.13× (too few timed steps for an
    interval)`. `span(value, low, high)` gives the value's text and the bounds'."""
    if estimate is None:
        return DASH
    if not estimate.has_interval:
        text = one(estimate.value)
        return f"{text} ({estimate.no_interval})" if estimate.no_interval else text
    value, bounds = span(estimate.value, estimate.low, estimate.high)
    mark = WITHIN_RUN_MARK if estimate.kind == WITHIN_RUN else ""
    return f"{value} ({bounds}){mark}"


def _alone(one, span):
    """A `span` for _with_interval from a value format and a bounds format that agree."""
    return lambda value, low, high: (one(value), span(low, high))


def ratio_parts(value: float, low: float, high: float) -> tuple[str, str]:
    """(`2.45×`, `2.41–2.49`): a ratio and its interval, by significant_triple."""
    text, lo, hi = significant_triple(value, low, high)
    return f"{text}×", f"{lo}–{hi}"


def ratio_interval(estimate: Estimate | None) -> str:
    """`2.45× (2.41–2.49)`, `0.0031× (0.0012–3.95)`; `†` after a within-run-only interval."""
    return _with_interval(estimate, ratio, ratio_parts)


def points_interval(estimate: Estimate | None) -> str:
    """`-0.13 pp (-0.30 to +0.04)`."""
    return _with_interval(
        estimate, points, _alone(points, lambda lo, hi: f"{_pp(lo)} to {_pp(hi)}")
    )


def change_interval(change: Estimate | None) -> str:
    """A relative change: `+20.0 % (+17.6 to +22.5)`."""
    return _with_interval(
        change, percent_change, _alone(percent_change, lambda lo, hi: f"{_pct(lo)} to {_pct(hi)}")
    )


def ms_interval(estimate: Estimate | None) -> str:
    """A step time's interval alone: `2.31–2.52 (n=3)`, `2.36–2.44†`, or why there is none."""
    if estimate is not None and estimate.no_interval:
        return estimate.no_interval
    if estimate is None or not estimate.has_interval:
        return DASH
    if estimate.kind == WITHIN_RUN:
        return f"{ms_range(estimate.low, estimate.high)}{WITHIN_RUN_MARK}"
    return f"{ms_range(estimate.low, estimate.high)} (n={estimate.n})"


def ms(seconds: float | None) -> str:
    """Milliseconds with three significant digits: 0.0412, 0.412, 4.12, 41.2, 412 (never
    `0.000` for a step of a few microseconds: `significant`)."""
    if seconds is None:
        return DASH
    return significant(seconds * 1000, decimals=3, least=3)


def ms_range(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return DASH
    return f"{ms(low)}–{ms(high)}"


def size(num_bytes: float | None) -> str:
    if num_bytes is None:
        return DASH
    mib = num_bytes / 2**20
    if mib >= 1024:
        return f"{mib / 1024:.2f} GiB"
    if mib >= 100:
        return f"{mib:.0f} MiB"
    return f"{mib:.1f} MiB"


def ratio(value: float | None) -> str:
    """2.45 -> '2.45×', 0.0031 -> '0.0031×', 307.6 -> '308×' (see `significant`)."""
    return DASH if value is None else f"{significant(value)}×"


def ratio_range(low: float, high: float) -> str:
    """A ratio's interval alone: `0.0031–3.95×`, never `0.00–3.95×`."""
    return "–".join(significant_pair(low, high)) + "×"


# --- significant figures --------------------------------------------------------------------
#
# THE rule for ratios (speed-ups, memory ratios, changes vs the baseline) and their intervals
# in every text format: two decimals, but never fewer than 2 significant figures nor more than
# 3 (0.0031, 0.18, 3.95, 70.1, 308). So a tiny positive bound never reads "0.00", and a
# huge one carries no noise digits. JSON and CSV keep the full floats.


SCIENTIFIC_BELOW, SCIENTIFIC_FROM = 1e-4, 1e5  # outside: 2 figures in scientific notation


def _decimals(value: float, decimals: int, least: int, most: int) -> int:
    """How many decimals `value` gets: `decimals`, clamped so that it shows between `least`
    and `most` significant figures (least=0: no lower limit)."""
    if value == 0 or not math.isfinite(value):
        return decimals
    exponent = math.floor(math.log10(abs(value)))  # 3.95 -> 0, 0.0031 -> -3, 307.6 -> 2
    fewest = most - 1 - exponent  # decimals that still show `most` figures: the cap
    out = min(decimals, fewest)
    if least:
        out = max(out, least - 1 - exponent)
    return max(out, 0)


def significant(value: float, digits: int = 3, decimals: int = 2, least: int = 2) -> str:
    """`value` with `decimals` decimals, but at least `least` and at most `digits` significant
    figures: 0.0031 -> '0.0031', 0.18 -> '0.18', 3.95 -> '3.95', 70.11 -> '70.1',
    307.64 -> '308'; below 1e-4 or from 1e5, two figures in scientific notation
    (1.1e-13, 7.4e+10). Zero is '0.00' (with decimals=2); a non-finite value is spelled out."""
    if not math.isfinite(value):
        return f"{value}"
    if value != 0 and not SCIENTIFIC_BELOW <= abs(value) < SCIENTIFIC_FROM:
        # A t-interval of 2 repeats can span 1e-13 to 1e+10: digits there are noise.
        return f"{value:.{max(least, 2) - 1}e}"
    places = _decimals(value, decimals, least, digits)
    text = f"{value:.{places}f}"
    rounded = float(text)
    if rounded != 0 and _decimals(rounded, decimals, least, digits) < places:
        text = f"{value:.{_decimals(rounded, decimals, least, digits)}f}"  # 9.996 -> '10.0'
    return text


def significant_pair(low: float, high: float, **rule: int) -> tuple[str, str]:
    """Both bounds of one interval by `significant`, each with its own figures
    (`0.0031`–`3.95`, `70.1`–`355`); bounds that differ but would read alike get more
    decimals, both the same number, until they read apart (`2.451`–`2.454`, at most 3 more).
    Bounds still alike after 3 more stay as they read: digits that separate nothing are noise
    (`0.35–0.35`, not `0.35216–0.35216`)."""
    lo, hi = significant(low, **rule), significant(high, **rule)
    if lo != hi or low == high or not (math.isfinite(low) and math.isfinite(high)):
        return lo, hi
    places = max(len(t.partition(".")[2]) for t in (lo, hi))
    for extra in range(1, 4):
        wider = f"{low:.{places + extra}f}", f"{high:.{places + extra}f}"
        if wider[0] != wider[1]:
            return wider
    return lo, hi


def significant_triple(value: float, low: float, high: float, **rule: int) -> tuple[str, str, str]:
    """A value and its interval's bounds by `significant`, the bounds by `significant_pair`.
    Where the bounds needed more decimals to read apart and the value, rounded to fewer, would
    read outside them (0.007524 in 0.007519–0.007544 read `0.0075× (0.00752–0.00754)`), the
    value gets as many as they have: rounded alike, a value between its bounds stays there."""
    text = significant(value, **rule)
    lo, hi = significant_pair(low, high, **rule)
    fixed = "e" not in lo + hi  # bounds in scientific notation read apart on their own
    if fixed and math.isfinite(value) and not float(lo) <= float(text) <= float(hi):
        text = f"{value:.{len(lo.partition('.')[2])}f}"
    return text, lo, hi


def percent_change(fraction: float | None) -> str:
    """+0.213 -> '+21.3 %'."""
    if fraction is None:
        return DASH
    return f"{_pct(fraction)} %"


def _pct(fraction: float) -> str:
    """+0.213 -> '+21.3', +3.549 -> '+355' (`significant`: one decimal, at most 3 figures)."""
    value = 0.0 if abs(fraction) < 0.0005 else fraction * 100  # no "-0.0"
    return ("-" if value < 0 else "+") + significant(abs(value), decimals=1, least=0)


def limit_percent(fraction: float) -> str:
    return f"{fraction * 100:g} %"


def accuracy(fraction: float | None) -> str:
    return DASH if fraction is None else f"{fraction * 100:.2f} %"


def points(pp: float | None) -> str:
    if pp is None:
        return DASH
    return f"{_pp(pp)} pp"


def _pp(pp: float) -> str:
    return f"{0.0 if abs(pp) < 0.005 else pp:+.2f}"  # no "-0.00"


def throughput(samples_per_s: float | None) -> str:
    if samples_per_s is None:
        return DASH
    if samples_per_s >= 100:
        return f"{samples_per_s:,.0f}"
    return f"{samples_per_s:.1f}"


def fraction_percent(value: float | None) -> str:
    """MFU and the like: 0.123 -> '12.3 %'."""
    return DASH if value is None else f"{value * 100:.1f} %"


def loss_scale(scale: float | None, skipped: int | None) -> str:
    if scale is None and skipped is None:
        return DASH
    parts = []
    if scale is not None:
        parts.append(f"{scale:g}")
    if skipped is not None:
        parts.append(f"{skipped} skipped")
    return " / ".join(parts)


def util_percent(value: float | None) -> str:
    """A utilisation already in percent (CPU: 100 is one core busy): '198 %', '7.5 %'."""
    if value is None:
        return DASH
    return f"{value:.0f} %" if abs(value) >= 10 else f"{value:.1f} %"


def _three_digits(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def watts(value: float | None) -> str:
    """Mean power in W: '245', '41.3'."""
    return DASH if value is None else _three_digits(value)


def millijoules(joules: float | None) -> str:
    """Energy per sample, given in joules, shown in mJ: 0.0123 J -> '12.3'."""
    return DASH if joules is None else _three_digits(joules * 1000)


def efficiency_interval(estimate: Estimate | None) -> str:
    """A scaling efficiency in percent with its interval: `92.0 % (88.1–95.9)†`."""
    return _with_interval(estimate, fraction_percent, _efficiency_parts)


def _efficiency_parts(value: float, low: float, high: float) -> tuple[str, str]:
    """(`92.0 %`, `88.1–95.9`): an efficiency and its interval in percent, by
    significant_triple (one decimal, 2 to 3 figures)."""
    text, lo, hi = significant_triple(value * 100, low * 100, high * 100, decimals=1)
    return f"{text} %", f"{lo}–{hi}"


def efficiency_range(low: float, high: float) -> str:
    return f"{_percent_span(low, high)} %"


def _percent_span(low: float, high: float) -> str:
    """A fraction's interval in percent, one decimal as before, never `0.0` for a positive
    bound (`significant`, 2 to 3 figures): `88.1–95.9`, `0.041–12.5`."""
    return "–".join(significant_pair(low * 100, high * 100, decimals=1))
