"""Does the speed-up mpbench prints survive a second run, and does its interval say so?

Runs the same `mpbench run` command K times (each a whole run: its own processes, `--repeat R`
interleaved repeats inside), reads each run's speed-up of POLICY over float32 and its 95 %
interval from `mpbench compare --format json`, and prints, per framework:

- spread: max/min - 1 of the K point estimates;
- coverage: the share of ordered pairs i != j where run i's interval contains run j's
  estimate (an interval that reflects the real run-to-run variance covers most of them).

Targets (issue 22) for mnist_dense, units 1024, batch 1024, --repeat 3 and --repeat auto:
coverage >= 80 % and spread <= 10 %, for torch and for TensorFlow. Each run also reports how
many of its cells were marked contended (a busy machine voids the figures: measure on a quiet
one) and, under --repeat auto, how many rounds it ran and why it stopped. The runs of the
frameworks are interleaved (torch run 1, tensorflow run 1, torch run 2, ...) so that drift of
the machine hits both.

    python benchmarks/ratio_stability.py [--runs 5] [--repeat 3|auto] [--policy bf16]
        [--units 1024] [--batch-size 1024] [--max-steps 40] [--framework torch tensorflow]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from itertools import permutations
from pathlib import Path

from compared import compared_cells  # benchmarks/compared.py: the script's folder is on sys.path

POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16", "tf32": "tf32"}


def one_run(framework: str, args: argparse.Namespace, out: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "mpbench",
        "run",
        "-f",
        framework,
        "-w",
        "mnist_dense",
        "-p",
        "fp32",
        "-p",
        args.policy,
        "--device",
        "cpu",
        "--data",
        "synthetic",
        "--units",
        str(args.units),
        "--batch-size",
        str(args.batch_size),
        "--max-steps",
        str(args.max_steps),
        "--repeat",
        str(args.repeat),
        "--out",
        str(out),
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    cells = compared_cells(out)
    policy = POLICIES.get(args.policy, args.policy)
    cell = next(c for c in cells if c["framework"] == framework and c["policy"] == policy)
    speedup = cell["speedup_vs_float32"]
    interval = speedup["interval"] or {"low": speedup["value"], "high": speedup["value"]}
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    contended = sum(bool((r.get("contention") or {}).get("contended")) for r in records)
    adaptive = json.loads((out / "run.json").read_text()).get("adaptive") or {}
    return {
        "contended": contended,
        "cells": len(records),
        "rounds": adaptive.get("ran"),
        "stopped": adaptive.get("stopped"),
        "value": speedup["value"],
        "low": interval["low"],
        "high": interval["high"],
        "kind": interval.get("kind"),
        "end_to_end": (cell.get("end_to_end_speedup_vs_float32") or {}).get("value"),
    }


def summarize(estimates: list[dict]) -> tuple[float, float]:
    values = [e["value"] for e in estimates]
    spread = max(values) / min(values) - 1
    pairs = list(permutations(range(len(estimates)), 2))
    covered = sum(
        estimates[i]["low"] <= estimates[j]["value"] <= estimates[i]["high"] for i, j in pairs
    )
    return spread, covered / len(pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--repeat", default="3", help="N, or auto")
    parser.add_argument("--policy", default="bf16")
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--framework", nargs="+", default=["torch", "tensorflow"])
    args = parser.parse_args()

    results: dict[str, list[dict]] = {f: [] for f in args.framework}
    print(f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for framework in args.framework:
                estimate = one_run(framework, args, Path(tmp) / f"{framework}-{run}")
                results[framework].append(estimate)
                e2e = estimate["end_to_end"]
                print(
                    f"run {run + 1}/{args.runs} {framework:<10} speed-up {estimate['value']:.3f} "
                    f"[{estimate['low']:.3f}, {estimate['high']:.3f}] ({estimate['kind']}); "
                    + (f"end-to-end {e2e:.3f}" if e2e else "end-to-end -")
                    + f"; contended {estimate['contended']}/{estimate['cells']} cells"
                    + (
                        f"; {estimate['rounds']} rounds ({estimate['stopped']})"
                        if estimate["rounds"]
                        else ""
                    ),
                    flush=True,
                )
    print(
        f"\nmnist_dense, units {args.units}, batch {args.batch_size}, max-steps {args.max_steps}, "
        f"--repeat {args.repeat}, {args.policy} vs float32, {args.runs} runs "
        f"({time.monotonic() - started:.0f} s), load average {os.getloadavg()[0]:.2f} at the end"
    )
    for framework, estimates in results.items():
        spread, coverage = summarize(estimates)
        print(
            f"{framework:<10} spread {spread * 100:5.1f} % (target <= 10 %)   "
            f"coverage {coverage * 100:5.1f} % (target >= 80 %)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
