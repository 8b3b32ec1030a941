"""What dispatching a fleet costs (docs/fleet.md): the wall time of `mpbench run --on ray
--fleet A,B` on a local two-node Ray cluster against the same two sub-matrices run by hand,
one after the other (`MPBENCH_MACHINE=A mpbench run ...`, then B), interleaved.

The cluster (tests/fleet/ray_cluster.py) is started once, before the rounds, with one worker
node per kind, each pinned to a core of its own (its raylet and workers inherit the
affinity), so the fleet's two machines run side by side as two machines would; each hand run
is pinned to the core its kind's node has. Each round runs the arms in a random (seeded)
order. The summary gives min / median / max per arm and:

- the fleet against the two hand runs in sequence (what a person saves by not logging into
  each machine in turn);
- the dispatch overhead: the fleet's wall time less the longer of its two hand runs (what
  the fleet adds to the slowest machine's own run: connecting, asking each kind its versions,
  scheduling, streaming the records back, the closing table).

    python benchmarks/fleet_overhead.py [--rounds 3] [--seed 0]

Run it on a quiet machine with at least two cores: no test suite, no other benchmark beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
RUN = ["-f", "torch", "-w", "mnist_dense", "-p", "fp32", "-p", "bf16", "--data", "synthetic",
       "--repeat", "2", "--max-steps", "60", "--epochs", "8", "--warmup-steps", "5",
       "--units", "64", "--batch-size", "64", "--device", "cpu"]  # fmt: skip


def start_cluster() -> tuple[subprocess.Popen, str]:
    # Core 0 for A's node, core 1 for B's: a wrapper sets the affinity before each node starts.
    code = (
        "import os, sys, ray.cluster_utils as cu\n"
        "real = cu.Cluster.add_node\n"
        "cores = iter([{0}, {1}])\n"
        "def pinned(self, *a, **k):\n"
        "    if 'accelerator_type:A' in k.get('resources', {}) or "
        "'accelerator_type:B' in k.get('resources', {}):\n"
        "        os.sched_setaffinity(0, next(cores))\n"
        "    try:\n"
        "        return real(self, *a, **k)\n"
        "    finally:\n"
        "        os.sched_setaffinity(0, {0, 1})\n"
        "cu.Cluster.add_node = pinned\n"
        f"sys.argv = ['ray_cluster', 'A', 'B']\n"
        f"exec(open({str(ROOT / 'tests' / 'fleet' / 'ray_cluster.py')!r}).read())\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, **RAY_ENV},
    )  # fmt: skip
    line = process.stdout.readline()
    if not line:
        raise SystemExit("the Ray cluster did not start")
    return process, json.loads(line)["address"]


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall


def fleet(address: str, out: Path) -> float:
    env = {**os.environ, **RAY_ENV, "RAY_ADDRESS": address}
    command = [sys.executable, "-m", "mpbench", "run", *RUN, "--on", "ray", "--fleet", "A,B"]
    return timed([*command, "--out", str(out)], env)


def by_hand(kind: str, core: int, out: Path) -> float:
    env = {**os.environ, "MPBENCH_MACHINE": kind}
    command = ["taskset", "-c", str(core), sys.executable, "-m", "mpbench", "run", *RUN]
    return timed([*command, "--out", str(out)], env)


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores: one per stand-in machine")
    rng = random.Random(args.seed)
    load_before = os.getloadavg()[0]
    cluster, address = start_cluster()
    walls: dict[str, list[float]] = {"fleet A,B": [], "hand A": [], "hand B": []}
    try:
        with tempfile.TemporaryDirectory(prefix="mpbench-fleet-bench-") as folder:
            for round_ in range(args.rounds):
                arms = ["fleet", "hand"]
                rng.shuffle(arms)
                for arm in arms:
                    out = Path(folder) / f"{arm}-{round_}"
                    if arm == "fleet":
                        walls["fleet A,B"].append(fleet(address, out))
                    else:
                        walls["hand A"].append(by_hand("A", 0, out / "A"))
                        walls["hand B"].append(by_hand("B", 1, out / "B"))
                print(
                    f"round {round_ + 1}: "
                    + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in walls.items())
                )
    finally:
        cluster.stdin.close()
        cluster.wait(timeout=120)
    sequence = [a + b for a, b in zip(walls["hand A"], walls["hand B"], strict=False)]
    overhead = [
        f - max(a, b)
        for f, a, b in zip(walls["fleet A,B"], walls["hand A"], walls["hand B"], strict=False)
    ]
    for arm, values in walls.items():
        print(f"{arm:>10}: {spread(values)}")
    print(f"{'hand A+B':>10}: {spread(sequence)} (one after the other)")
    ratio = statistics.median(sequence) / statistics.median(walls["fleet A,B"])
    print(f"fleet against the hand runs in sequence: {ratio:.2f}x faster (ratio of medians)")
    print(f"dispatch overhead (fleet less the longer hand run, per round): {spread(overhead)}")
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
