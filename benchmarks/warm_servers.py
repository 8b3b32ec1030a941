"""What a warm fork server (mpbench/runner/launchers/warm.py) saves a whole `mpbench run`:
the same tiny run, end to end as a user starts it (`python -m mpbench run ...`), with
MPBENCH_WARM_SERVERS unset (the run starts its own server, which imports the framework) and
set (the run's server is forked from a warm one), interleaved.

Each arm runs once per round, in a random (seeded) order, so drift of the machine hits both
alike. The warm server is started before the rounds (its one import is not an arm's). Wall
time and the CPU time of everything each run started (its children, reaped: the run, its
server and cells; a warm server's per-run fork is the warm server's child, not the run's, so
its CPU is read from the warm server's own counters before and after). The summary gives
min / median / max per arm, the ratio of the medians, and the 1-minute load average before
and after.

    python benchmarks/warm_servers.py [--rounds 5] [--framework torch|tensorflow] [--seed 0]
        [--workload mnist_dense|hf]

`--workload hf` runs a one-layer Llama by name (`-w hf:llama?...`, transformers needed), two
cells, fp32 and bf16: a run of a user's model, whose probe (what the model is) is forked from
the warm server too where there is one (mpbench/runner/launchers/helper.py). Run from another
checkout's root (`cd OLD && python NEW/benchmarks/warm_servers.py`), the runs are that
checkout's mpbench: the same figures of an older version, to compare.

Run it on a quiet machine: no test suite, no other benchmark beside it.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from mpbench.runner.launchers.process_names import WARM_SERVER_NAME
from mpbench.runner.launchers.warm import WARM_ENV, stop_warm_servers

HF_LLAMA = (
    "hf:llama?hidden_size=64&intermediate_size=256&num_hidden_layers=1"
    "&num_attention_heads=2&num_key_value_heads=2&vocab_size=256&seq_len=32&samples=64"
)


def tiny_run(framework: str, out: Path, workload: str = "mnist_dense") -> list[str]:
    run = [
        sys.executable,
        "-m",
        "mpbench",
        "run",
        "-f",
        framework,
        "--repeat",
        "1",
        "--max-steps",
        "6",
        "--warmup-steps",
        "2",
        "--threads",
        "1",
        "--out",
        str(out),
    ]
    if workload == "hf":  # its own data and sizes
        return [*run, "-w", HF_LLAMA, "-p", "fp32", "-p", "bf16", "--batch-size", "8"]
    return [*run, "-w", "mnist_dense", "-p", "fp32", "--data", "synthetic", "--units", "32",
            "--batch-size", "64"]  # fmt: skip


def warm_cpu_s(folder: Path) -> float:
    """CPU seconds of the folder's warm servers and their reaped children so far."""
    total = 0.0
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] == WARM_SERVER_NAME and str(folder) in process.cmdline()[-1]:
                times = process.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def one(arm: str, framework: str, folder: Path, out: Path, workload: str) -> tuple[float, float]:
    """(wall s, CPU s) of one run of this arm."""
    env = dict(os.environ)
    env.pop(WARM_ENV, None)
    if arm == "warm":
        env[WARM_ENV] = str(folder)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    warm_before = warm_cpu_s(folder)
    started = time.perf_counter()
    done = subprocess.run(
        tiny_run(framework, out, workload), env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{arm} run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu + warm_cpu_s(folder) - warm_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--framework", default="torch", choices=("torch", "tensorflow"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workload", default="mnist_dense", choices=("mnist_dense", "hf"))
    args = parser.parse_args()
    if args.workload == "hf" and args.framework != "torch":
        parser.error("--workload hf runs in torch")
    folder = Path(tempfile.mkdtemp(prefix="mpw-"))
    scratch = Path(tempfile.mkdtemp(prefix="mpbench-warm-bench-"))
    load_before = os.getloadavg()[0]
    try:
        # starts the warm server
        one("warm", args.framework, folder, scratch / "warm-up", args.workload)
        figures: dict[str, list[tuple[float, float]]] = {"own server": [], "warm": []}
        rng = random.Random(args.seed)
        for index in range(args.rounds):
            arms = list(figures)
            rng.shuffle(arms)
            for arm in arms:
                out = scratch / f"{arm}-{index}"
                figures[arm].append(one(arm, args.framework, folder, out, args.workload))
    finally:
        stop_warm_servers(folder)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    what = "-w hf:llama?... (2 cells)" if args.workload == "hf" else "(1 cell)"
    print(f"a tiny `mpbench run -f {args.framework}` {what}, {args.rounds} rounds, interleaved")
    print(f"mpbench from {Path.cwd()}")
    for arm, values in figures.items():
        for name, column in (("wall", 0), ("CPU", 1)):
            xs = sorted(v[column] for v in values)
            print(f"  {arm:<10} {name:<4} min {xs[0]:6.2f}  median {statistics.median(xs):6.2f}"
                  f"  max {xs[-1]:6.2f} s")  # fmt: skip
    for name, column in (("wall", 0), ("CPU", 1)):
        own = statistics.median(v[column] for v in figures["own server"])
        warm = statistics.median(v[column] for v in figures["warm"])
        print(f"  {name}: own server / warm = {own / warm:.2f}x (medians)")
    print(f"load average (1 min): {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
