"""How many points does `mpbench history` need, and what noise does it tolerate? Power and
false alarms of its change-point detection and of its CI gate, on synthetic series.

Each series is `n` points of log-normal noise (sigma = the point-to-point spread of a step
time: 2 %, 5 %, 10 %), as a run's step time wanders from run to run. Three kinds of series:
- flat: no step. A false alarm is any change point found (detection), or the CI gate failing
  on the newest point (`history --ci`, --threshold 5 %);
- a step in the middle (+10, +20, +40 % from point n/2 on): power is a change point found
  within one point of it; extra change points besides it are counted too;
- a step at the newest point only (the last point +10, +20, +40 %): power is the newest point
  found to start a new level (detection), and the CI gate failing on it (the whole interval
  of the change past 5 %: what `history --ci` exits 1 on).
The detector and the gate are mpbench's own (history.changepoints.detect, history.ci),
default settings. Prints one row per setting with the rates, the number of trials, the seed
and the load average. Measured in about a minute; no files are written.

    python benchmarks/history_power.py [--trials 200] [--seed 20261126] [--threshold 0.05]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from mpbench.history.changepoints import MIN_POINTS, PENALTY, detect
from mpbench.history.ci import FAIL, judge_values

LENGTHS = (6, 10, 20, 40)
NOISE = (0.02, 0.05, 0.10)
STEPS = (0.10, 0.20, 0.40)


def flat(rng: np.random.Generator, n: int, noise: float) -> np.ndarray:
    return 2e-3 * np.exp(rng.normal(0.0, noise, n))


def rates(rng: np.random.Generator, n: int, noise: float, trials: int, threshold: float) -> dict:
    out: dict[str, float] = {}
    alarms = ci_alarms = 0
    for _ in range(trials):
        values = flat(rng, n, noise)
        alarms += bool(detect(values).changes)
        ci_alarms += judge_values(list(values), +1, threshold).outcome == FAIL
    out["false alarm"] = alarms / trials
    out["CI false alarm"] = ci_alarms / trials
    for step in STEPS:
        found = extra = newest = gated = 0
        for _ in range(trials):
            values = flat(rng, n, noise)
            values[n // 2 :] *= 1 + step
            changes = detect(values).changes
            near = [c for c in changes if abs(c.index - n // 2) <= 1]
            found += bool(near)
            extra += len(changes) > len(near[:1])
            values = flat(rng, n, noise)
            values[-1] *= 1 + step
            newest += any(c.index == n - 1 for c in detect(values).changes)
            gated += judge_values(list(values), +1, threshold).outcome == FAIL
        out[f"mid +{step:.0%}"] = found / trials
        out[f"mid +{step:.0%} extra"] = extra / trials
        out[f"newest +{step:.0%}"] = newest / trials
        out[f"CI +{step:.0%}"] = gated / trials
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20261126)
    parser.add_argument("--threshold", type=float, default=0.05)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    load_before, started = os.getloadavg()[0], time.monotonic()
    header = ["n", "noise", "FA", "CI FA"]
    header += [f"mid +{s:.0%}" for s in STEPS] + [f"newest +{s:.0%}" for s in STEPS]
    header += [f"CI +{s:.0%}" for s in STEPS] + ["mid extra (+20%)"]
    print(" | ".join(header))
    print("|".join("---" for _ in header))
    for n in LENGTHS:
        for noise in NOISE:
            r = rates(rng, n, noise, args.trials, args.threshold)
            cells = [str(n), f"{noise:.0%}", _pct(r["false alarm"]), _pct(r["CI false alarm"])]
            cells += [_pct(r[f"mid +{s:.0%}"]) for s in STEPS]
            cells += [_pct(r[f"newest +{s:.0%}"]) for s in STEPS]
            cells += [_pct(r[f"CI +{s:.0%}"]) for s in STEPS]
            cells.append(_pct(r["mid +20% extra"]))
            print(" | ".join(cells), flush=True)
    print(
        f"\n{args.trials} trials per cell, seed {args.seed}, penalty {PENALTY:g} x ln(n), "
        f"minimum {MIN_POINTS} points, CI threshold {args.threshold:.0%}; "
        f"{time.monotonic() - started:.0f} s; load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    print(
        "FA: a flat series with any change point; CI FA: the gate failing a flat series' newest "
        "point; mid: the step found within one point; newest: the newest point found to start "
        "a new level; CI: the gate failing it; mid extra: change points besides the planted one"
    )
    return 0


def _pct(rate: float) -> str:
    return f"{rate * 100:.0f} %"


if __name__ == "__main__":
    sys.exit(main())
