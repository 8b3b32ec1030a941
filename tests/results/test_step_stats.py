"""StepStats: the one home of step-time statistics (results/step_stats.py)."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from mpbench.results import StepTimeStats
from mpbench.results.scaling import straggler_ratio
from mpbench.results.step_stats import StepStats, median_of_present


def test_every_statistic_of_a_series() -> None:
    stats = StepStats([0.4, 0.1, 0.3, 0.2, 0.5])
    assert stats.count == 5
    assert stats.median == 0.3
    assert stats.mean == pytest.approx(0.3)
    assert (stats.min, stats.max) == (0.1, 0.5)
    assert stats.stdev == pytest.approx(statistics.stdev([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert stats.p10 == pytest.approx(0.14)
    assert stats.p90 == pytest.approx(0.46)


def test_percentiles_follow_numpys_default_rule() -> None:
    rng = random.Random(3)
    for n in (1, 2, 3, 10, 101):
        raw = [rng.lognormvariate(-5, 0.3) for _ in range(n)]
        stats = StepStats(raw)
        for pct in (0, 10, 50, 90, 100):
            assert stats.percentile(pct) == pytest.approx(float(np.percentile(raw, pct)))


def test_an_empty_series_has_no_statistics_and_one_step_no_spread() -> None:
    empty = StepStats([])
    assert empty.count == 0
    assert empty.median is empty.p10 is empty.stdev is empty.max is None
    assert StepStats([0.01]).stdev == 0.0
    assert StepStats([0.01]).drift == (None, None, None)


def test_the_record_holds_what_step_stats_compute() -> None:
    raw = [0.01 + 0.0001 * (i % 7) for i in range(40)]
    stats, record = StepStats(raw), StepTimeStats.from_samples(raw, warmup_steps=2)
    assert (record.median_s, record.mean_s, record.p10_s, record.p90_s, record.stdev_s) == (
        stats.median,
        stats.mean,
        stats.p10,
        stats.p90,
        stats.stdev,
    )
    assert (record.first_half_median_s, record.second_half_median_s, record.drifting) == (
        stats.drift
    )


def test_the_median_of_what_is_present_and_the_straggler_ratio() -> None:
    assert median_of_present([None, 3.0, 1.0, None, 2.0]) == 2.0
    assert median_of_present([None]) is None
    assert straggler_ratio([0.01, 0.012, 0.011]) == pytest.approx(0.012 / 0.011)
    assert straggler_ratio([0.01]) is None
