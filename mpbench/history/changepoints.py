"""Change points in a series of measurements: where its level stepped, by how much, how sure.

The method is penalised segmentation, the cost PELT minimises (R. Killick, P. Fearnhead and
I. A. Eckley, "Optimal detection of changepoints with a linear computational cost", JASA 107
(2012) 1590-1598): the series is cut into segments of constant mean so as to minimise

    sum over segments of  sum (y_i - segment mean)^2 / sigma^2   +   penalty x (segments - 1)

with y the logarithm of the values (a step is a ratio: +20 % is the same step at 2 ms and at
200 ms) and sigma the noise of one point. It is solved exactly by PELT's recursion over every
possible last cut (optimal partitioning); PELT's pruning would only make that faster, and a
history of hundreds of points takes milliseconds without it.

- sigma is not assumed: it is estimated from the series itself, in two passes. First robustly,
  as the median absolute difference of neighbouring points over 0.6745 x sqrt(2) (the
  difference-based MAD, as in Fryzlewicz, "Wild binary segmentation", Ann. Statist. 42
  (2014)): a step moves one difference only. That estimate is noisy on a few points, so the
  series is segmented with it, and sigma is then taken again as the pooled standard deviation
  inside the segments found (n - segments degrees of freedom), which a step does not inflate
  and which wastes fewer points; the series is segmented again with it. Both are taken over
  the points before the newest: the newest point is judged against the history's noise, and a
  step at it must not inflate the noise it is measured against. sigma is never taken below
  NOISE_FLOOR.
- penalty = PENALTY x ln(n) per cut: the BIC of a change in mean is 2 x ln(n); the default is
  larger because sigma is estimated from the same few points (benchmarks/history_power.py
  measured false alarms and power on synthetic series with planted steps: docs/history.md).
- A segment is at least MIN_SEGMENT points long, except the newest, which may be a single
  point: a one-point blip in the middle of a history is an outlier, not two change points,
  but the newest point must be able to start a new level, or a CI run could never flag itself.
  Cutting off the newest point alone is one question, not a search over every position, so
  its penalty is a test's, not the search's: the square of Student's t at NEWEST_ALPHA
  (two-sided), i.e. the newest point's likelihood-ratio test against the segment before it.

Each change point has its size (the ratio of the two segments' geometric means, as a change
in percent) with a 95 % interval (Student's t on the difference of the log means, sigma as
above), and an approximate 95 % set of where it lies: the cuts between its neighbouring
change points whose cost is within the chi-square(1) 95 % quantile of the best one's.

Pure numpy, no I/O, no records: series.py feeds it values, render.py shows what it finds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mpbench.results import stats as st

PENALTY = 5.0  # x ln(n); benchmarks/history_power.py measured the trade-off
NEWEST_ALPHA = 0.01  # the newest point alone is a new level at this two-sided level
MIN_SEGMENT = 2  # points, except the newest segment (one point may start a new level)
NOISE_FLOOR = 0.005  # sigma is never taken below 0.5 %: no reading is better than that
MIN_POINTS = 6  # fewer: no detection (sigma from 4 differences decides nothing)
_CHI2_1_95 = 3.841  # chi-square, 1 degree of freedom, 95 %: the location's confidence set


@dataclass(frozen=True)
class ChangePoint:
    """The level changes at point `index` (the first point of the new level)."""

    index: int
    before: float  # geometric mean of the segment before, in the values' unit
    after: float  # and of the segment from `index` on
    change: float  # after / before - 1 (+0.20: 20 % higher)
    low: float  # 95 % interval of `change`
    high: float
    first: int  # approximate 95 % set of where it lies: index between first and last
    last: int
    segment_before: int  # how many points the two segments have
    segment_after: int


@dataclass(frozen=True)
class Detection:
    """What the detector found in one series."""

    changes: list[ChangePoint]
    sigma: float  # the noise of one point, on the log scale (0.05: about 5 %)
    penalty: float  # the penalty of a cut, in units of sigma^2
    points: int

    @property
    def segments(self) -> list[tuple[int, int]]:
        """[start, end) of each segment."""
        cuts = [0, *(c.index for c in self.changes), self.points]
        return list(itertools.pairwise(cuts))


def noise(logs: np.ndarray) -> float:
    """sigma of one point, from the median absolute difference of neighbours."""
    if len(logs) < 2:
        return NOISE_FLOOR
    diffs = np.abs(np.diff(logs))
    return max(float(np.median(diffs)) / (0.6745 * math.sqrt(2.0)), NOISE_FLOOR)


class _Cost:
    """sum (y - mean)^2 over y[s:t], from prefix sums, in O(1) per segment (vectorised)."""

    def __init__(self, y: np.ndarray) -> None:
        self.s1 = np.concatenate(([0.0], np.cumsum(y)))
        self.s2 = np.concatenate(([0.0], np.cumsum(y * y)))

    def __call__(self, s: np.ndarray | int, t: int) -> np.ndarray | float:
        n = t - s
        total = self.s1[t] - self.s1[s]
        return np.maximum(self.s2[t] - self.s2[s] - total * total / n, 0.0)

    def mean(self, s: int, t: int) -> float:
        return float((self.s1[t] - self.s1[s]) / (t - s))


def detect(
    values: Sequence[float],
    penalty: float = PENALTY,
    newest_alpha: float = NEWEST_ALPHA,
    min_segment: int = MIN_SEGMENT,
) -> Detection:
    """The change points of a series of positive values (module docstring)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or np.any(~np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("values must be a flat list of positive finite numbers")
    n = len(x)
    y = np.log(x)
    beta = penalty * math.log(max(n, 2))
    if n < MIN_POINTS:
        return Detection([], noise(y), beta, n)
    newest = st.t_quantile(1 - newest_alpha / 2, n - 2) ** 2
    # The noise of the history before the newest point: the newest point is judged against
    # it, and a step there must not inflate the very noise it is measured against.
    before = y[:-1]
    first = _segment(_Cost(before), n - 1, beta, newest, noise(before), min_segment)
    sigma = _pooled(before, first)
    cost = _Cost(y)
    cuts = _segment(cost, n, beta, newest, sigma, min_segment)
    df = n - (len(cuts) - 1)
    changes = [_change(cost, cuts, i, sigma, df) for i in range(1, len(cuts) - 1)]
    return Detection(changes, sigma, beta, n)


def _pooled(y: np.ndarray, cuts: list[int]) -> float:
    """The standard deviation inside the segments, pooled (n - segments degrees of freedom)."""
    segments = list(itertools.pairwise(cuts))
    rss = sum(float(np.sum((y[a:b] - y[a:b].mean()) ** 2)) for a, b in segments)
    df = len(y) - len(segments)
    return max(math.sqrt(rss / df), NOISE_FLOOR) if df > 0 else NOISE_FLOOR


def _segment(
    cost: _Cost, n: int, beta: float, newest: float, sigma: float, min_segment: int
) -> list[int]:
    """The optimal cuts [0, c1, ..., n]: F(t) = min_s F(s) + cost(s, t) / sigma^2 + penalty,
    the penalty `newest` for the cut that leaves the newest point alone, else `beta`."""
    best = np.full(n + 1, np.inf)
    best[0] = -beta
    last = np.zeros(n + 1, dtype=int)
    for t in range(1, n + 1):
        shortest = 1 if t == n else min_segment  # the newest segment may be one point
        s = np.arange(0, t - shortest + 1)
        if len(s) == 0:
            continue
        # best[s] is infinite where y[:s] cannot be cut into segments of min_segment or more
        penalties = np.where((t == n) & (s == n - 1), newest, beta)
        total = best[s] + cost(s, t) / (sigma * sigma) + penalties
        k = int(np.argmin(total))
        best[t], last[t] = total[k], int(s[k])
    cuts = [n]
    while cuts[-1] > 0:
        cuts.append(int(last[cuts[-1]]))
    return cuts[::-1]


def _change(cost: _Cost, cuts: list[int], i: int, sigma: float, df: int) -> ChangePoint:
    start, index, end = cuts[i - 1], cuts[i], cuts[i + 1]
    a, b = index - start, end - index
    diff = cost.mean(index, end) - cost.mean(start, index)
    half = st.t_quantile(0.975, max(df, 1)) * sigma * math.sqrt(1 / a + 1 / b)
    # Where it could lie: every cut between the neighbouring change points whose cost is within
    # the chi-square(1) 95 % quantile of the best (the cost is -2 log-likelihood x sigma^2).
    taus = np.arange(start + 1, end)
    split = np.array([cost(start, int(t)) + cost(int(t), end) for t in taus])
    near = taus[(split - split.min()) / (sigma * sigma) <= _CHI2_1_95]
    return ChangePoint(
        index=index,
        before=math.exp(cost.mean(start, index)),
        after=math.exp(cost.mean(index, end)),
        change=math.expm1(diff),
        low=math.expm1(diff - half),
        high=math.expm1(diff + half),
        first=int(near.min()) if len(near) else index,
        last=int(near.max()) if len(near) else index,
        segment_before=a,
        segment_after=b,
    )
