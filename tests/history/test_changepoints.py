"""Change-point detection on planted series (mpbench/history/changepoints.py). The power and
false-alarm figures over many seeds are benchmarks/history_power.py's; these are fixed seeds."""

from __future__ import annotations

import numpy as np
import pytest

from mpbench.history.changepoints import MIN_POINTS, detect


def series(n: int, noise: float, seed: int, step_at: int | None = None, step: float = 0.0):
    rng = np.random.default_rng(seed)
    values = 2.0e-3 * np.exp(rng.normal(0.0, noise, n))
    if step_at is not None:
        values[step_at:] *= 1 + step
    return values


@pytest.mark.parametrize("seed", range(5))
def test_flat_noise_has_no_change_point(seed):
    assert detect(series(20, 0.05, seed)).changes == []


@pytest.mark.parametrize("seed", range(5))
def test_a_planted_step_in_the_middle_is_found_with_its_size(seed):
    found = detect(series(20, 0.03, seed, step_at=12, step=0.25))
    (change,) = found.changes
    assert change.index == 12
    assert change.low < 0.25 < change.high and change.low > 0.1
    assert change.first <= 12 <= change.last  # the location's set holds it
    assert 0.01 < found.sigma < 0.06  # the noise, not inflated by the step


def test_a_step_at_the_newest_point_is_a_change_point_of_one_point():
    (change,) = detect(series(15, 0.02, 1, step_at=14, step=0.3)).changes
    assert change.index == 14 and change.segment_after == 1 and change.change > 0.2


def test_a_slowdown_and_a_recovery_are_two_change_points():
    values = series(30, 0.02, 2, step_at=10, step=0.4)
    values[20:] /= 1.4
    assert [c.index for c in detect(values).changes] == [10, 20]


def test_a_single_outlier_in_the_middle_is_not_a_change():
    values = series(20, 0.03, 3)
    values[9] *= 1.5
    assert detect(values).changes == []


def test_too_few_points_detect_nothing():
    assert detect(series(MIN_POINTS - 1, 0.01, 0, step_at=3, step=1.0)).changes == []
    with pytest.raises(ValueError):
        detect([1.0, 0.0, 2.0, 1.0, 1.0, 1.0])
