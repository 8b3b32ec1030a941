"""How long `mpbench detect` takes, next to `python -m torch.utils.collect_env`.

Both are run as a user runs them: fresh interpreter processes, wall-clock time, the median
of several runs (one warm-up run of each first, so the page cache is warm for both).

    python benchmarks/detect_speed.py [--runs 7] [--reference-runs 3] [--probe]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def wall_seconds(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-500:]}")
    return elapsed


def median_seconds(command: list[str], runs: int) -> tuple[float, list[float]]:
    wall_seconds(command)  # warm-up
    times = [wall_seconds(command) for _ in range(runs)]
    return statistics.median(times), times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of mpbench detect")
    parser.add_argument("--reference-runs", type=int, default=3, help="timed collect_env runs")
    parser.add_argument("--probe", action="store_true", help="also time `detect --probe`")
    args = parser.parse_args()

    python = sys.executable
    rows = [("mpbench detect", [python, "-m", "mpbench", "detect"], args.runs)]
    rows.append(("mpbench detect --json", [python, "-m", "mpbench", "detect", "--json"], args.runs))
    if args.probe:
        rows.append(("mpbench detect --probe", [python, "-m", "mpbench", "detect", "--probe"], 1))
    reference = ("torch collect_env", [python, "-m", "torch.utils.collect_env"])

    results = {}
    for label, command, runs in rows:
        results[label], times = median_seconds(command, runs)
        spread = ", ".join(f"{t:.3f}" for t in times)
        print(f"{label:<24} median {results[label]:.3f} s over {runs} runs ({spread})")
    ref_median, times = median_seconds(reference[1], args.reference_runs)
    spread = ", ".join(f"{t:.3f}" for t in times)
    print(
        f"{reference[0]:<24} median {ref_median:.3f} s over {args.reference_runs} runs ({spread})"
    )
    detect = results["mpbench detect"]
    print(
        f"ratio: collect_env / mpbench detect = {ref_median / detect:.1f}x "
        f"(mpbench detect takes {100 * detect / ref_median:.0f} % of collect_env's time)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
