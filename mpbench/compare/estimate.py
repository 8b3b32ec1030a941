"""A measured value with its spread, and the rule that decides when two of them differ.

Noise handling lives in one place: every gate asks `Estimate` whether a difference is
outside the measured spread before it calls the difference a regression.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Two-sided 95 % distribution-free interval of a median, normal approximation of the
# binomial ranks: ranks n/2 -/+ 1.96*sqrt(n)/2.
_Z95 = 1.96


@dataclass(frozen=True)
class Estimate:
    """`value` is the central value (median of repeat medians); `low`/`high` its spread."""

    value: float
    low: float
    high: float
    repeats: int = 1

    @classmethod
    def of_repeats(cls, values: list[float]) -> Estimate:
        """Median of the repeats, spread = smallest to largest repeat."""
        return cls(statistics.median(values), min(values), max(values), len(values))

    @classmethod
    def point(cls, value: float) -> Estimate:
        return cls(value, value, value)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def ratio_to(self, other: Estimate) -> Estimate:
        """self / other, the spread running from the least to the most favourable pairing."""
        return Estimate(
            self.value / other.value,
            self.low / other.high,
            self.high / other.low,
            min(self.repeats, other.repeats),
        )

    def minus(self, other: Estimate) -> Estimate:
        return Estimate(
            self.value - other.value,
            self.low - other.high,
            self.high - other.low,
            min(self.repeats, other.repeats),
        )

    def scaled(self, factor: float) -> Estimate:
        low, high = sorted((self.low * factor, self.high * factor))
        return Estimate(self.value * factor, low, high, self.repeats)


def differs(candidate: Estimate, baseline: Estimate) -> bool:
    """True when the candidate's median lies outside the baseline's measured spread.

    The baseline is the reference: a candidate median that the baseline itself produced
    (between its lowest and highest repeat, or inside its median's 95 % interval) is noise,
    however far the two medians are apart.
    """
    return not baseline.contains(candidate.value)


def median_interval(samples: list[float], median: float) -> tuple[float, float]:
    """95 % interval of the median of `samples`, anchored on `median` (the recorded one).

    The interval's width is taken relative to the samples' own median, so a record whose
    statistics were rescaled (a derived baseline) keeps a consistent interval.
    """
    ordered = sorted(s for s in samples if math.isfinite(s) and s > 0)
    n = len(ordered)
    if n == 0:
        return median, median
    if n < 6:  # the distribution-free interval is the whole range for so few samples
        lo_rank, hi_rank = 1, n
    else:
        half = _Z95 * math.sqrt(n) / 2
        lo_rank = max(1, math.floor(n / 2 - half))
        hi_rank = min(n, math.ceil(n / 2 + 1 + half))
    own = statistics.median(ordered)
    return median * ordered[lo_rank - 1] / own, median * ordered[hi_rank - 1] / own
