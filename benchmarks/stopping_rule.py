"""Why `--repeat auto` uses Stein's two-stage rule: coverage of two stopping rules, simulated.

Per-round log speed-ups are drawn from a normal distribution (true ratio 1, log-sd SIGMA).
Two rules size a run for a ±5 % interval, at most 10 rounds:

- naive: from 3 rounds on, stop as soon as the 95 % t-interval of the rounds so far is
  narrower than ±5 %;
- Stein (mpbench.runner.adaptive, the code `--repeat auto` runs): a pilot of 5 rounds fixes
  N = clamp(required_rounds(s0), 5, 10); the interval is mean(all N) ± t(n0-1)·s0/√N.

Prints, per SIGMA, how often each rule's interval holds the true ratio (nominal 95 %) and the
mean number of rounds. Pure arithmetic: the machine's load does not matter.

    python benchmarks/stopping_rule.py [--replications 20000] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from mpbench.results.stats import t_quantile
from mpbench.runner.adaptive import PILOT, required_rounds

PRECISION = 0.05
MAX_ROUNDS = 10
H = math.log1p(PRECISION)
T = {n: t_quantile(0.975, n - 1) for n in range(2, MAX_ROUNDS + 1)}


def naive(logs: np.ndarray) -> tuple[bool, int]:
    for n in range(3, MAX_ROUNDS + 1):
        x = logs[:n]
        half = T[n] * x.std(ddof=1) / math.sqrt(n)
        if half < H or n == MAX_ROUNDS:
            return abs(x.mean()) <= half, n
    raise AssertionError


def stein(logs: np.ndarray) -> tuple[bool, int]:
    pilot = logs[:PILOT]
    s0 = float(pilot.std(ddof=1))
    n = min(max(required_rounds(s0, PILOT, PRECISION), PILOT), MAX_ROUNDS)
    half = T[PILOT] * s0 / math.sqrt(n)
    return abs(logs[:n].mean()) <= half, n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{args.replications} replications, ±{PRECISION:.0%} target, at most {MAX_ROUNDS}")
    print(
        "| log-sd | naive: coverage | naive: mean rounds | Stein: coverage | Stein: mean rounds |"
    )
    print("| --- | --- | --- | --- | --- |")
    for sigma in (0.03, 0.05, 0.065, 0.08, 0.10):
        draws = rng.normal(0.0, sigma, size=(args.replications, MAX_ROUNDS))
        results = {
            name: [rule(row) for row in draws] for name, rule in (("n", naive), ("s", stein))
        }
        cells = []
        for name in ("n", "s"):
            covered = sum(c for c, _ in results[name]) / args.replications
            rounds = sum(n for _, n in results[name]) / args.replications
            cells += [f"{covered:.1%}", f"{rounds:.1f}"]
        print(f"| {sigma:g} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
