"""`compare --plot`'s figure time, two source trees interleaved: did a change to the plot
make it faster, and by how much?

    git worktree add /tmp/before <commit>
    python benchmarks/plot_speed.py /tmp/before "$PWD" --rounds 5

Each round writes, in a new process per tree (alternating which goes first), the plot of two
reports built from the test builders' records: the variant run (one CPU, several variants of
each policy) and test_plot_layout's long run (long names, eight policy rows, a TensorFlow
run beside). It prints each tree's seconds per report (median and range) and the ratio of
medians, with the load average before. Run it with nothing else running (2 cores: a test
suite beside it turns the figures into noise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

# One process: the tree's mpbench and its tests' builders, both reports, seconds each.
CHILD = """
import sys, tempfile, time
from pathlib import Path
tree = sys.argv[1]
sys.path[:0] = [tree, tree + "/tests"]
import matplotlib
matplotlib.use("Agg")
import mpbench
assert mpbench.__file__.startswith(tree), mpbench.__file__
from builders import variant_run, write_run
from compare.test_plot_layout import _long_run
from mpbench.compare import CompareOptions, build_report
from mpbench.compare.plot.figure import write_plot
from mpbench.results import read_records
for name, records in (("variant", variant_run()), ("long", _long_run())):
    folder = Path(tempfile.mkdtemp())
    report = build_report(read_records(write_run(folder / "run", records)), CompareOptions())
    began = time.perf_counter()
    write_plot(report, folder / "plot.png")
    print(name, time.perf_counter() - began)
"""


def one(tree: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree)],
        capture_output=True, text=True, cwd="/", check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"{tree}: {done.stderr.strip().splitlines()[-1]}")
    return {name: float(s) for name, s in (line.split() for line in done.stdout.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="source tree A (e.g. a git worktree)")
    parser.add_argument("after", type=Path, help="source tree B")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    trees = [args.before.resolve(), args.after.resolve()]
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    seconds: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    for round_ in range(args.rounds):
        for tree in trees if round_ % 2 == 0 else trees[::-1]:
            seconds[tree].append(one(tree))
    for name in ("variant", "long"):
        medians = []
        for label, tree in zip(("before", "after"), trees, strict=True):
            values = [r[name] for r in seconds[tree]]
            medians.append(statistics.median(values))
            print(
                f"{name:8} {label:6} median {medians[-1]:.2f} s "
                f"({min(values):.2f}-{max(values):.2f}, {len(values)} rounds)  {tree}"
            )
        print(f"{name:8} after/before: {medians[1] / medians[0]:.2f}")


if __name__ == "__main__":
    main()
