"""Interval statistics shared by `run` (drift of one cell) and `compare` (ratios, gates).

Pure functions on plain numbers: no I/O, no formatting, no knowledge of records. scipy is not
a dependency, so Student's t quantile is computed here from the regularized incomplete beta.

The rules (docs/measurement.md, docs/compare.md "Intervals"):
- across repeats (separate processes), a ratio is the geometric mean of per-repeat ratios with a
  Student-t interval on their logarithms; a difference is the mean of paired differences with a
  t-interval; two independent sets of repeats use Welch's t on the log values;
- within one run, a ratio of medians gets a moving-block bootstrap interval (blocks of about
  √n steps keep the serial correlation of neighbouring steps). It ignores process-to-process
  variance, so it is optimistic, and callers label it *within-run only*. Below
  MIN_SAMPLES_FOR_MEDIAN_INTERVAL steps a side compare gives no interval at all.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 4000  # percentile bootstrap: enough for stable 2.5 % / 97.5 % quantiles
DRIFT_RESAMPLES = 2000  # drift runs once per cell in the runner: cheaper, same rule
_DRIFT_BUDGET = 600_000  # resampled steps per half: keeps drift() near 20 ms at any length
# A drift smaller than this is not reported, however many steps make it significant: ratios
# between policies are not read to better than a couple of percent anyway.
DRIFT_TOLERANCE = 0.02
# The fewest samples from which compare gives a median a within-run interval. The median's
# distribution-free 95 % interval (sign_interval) needs n >= 6: with fewer, even the whole
# range [min, max] holds the true median only 1 - 2^(1-n) of the time (75 % at n = 3, 94 % at
# n = 5), and a bootstrap of the median, which can only draw those same few values, does no
# better: with 3 timed steps its 97.5 % percentile fell below the point itself (0.13×
# (0.038–0.13), issue 41). min_samples_for_median_interval() derives it; a test keeps the two
# in step.
MIN_SAMPLES_FOR_MEDIAN_INTERVAL = 6

Interval = tuple[float, float, float]  # (point estimate, low, high)


# --- Student's t ---------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df may be fractional: Welch)."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t: t_quantile(0.975, 4) = 2.776."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile probability must be in (0, 1), got {p}")
    if df <= 0 or math.isnan(df):
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    # Bracket, then bisect on the CDF: monotone, and 200 halvings reach float precision.
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
        if high > 1e12:
            return math.inf
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * high:
            break
    return (low + high) / 2.0


def _t_interval(mean: float, se: float, df: float, confidence: float) -> Interval:
    if se == 0.0 or not math.isfinite(se):
        return mean, mean, mean
    half = t_quantile(0.5 + confidence / 2.0, df) * se
    return mean, mean - half, mean + half


def _finite(values: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1 or not np.all(np.isfinite(array)):
        raise ValueError(f"{what} must be a flat list of finite numbers")
    return array


# --- across repeats ------------------------------------------------------------------------


def _exp(x: float) -> float:
    """math.exp, but inf past the largest float instead of OverflowError: a ratio of extreme
    (valid) step times is then an infinite value that renderers show as such, not a crash."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean with its Student-t interval (n >= 2; one value is its own point, no interval)."""
    x = _finite(values, "values")
    if len(x) == 0:
        raise ValueError("no values")
    if len(x) == 1:
        return float(x[0]), float(x[0]), float(x[0])
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: inf, not a warning
        se = float(np.std(x, ddof=1)) / math.sqrt(len(x))
        mean = float(np.mean(x))
    return _t_interval(mean, se, len(x) - 1, confidence)


def paired_difference_interval(diffs: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean of paired differences (e.g. accuracy, in pp) with a t-interval, same units."""
    return mean_interval(diffs, confidence)


def log_ratio_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Geometric mean of per-repeat ratios with a t-interval on ln r_i, back-transformed.

    Ratios are multiplicative: 2x and 0.5x average to 1x on the log scale, not to 1.25x.
    """
    r = _finite(ratios, "ratios")
    if np.any(r <= 0):
        raise ValueError("ratios must be positive")
    return exp_interval(np.log(r), confidence)


def exp_interval(logs: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """exp of the mean of logarithms with its t-interval: a geometric mean from the logs of its
    values (or of ratios taken as log differences, which neither overflow nor underflow)."""
    mean, low, high = mean_interval(logs, confidence)
    return _exp(mean), _exp(low), _exp(high)


def sign_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The median with its distribution-free order-statistic interval [x(k), x(n+1-k)], k the
    largest with 1 - 2·P(Bin(n, ½) ≤ k-1) ≥ confidence (asv's quantile_ci is the same idea).
    Below n = 6 no k reaches 95 %: the range [min, max] is returned, which covers less
    (75 % at n = 3): use it only beside an interval that holds its confidence."""
    x = sorted(float(v) for v in values)
    n = len(x)
    if n == 0:
        raise ValueError("no values")

    def below(k: int) -> float:  # P(Bin(n, 1/2) <= k)
        return sum(math.comb(n, i) for i in range(k + 1)) / 2**n

    ks = [k for k in range(1, n // 2 + 1) if 1 - 2 * below(k - 1) >= confidence]
    k = max(ks, default=1)
    return statistics.median(x), x[k - 1], x[n - k]


def min_samples_for_median_interval(confidence: float = CONFIDENCE) -> int:
    """The smallest n whose order-statistic interval of the median reaches `confidence`: the
    widest one, [min, max], covers the median with probability 1 - 2^(1-n)."""
    n = 1
    while 1 - 2.0 ** (1 - n) < confidence:
        n += 1
    return n


def robust_log_interval(logs: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """How repeats of a ratio are combined (docs/compare.md, "Combining repeats"): the
    median of the per-repeat ratios as the value, so that one slow process moves it little
    (tests/results/test_combine_simulation.py, 3 repeats, one of them 80 % slow: typical error
    of the geometric mean 21.3 %, of the median 6.9 %); as the
    interval the hull of the t-interval on the logs and the order-statistic interval, so it
    covers at least as often as the t-interval does (≥ 95 % on lognormal noise, more with
    an outlier, which widens it) and always holds the value. Takes log ratios, returns the
    ratio scale."""
    point, sign_low, sign_high = sign_interval(logs, confidence)
    _, t_low, t_high = mean_interval(logs, confidence)
    return _exp(point), _exp(min(sign_low, t_low)), _exp(max(sign_high, t_high))


def welch_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> Interval:
    """mean(b) - mean(a) with a two-sample t-interval (two independent sets of repeats).

    Welch's unequal-variance interval when both sides have 2 or more values. When one side
    has a single value, its variance is taken to be the other side's (a pooled interval): a
    lone repeat says nothing about its own spread, and the other side's process-to-process
    spread is the best stand-in. Both sides single: the difference, no interval.
    """
    x, y = _finite(a, "baseline values"), _finite(b, "candidate values")
    if len(x) == 0 or len(y) == 0:
        raise ValueError("no values")
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: inf, not a warning
        return _welch(x, y, confidence)


def _welch(x: np.ndarray, y: np.ndarray, confidence: float) -> Interval:
    diff = float(np.mean(y) - np.mean(x))
    nx, ny = len(x), len(y)
    if nx == 1 and ny == 1:
        return diff, diff, diff
    if nx == 1 or ny == 1:
        spread = float(np.var(y if nx == 1 else x, ddof=1))
        se = math.sqrt(spread * (1 / nx + 1 / ny))
        return _t_interval(diff, se, max(nx, ny) - 1, confidence)
    vx, vy = float(np.var(x, ddof=1)) / nx, float(np.var(y, ddof=1)) / ny
    se = math.sqrt(vx + vy)
    if se == 0.0:
        return diff, diff, diff
    df = (vx + vy) ** 2 / (vx**2 / (nx - 1) + vy**2 / (ny - 1))
    return _t_interval(diff, se, df, confidence)


def log_welch_ratio_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> Interval:
    """Geometric-mean ratio b/a of two independent sets of positive repeats (Welch on logs)."""
    x, y = _finite(a, "baseline values"), _finite(b, "candidate values")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("values must be positive")
    diff, low, high = welch_interval(np.log(x), np.log(y), confidence)
    return _exp(diff), _exp(low), _exp(high)


# --- within one run ------------------------------------------------------------------------


def _block_medians(x: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """Medians of `resamples` moving-block bootstrap series of x (block length about √n)."""
    n = len(x)
    block = max(1, round(math.sqrt(n)))
    blocks = -(-n // block)
    starts = rng.integers(0, n - block + 1, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(block)).reshape(resamples, blocks * block)[:, :n]
    return _row_medians(x[index])


def _row_medians(rows: np.ndarray) -> np.ndarray:
    """np.median(rows, axis=1) for finite data, with a plain partition (about 4x faster)."""
    n = rows.shape[1]
    middle = n // 2
    if n % 2:
        return np.partition(rows, middle, axis=1)[:, middle]
    parted = np.partition(rows, (middle - 1, middle), axis=1)
    return (parted[:, middle - 1] + parted[:, middle]) / 2.0


def _percentiles(theta: np.ndarray, point: float, confidence: float) -> Interval:
    alpha = 1.0 - confidence
    low, high = np.quantile(theta, [alpha / 2, 1 - alpha / 2])
    # A coarse (discrete) bootstrap distribution can leave the estimate just outside its own
    # percentile interval; widen to include it rather than print a value outside its bounds.
    return point, min(float(low), point), max(float(high), point)


def block_bootstrap_median_interval(
    x: Sequence[float],
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Median of one step-time series with its moving-block bootstrap percentile interval."""
    a = _finite(x, "samples")
    if len(a) == 0:
        raise ValueError("no samples")
    point = float(np.median(a))
    if len(a) < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    return _percentiles(_block_medians(a, rng, resamples), point, confidence)


def block_bootstrap_ratio_interval(
    a: Sequence[float],
    b: Sequence[float],
    seed: int = 0,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> Interval:
    """median(b) / median(a) of two step-time series, with a moving-block bootstrap interval.

    The two series are resampled independently (they are different processes or different
    stretches of one), each in blocks of about √n consecutive steps so that the serial
    correlation inside a run survives the resampling. Seeded: the same input gives the same
    interval. With fewer than 2 samples on a side there is nothing to resample: no interval.
    """
    x, y = _finite(a, "a"), _finite(b, "b")
    if len(x) == 0 or len(y) == 0:
        raise ValueError("no samples")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("step times must be positive")
    point = float(np.median(y) / np.median(x))
    if len(x) < 2 or len(y) < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    theta = _block_medians(y, rng, resamples) / _block_medians(x, rng, resamples)
    return _percentiles(theta, point, confidence)


def drift(raw_s: Sequence[float], seed: int = 0) -> tuple[float | None, float | None, bool | None]:
    """(first-half median, second-half median, drifting) of one cell's timed steps.

    The rule: split the timed steps into their first and second half and take the block-
    bootstrap 95 % interval of median(second) / median(first). The cell is *drifting* when that
    whole interval lies beyond ±DRIFT_TOLERANCE (2 %): the halves differ by more than the
    within-run noise can explain, and by enough to matter. A stationary series with serially
    correlated steps is rarely flagged, because the blocks carry the correlation into the
    interval. Fewer than 4 steps (2 per half), or a non-finite one: (None, None, None).
    """
    x = np.asarray(raw_s, dtype=float)
    if x.ndim != 1 or len(x) < 4 or not np.all(np.isfinite(x)):
        return None, None, None  # never raises: the runner calls it on every cell
    half = len(x) // 2
    first, second = x[:half], x[half:]
    first_median, second_median = float(np.median(first)), float(np.median(second))
    if np.any(x <= 0):
        return first_median, second_median, None
    resamples = max(400, min(DRIFT_RESAMPLES, _DRIFT_BUDGET // len(second)))
    _, low, high = block_bootstrap_ratio_interval(first, second, seed=seed, resamples=resamples)
    drifting = low > 1 + DRIFT_TOLERANCE or high < 1 / (1 + DRIFT_TOLERANCE)
    return first_median, second_median, bool(drifting)
