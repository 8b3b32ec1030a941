"""Number formatting shared by every renderer, so a value reads the same in each format."""

from __future__ import annotations

from mpbench.compare.estimate import REPEATS, WITHIN_RUN, Estimate

DASH = "—"
WITHIN_RUN_MARK = "†"  # every within-run-only interval carries it; the footnote says why


def interval_kind(estimate: Estimate) -> str:
    """What the interval rests on, in words: `within-run only`, `over 3 repeats`."""
    if estimate.kind == WITHIN_RUN:
        return WITHIN_RUN
    if estimate.kind == REPEATS:
        return f"over {estimate.n} repeat{'' if estimate.n == 1 else 's'}"
    return "no interval"


def _with_interval(estimate: Estimate | None, one, span) -> str:
    if estimate is None:
        return DASH
    text = one(estimate.value)
    if estimate.has_interval:
        mark = WITHIN_RUN_MARK if estimate.kind == WITHIN_RUN else ""
        text += f" ({span(estimate.low, estimate.high)}){mark}"
    return text


def ratio_interval(estimate: Estimate | None) -> str:
    """`2.45× (2.41–2.49)`, `†` after a within-run-only interval."""
    return _with_interval(estimate, ratio, lambda lo, hi: f"{lo:.2f}–{hi:.2f}")


def points_interval(estimate: Estimate | None) -> str:
    """`-0.13 pp (-0.30 to +0.04)`."""
    return _with_interval(estimate, points, lambda lo, hi: f"{_pp(lo)} to {_pp(hi)}")


def change_interval(change: Estimate | None) -> str:
    """A relative change: `+20.0 % (+17.6 to +22.5)`."""
    return _with_interval(change, percent_change, lambda lo, hi: f"{_pct(lo)} to {_pct(hi)}")


def ms_interval(estimate: Estimate | None) -> str:
    """A step time's interval alone: `2.31–2.52 (n=3)`, `2.36–2.44†`."""
    if estimate is None or not estimate.has_interval:
        return DASH
    if estimate.kind == WITHIN_RUN:
        return f"{ms_range(estimate.low, estimate.high)}{WITHIN_RUN_MARK}"
    return f"{ms_range(estimate.low, estimate.high)} (n={estimate.n})"


def ms(seconds: float | None) -> str:
    """Milliseconds with three significant digits: 0.412, 4.12, 41.2, 412."""
    if seconds is None:
        return DASH
    value = seconds * 1000
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


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
    return DASH if value is None else f"{value:.2f}×"


def ratio_range(low: float, high: float) -> str:
    return f"{low:.2f}–{high:.2f}×"


def percent_change(fraction: float | None) -> str:
    """+0.213 -> '+21.3 %'."""
    if fraction is None:
        return DASH
    return f"{_pct(fraction)} %"


def _pct(fraction: float) -> str:
    return f"{0.0 if abs(fraction) < 0.0005 else fraction * 100:+.1f}"  # no "-0.0"


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
    return _with_interval(
        estimate, fraction_percent, lambda lo, hi: f"{lo * 100:.1f}–{hi * 100:.1f}"
    )


def efficiency_range(low: float, high: float) -> str:
    return f"{low * 100:.1f}–{high * 100:.1f} %"
