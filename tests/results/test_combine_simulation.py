"""How repeats of a ratio are combined (stats.robust_log_interval), checked by simulation:
per-process ratios drawn with a known true ratio, with planted process-level outliers and
bimodal processes (research: noise-and-robust-statistics §3). The interval must cover the
planted ratio at least 90 % of the time in every scenario, and one slow process must not
move the value the way it moves a geometric mean."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpbench.results import stats as st

REPLICATIONS = 1500
TRUE_RATIO = 1.7  # the planted speed-up


def _lognormal(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(0.0, 0.10, n)


def _one_slow_process(rng: np.random.Generator, n: int) -> np.ndarray:
    logs = rng.normal(0.0, 0.10, n)
    logs[rng.integers(n)] += math.log(1.8)  # one process of the n ran 80 % slow
    return logs


def _bimodal(rng: np.random.Generator, n: int) -> np.ndarray:
    # Each of the two processes behind a ratio is slow (×1.35) with probability 0.3.
    slow_a = rng.random(n) < 0.3
    slow_b = rng.random(n) < 0.3
    a = rng.normal(0.0, 0.05, n) + slow_a * math.log(1.35)
    b = rng.normal(0.0, 0.05, n) + slow_b * math.log(1.35)
    # a and b are drawn alike, so a - b is symmetric around 0: the planted ratio stays the
    # center of the per-pair ratios' distribution.
    return a - b


SCENARIOS = {"lognormal": _lognormal, "one slow process": _one_slow_process, "bimodal": _bimodal}


def _coverage(scenario, n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    covered = 0
    for _ in range(REPLICATIONS):
        logs = math.log(TRUE_RATIO) + scenario(rng, n)
        _, low, high = st.robust_log_interval(list(logs))
        covered += low <= TRUE_RATIO <= high
    return covered / REPLICATIONS


@pytest.mark.parametrize("n", [3, 5, 6, 10])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_interval_covers_the_planted_ratio(name: str, n: int) -> None:
    coverage = _coverage(SCENARIOS[name], n, seed=n * 31 + len(name))
    assert coverage >= 0.90, f"{name}, n={n}: coverage {coverage:.1%}"


def test_one_slow_process_moves_the_median_far_less_than_the_geometric_mean() -> None:
    rng = np.random.default_rng(7)
    median_err, geomean_err = [], []
    for _ in range(REPLICATIONS):
        logs = math.log(TRUE_RATIO) + _one_slow_process(rng, 3)
        value, _, _ = st.robust_log_interval(list(logs))
        median_err.append(abs(math.log(value / TRUE_RATIO)))
        geomean_err.append(abs(float(np.mean(logs)) - math.log(TRUE_RATIO)))
    # Typical (median) error: the geometric mean of 3 moves ~20 %; the median well under 10 %.
    assert math.expm1(float(np.median(median_err))) < 0.10
    assert math.expm1(float(np.median(geomean_err))) > 0.15


def test_the_value_is_the_median_and_the_interval_holds_it() -> None:
    ratios = [1.52, 1.48, 1.61, 1.55, 1.50, 2.70]
    logs = [math.log(r) for r in ratios]
    value, low, high = st.robust_log_interval(logs)
    assert value == pytest.approx(math.exp((math.log(1.52) + math.log(1.55)) / 2))
    # n = 6: the order-statistic interval is [min, max] (96.9 %), the hull keeps it
    assert low <= 1.48 + 1e-12 and high >= 2.70 - 1e-12


def test_sign_interval_confidence_levels() -> None:
    # n = 10: [x(2), x(9)] (97.9 %); n = 12: [x(3), x(10)] (96.1 %)
    assert st.sign_interval(list(range(1, 11)))[1:] == (2, 9)
    assert st.sign_interval(list(range(1, 13)))[1:] == (3, 10)
    assert st.sign_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
