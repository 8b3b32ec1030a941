"""Every number compare shows with an interval, and the one rule that judges it against a limit.

One place for each rule (docs/compare.md, "Intervals"):
- a cell's value over repeats: geometric mean (positive quantities) or mean, with a 95 %
  t-interval over the repeats;
- a ratio to float32 inside one run: per-repeat pairs (same run, same repeat), the median of
  the per-pair ratios with the hull of the t-interval on their logs and the order-statistic
  interval (one slow process cannot move it far; the interval keeps the t-interval's
  coverage); a difference (accuracy): mean of the differences with a 95 % t-interval;
- one pair of step-time series only: a block-bootstrap interval of the ratio of medians,
  labelled *within-run only* (it ignores process-to-process variance: optimistic); with fewer
  than stats.MIN_SAMPLES_FOR_MEDIAN_INTERVAL timed steps on a side, no interval, and the
  estimate says why (TOO_FEW_STEPS) instead;
- a change against a baseline: Welch's two-sample t-interval over the two sets of repeats
  (on logs for ratios), or the block bootstrap when each side has one repeat;
- a gate fails only when the whole interval is past its limit; a point estimate past the limit
  with an interval that straddles it is *inconclusive*, and so is one whose interval could not
  be taken (TOO_FEW_STEPS);
- no interval excludes its own value (Estimate widens it to hold the value).
The arithmetic itself lives in `mpbench.results.stats`, shared with the runner.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from mpbench.results import StepTimeStats
from mpbench.results import stats as st

REPEATS = "repeats"
WITHIN_RUN = "within-run only"
# Why a one-repeat step time or step-time ratio has no interval: a side has fewer timed steps
# than the median's interval needs (stats.MIN_SAMPLES_FOR_MEDIAN_INTERVAL says why that many).
TOO_FEW_STEPS = "too few timed steps for an interval"
MIN_STEPS = st.MIN_SAMPLES_FOR_MEDIAN_INTERVAL
_EPS = 1e-9  # a value exactly at the limit passes, whatever the float rounding
_SEED = 0  # bootstrap intervals are seeded: the same files give the same report


@dataclass(frozen=True)
class Estimate:
    """A value with its 95 % interval. `kind` says where the interval comes from: REPEATS
    (t-interval over n separate processes), WITHIN_RUN (block bootstrap inside one process),
    or None: a single value with no interval (low == high == value); then `no_interval` says
    why where an interval was wanted (TOO_FEW_STEPS), and every format says it too.

    The interval always holds the value: bounds rescaled onto a recorded median can land a
    rounding error past it, and a printed `0.13× (0.038–0.12)` would contradict itself."""

    value: float
    low: float
    high: float
    kind: str | None = None
    n: int = 1  # repeats (or repeat pairs) behind the value
    no_interval: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "low", min(self.low, self.value))
        object.__setattr__(self, "high", max(self.high, self.value))

    @classmethod
    def point(cls, value: float, no_interval: str | None = None) -> Estimate:
        return cls(value, value, value, no_interval=no_interval)

    @property
    def has_interval(self) -> bool:
        return self.kind is not None

    def scaled(self, factor: float) -> Estimate:
        low, high = sorted((self.low * factor, self.high * factor))
        return Estimate(self.value * factor, low, high, self.kind, self.n, self.no_interval)

    def shifted(self, offset: float) -> Estimate:
        return Estimate(
            self.value + offset,
            self.low + offset,
            self.high + offset,
            self.kind,
            self.n,
            self.no_interval,
        )


def _over_repeats(interval: st.Interval, n: int, samples: int | None = None) -> Estimate:
    """An interval over repeats; `samples` (default n) values behind it: one is no interval."""
    value, low, high = interval
    return Estimate(value, low, high, REPEATS if (samples or n) > 1 else None, n)


# --- one cell ------------------------------------------------------------------------------


def of_repeats(values: Sequence[float], log: bool = True) -> Estimate:
    """A cell's value over its repeats: geometric mean (`log`, all positive) or mean, with a
    t-interval over the repeats; one repeat is a single value."""
    if len(values) == 1:
        return Estimate.point(values[0])  # exactly, not exp(log(x))
    if log and all(v > 0 for v in values):
        return _over_repeats(st.log_ratio_interval(values), len(values))
    return _over_repeats(st.mean_interval(values), len(values))


def step_time(series: Sequence[StepTimeStats]) -> Estimate:
    """A cell's step time: over repeat medians, or one repeat's median and its within-run
    interval (the block bootstrap of its steps; none from fewer than MIN_STEPS steps)."""
    if len(series) > 1:
        return of_repeats([s.median_s for s in series])
    (stats,) = series
    raw = [t for t in stats.raw_s if t > 0]
    if len(raw) < MIN_STEPS:
        return Estimate.point(stats.median_s, TOO_FEW_STEPS)
    own, low, high = st.block_bootstrap_median_interval(raw, seed=_SEED)
    scale = stats.median_s / own  # anchored on the recorded median (rescaled stats stay true)
    return Estimate(stats.median_s, low * scale, high * scale, WITHIN_RUN, 1)


# --- within one run: against float32 -------------------------------------------------------


def _ratio_of_means(numerators: Sequence[float], denominators: Sequence[float]) -> Estimate | None:
    """A zero (training memory that did not measurably grow) has no logarithm: then the ratio
    of the means, with no interval; None when the denominators are all zero."""
    total = sum(denominators) / len(denominators)
    return Estimate.point(sum(numerators) / len(numerators) / total) if total > 0 else None


def paired_ratio(pairs: Sequence[tuple[float, float]]) -> Estimate | None:
    """numerator / denominator per repeat pair: the median of the per-pair ratios, with the
    hull of the t-interval on the logs and the order-statistic interval
    (stats.robust_log_interval): one slow process cannot move the value far."""
    if any(a <= 0 or b <= 0 for a, b in pairs):
        return _ratio_of_means([a for a, _ in pairs], [b for _, b in pairs])
    if len(pairs) == 1:
        return Estimate.point(pairs[0][0] / pairs[0][1])
    # Log differences, not logs of a / b: a quotient of extreme values would overflow to inf
    # or underflow to 0 before its logarithm is taken.
    logs = [math.log(a) - math.log(b) for a, b in pairs]
    return _over_repeats(st.robust_log_interval(logs), len(pairs))


def paired_difference(pairs: Sequence[tuple[float, float]]) -> Estimate:
    """a - b per repeat pair: mean and t-interval, in the values' units."""
    return _over_repeats(st.paired_difference_interval([a - b for a, b in pairs]), len(pairs))


def step_ratio(pairs: Sequence[tuple[StepTimeStats, StepTimeStats]]) -> Estimate:
    """median(numerator) / median(denominator) per pair of repeats of one run (the speed-up
    is float32 / policy). Two or more pairs: over the repeats; one pair: within-run only."""
    if len(pairs) > 1:
        return paired_ratio([(a.median_s, b.median_s) for a, b in pairs])
    ((numerator, denominator),) = pairs
    return _within_run_ratio(denominator, numerator)


def _within_run_ratio(a: StepTimeStats, b: StepTimeStats) -> Estimate:
    """median(b) / median(a) with the block-bootstrap interval of their raw steps; none
    where a side has fewer than MIN_STEPS steps."""
    point = b.median_s / a.median_s
    # Each series in units of its own recorded median: the interval is the same relative
    # spread, and no quotient of extreme (valid) step times can overflow or divide by zero.
    raw_a = [t / a.median_s for t in a.raw_s if t > 0]
    raw_b = [t / b.median_s for t in b.raw_s if t > 0]
    if len(raw_a) < MIN_STEPS or len(raw_b) < MIN_STEPS:
        return Estimate.point(point, TOO_FEW_STEPS)
    own, low, high = st.block_bootstrap_ratio_interval(raw_a, raw_b, seed=_SEED)
    scale = point / own
    return Estimate(point, low * scale, high * scale, WITHIN_RUN, 1)


# --- across runs: against a baseline -------------------------------------------------------


def step_change(base: Sequence[StepTimeStats], cand: Sequence[StepTimeStats]) -> Estimate:
    """candidate / baseline step time. Repeats on either side: Welch on the log medians; one
    repeat on each side: the block bootstrap of their steps, within-run only."""
    if len(base) == 1 and len(cand) == 1:
        return _within_run_ratio(base[0], cand[0])
    return two_sample_ratio([s.median_s for s in base], [s.median_s for s in cand])


def two_sample_ratio(base: Sequence[float], cand: Sequence[float]) -> Estimate | None:
    """Geometric-mean candidate / baseline with Welch's t-interval on the logs; n is the
    smaller side (a lone repeat borrows the other side's spread, see stats.welch_interval)."""
    if any(v <= 0 for v in (*base, *cand)):
        return _ratio_of_means(cand, base)
    if len(base) == 1 and len(cand) == 1:
        return Estimate.point(cand[0] / base[0])
    interval = st.log_welch_ratio_interval(base, cand)
    return _over_repeats(interval, min(len(base), len(cand)), max(len(base), len(cand)))


def two_sample_difference(base: Sequence[float], cand: Sequence[float]) -> Estimate:
    """mean(candidate) - mean(baseline) with Welch's t-interval."""
    interval = st.welch_interval(base, cand)
    return _over_repeats(interval, min(len(base), len(cand)), max(len(base), len(cand)))


# --- the gate rule -------------------------------------------------------------------------


class Verdict(str, Enum):
    PASS = "pass"
    INCONCLUSIVE = "inconclusive"
    FAIL = "fail"


def judge(
    estimate: Estimate, minimum: float | None = None, maximum: float | None = None
) -> Verdict:
    """FAIL only when the whole interval lies past a limit (criterion.rs's rule); INCONCLUSIVE
    when the value is past it but the interval reaches back across; PASS otherwise. A value
    exactly at a limit passes. A single value (no interval) is judged on itself, but one whose
    interval could not be taken (`no_interval`) is at worst INCONCLUSIVE: nothing says how far
    its value may be from the truth."""
    past = (maximum is not None and estimate.low > maximum + _EPS) or (
        minimum is not None and estimate.high < minimum - _EPS
    )
    if past and estimate.no_interval is None:
        return Verdict.FAIL
    if (maximum is not None and estimate.value > maximum + _EPS) or (
        minimum is not None and estimate.value < minimum - _EPS
    ):
        return Verdict.INCONCLUSIVE
    return Verdict.PASS
