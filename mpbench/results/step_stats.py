"""The statistics of a series of step times, in one place: the record builder writes them
into `StepTimeStats`, compare pools them over repeats, the straggler ratio takes them of the
ranks' medians (docs/architecture.md, "Where a new thing goes": a statistic).

pytest-benchmark's `Stats` is the model: built from the raw times, a property per statistic,
each computed when first asked. Only the standard library is imported here (reading records
must not pay for numpy); the drift test, which bootstraps, imports `stats` when asked.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from functools import cached_property


class StepStats:
    """Statistics of step times in seconds (any order; the drift test reads them in order).
    An empty series has count 0 and None for every statistic."""

    def __init__(self, raw_s: Iterable[float]) -> None:
        self.raw_s = [float(t) for t in raw_s]

    @property
    def count(self) -> int:
        return len(self.raw_s)

    @cached_property
    def sorted(self) -> list[float]:
        return sorted(self.raw_s)

    @cached_property
    def median(self) -> float | None:
        return statistics.median(self.raw_s) if self.raw_s else None

    @cached_property
    def mean(self) -> float | None:
        return statistics.fmean(self.raw_s) if self.raw_s else None

    @cached_property
    def stdev(self) -> float | None:
        """The sample standard deviation; 0.0 for one step."""
        if not self.raw_s:
            return None
        return statistics.stdev(self.raw_s) if len(self.raw_s) > 1 else 0.0

    @property
    def min(self) -> float | None:
        return self.sorted[0] if self.raw_s else None

    @property
    def max(self) -> float | None:
        return self.sorted[-1] if self.raw_s else None

    @cached_property
    def p10(self) -> float | None:
        return self.percentile(10)

    @cached_property
    def p90(self) -> float | None:
        return self.percentile(90)

    def percentile(self, pct: float) -> float | None:
        """Linearly interpolated between the two nearest ranks (numpy's default method).
        statistics.quantiles(method="inclusive") is the same rule, but it differs from this
        in the last bits of about a third of the values and refuses a single step."""
        ordered = self.sorted
        if not ordered:
            return None
        rank = (len(ordered) - 1) * pct / 100
        low = math.floor(rank)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

    @cached_property
    def drift(self) -> tuple[float | None, float | None, bool | None]:
        """(first-half median, second-half median, drifting): the rule is `stats.drift`."""
        # Imported here: the test bootstraps with numpy.
        from mpbench.results.stats import drift

        return drift(self.raw_s)

    @property
    def first_half_median(self) -> float | None:
        return self.drift[0]

    @property
    def second_half_median(self) -> float | None:
        return self.drift[1]

    @property
    def drifting(self) -> bool | None:
        return self.drift[2]


def median_of_present(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (a figure some repeats lack); None if none."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None
