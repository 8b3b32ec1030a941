"""The interval statistics shared by run and compare, on synthetic samples with known truth.

Every simulation is seeded: the coverage figures are the same on every run of the tests.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mpbench.results import StepTimeStats
from mpbench.results.stats import (
    block_bootstrap_median_interval,
    block_bootstrap_ratio_interval,
    drift,
    log_ratio_interval,
    log_welch_ratio_interval,
    mean_interval,
    paired_difference_interval,
    t_cdf,
    t_quantile,
    welch_interval,
)


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 3, 3.182),
        (0.975, 4, 2.776),
        (0.975, 9, 2.262),
        (0.975, 30, 2.042),
        (0.95, 10, 1.812),
        (0.995, 5, 4.032),
        (0.975, 10**7, 1.960),  # the normal limit
        (0.025, 4, -2.776),  # symmetric
    ],
)
def test_t_quantile_matches_published_tables(p: float, df: float, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=5e-4)


def test_t_quantile_inverts_the_cdf_for_fractional_df() -> None:
    for df in (1.5, 2.7, 13.3):
        assert t_cdf(t_quantile(0.975, df), df) == pytest.approx(0.975, abs=1e-10)
    assert t_quantile(0.5, 3) == 0.0
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_known_t_intervals() -> None:
    mean, low, high = paired_difference_interval([1.0, 2.0, 3.0])  # sd 1, n 3
    half = 4.303 / math.sqrt(3)
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half), abs=1e-3)
    geo, low, high = log_ratio_interval([2.0, 2.0, 2.0])  # no spread: a point
    assert (geo, low, high) == pytest.approx((2.0, 2.0, 2.0))
    assert log_ratio_interval([0.5, 2.0])[0] == pytest.approx(1.0)  # geometric, not 1.25
    assert mean_interval([3.0]) == (3.0, 3.0, 3.0)  # one value: no interval


def test_welch_interval_follows_the_textbook_formula() -> None:
    a, b = [10.0, 11.0, 12.0, 13.0], [14.0, 15.5, 17.0]
    diff, low, high = welch_interval(a, b)
    va, vb = np.var(a, ddof=1) / 4, np.var(b, ddof=1) / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    assert (diff, low, high) == pytest.approx((15.5 - 11.5, 4.0 - half, 4.0 + half))
    # a lone value on one side borrows the other side's spread
    diff, low, high = welch_interval([11.5], b)
    assert low < diff < high
    assert welch_interval([1.0], [2.0]) == (1.0, 1.0, 1.0)


def _repeat_medians(rng: np.random.Generator, k: int, level: float) -> np.ndarray:
    """Per-repeat medians: each process has its own speed (sd 8 % on the log scale), and a
    little step noise on top of it."""
    return level * np.exp(rng.normal(0.0, 0.08, k) + rng.normal(0.0, 0.01, k))


def test_repeat_interval_covers_the_planted_ratio() -> None:
    planted, hits = 2.0, 0
    simulations = 400
    for seed in range(simulations):
        rng = np.random.default_rng(seed)
        k = 3 + seed % 4  # 3 to 6 repeats
        float32 = _repeat_medians(rng, k, 2.0e-3)
        bf16 = _repeat_medians(rng, k, 1.0e-3)
        _, low, high = log_ratio_interval(float32 / bf16)
        hits += low <= planted <= high
    assert hits / simulations >= 0.90


def test_welch_log_interval_covers_the_planted_change() -> None:
    planted, hits = 1.15, 0
    simulations = 400
    for seed in range(simulations):
        rng = np.random.default_rng(seed)
        base = _repeat_medians(rng, 3 + seed % 3, 2.0e-3)
        cand = _repeat_medians(rng, 3 + seed % 2, 2.0e-3 * planted)
        _, low, high = log_welch_ratio_interval(base, cand)
        hits += low <= planted <= high
    assert hits / simulations >= 0.90


def _ar1(rng: np.random.Generator, n: int, phi: float, sigma: float) -> np.ndarray:
    """A stationary AR(1) series with marginal sd `sigma`: serially correlated step noise."""
    shocks = rng.normal(0.0, sigma * math.sqrt(1 - phi**2), n)
    out = np.empty(n)
    out[0] = rng.normal(0.0, sigma)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + shocks[i]
    return out


def test_block_bootstrap_covers_the_planted_ratio_on_autocorrelated_steps() -> None:
    planted, hits = 2.0, 0
    simulations = 200
    for seed in range(simulations):
        rng = np.random.default_rng(seed)
        float32 = 2.0e-3 * np.exp(_ar1(rng, 120, 0.5, 0.05))
        bf16 = 1.0e-3 * np.exp(_ar1(rng, 120, 0.5, 0.05))
        _, low, high = block_bootstrap_ratio_interval(bf16, float32, seed=seed, resamples=500)
        hits += low <= planted <= high
    assert hits / simulations >= 0.80


def test_block_bootstrap_is_seeded_and_brackets_its_estimate() -> None:
    rng = np.random.default_rng(7)
    a, b = np.exp(rng.normal(0, 0.1, 50)), 2 * np.exp(rng.normal(0, 0.1, 50))
    first = block_bootstrap_ratio_interval(a, b, seed=3)
    assert block_bootstrap_ratio_interval(a, b, seed=3) == first
    ratio, low, high = first
    assert ratio == pytest.approx(np.median(b) / np.median(a))
    assert low <= ratio <= high
    median, low, high = block_bootstrap_median_interval(a)
    assert low <= median <= high and median == pytest.approx(np.median(a))
    assert block_bootstrap_ratio_interval([1.0], [2.0]) == (2.0, 2.0, 2.0)


def test_drift_flags_a_step_change_but_rarely_a_stationary_series() -> None:
    flagged = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        steady = 2.0e-3 * np.exp(_ar1(rng, 100, 0.5, 0.05))
        flagged += bool(drift(steady, seed=seed)[2])
    assert flagged <= 10
    rng = np.random.default_rng(1)
    slowing = 2.0e-3 * np.exp(rng.normal(0, 0.03, 100))
    slowing[50:] *= 1.3  # throttled half-way through
    first, second, drifting = drift(slowing)
    assert drifting is True
    assert second / first == pytest.approx(1.3, rel=0.05)
    assert drift([0.1, 0.2, 0.3]) == (None, None, None)  # too few steps to tell
    assert drift([0.1, float("nan"), 0.1, 0.1]) == (None, None, None)


def test_step_stats_carry_the_drift_fields() -> None:
    raw = [0.010] * 20 + [0.014] * 20
    stats = StepTimeStats.from_samples(raw, warmup_steps=2)
    assert stats.first_half_median_s == pytest.approx(0.010)
    assert stats.second_half_median_s == pytest.approx(0.014)
    assert stats.drifting is True
    steady = StepTimeStats.from_samples([0.01, 0.011, 0.0105, 0.0098] * 10, warmup_steps=2)
    assert steady.drifting is False
    assert StepTimeStats.from_samples([0.01], 0).drifting is None
