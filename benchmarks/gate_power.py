"""Can the CI recipe's gate fail? Its power against a 20 % slowdown, and its false alarms.

Runs the CI recipe (`mpbench run --config configs/ci.toml --framework torch`, what
.github/mpbench-gate.sh runs) N times, each a whole run in its own directory, and times each
run. Then every ordered pair of runs (i, j), i != j, is one baseline/candidate pair:

- false alarm: `mpbench compare j --baseline i` with the recipe's gates fails (exit 1) on
  the max-slowdown gate although nothing changed;
- power: the same with run j's float32 step times multiplied by 1.2 (every raw step, so
  every statistic moves with it: a real 20 % slowdown of float32) must FAIL the float32
  cell's max-slowdown gate (a pass or an inconclusive one is a miss).

Pairs that share a run are not independent: with N runs there are N(N-1) pairs but only N
processes' worth of noise per side. Prints each pair's verdicts, the share caught, the share
of false alarms, the recipe's run times (min/median/max), and the load average before and
after. Measure on a quiet machine.

    python benchmarks/gate_power.py [--runs 4] [--config configs/ci.toml]
        [--framework torch] [--slowdown 0.2] [--max-slowdown 5%] [--keep DIR] [--reuse DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import permutations
from pathlib import Path

from mpbench.results import StepTimeStats, load_record

# The gate script's default limit (.github/mpbench-gate.sh, MPBENCH_MAX_SLOWDOWN).
GATE_SCRIPT = Path(__file__).resolve().parents[1] / ".github" / "mpbench-gate.sh"


def default_limit() -> str:
    for line in GATE_SCRIPT.read_text().splitlines():
        if line.startswith('max_slowdown="${MPBENCH_MAX_SLOWDOWN-'):
            return line.split("-", 1)[1].split("}", 1)[0]
    raise SystemExit(f"no MPBENCH_MAX_SLOWDOWN default in {GATE_SCRIPT}")


def run_recipe(config: str, framework: str, out: Path) -> float:
    started = time.monotonic()
    command = [sys.executable, "-m", "mpbench", "run", "--config", config]
    command += ["--framework", framework, "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mpbench run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.monotonic() - started


def _wall(run: Path) -> float:
    """A kept run's time: the sum of its cells' wall times (start-up of the run left out)."""
    lines = (run / "results.jsonl").read_text().splitlines()
    return sum(json.loads(line).get("wall_s") or 0.0 for line in lines)


def slowed_copy(run: Path, factor: float, out: Path) -> Path:
    """A copy of `run` whose float32 cells' step times are `factor` times longer."""
    shutil.copytree(run, out)
    lines = []
    for line in (run / "results.jsonl").read_text().splitlines():
        record = load_record(json.loads(line))
        if record.policy == "float32" and record.step_time and record.step_time.raw_s:
            stats = record.step_time
            slowed = StepTimeStats.from_samples(
                [t * factor for t in stats.raw_s], stats.warmup_steps
            )
            record.step_time = slowed
            if record.throughput_samples_per_s:
                record.throughput_samples_per_s /= factor
        lines.append(json.dumps(record.to_dict()))
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    (out / "results.csv").unlink(missing_ok=True)
    return out


def float32_gates(candidate: Path, baseline: Path, limit: str) -> list[dict]:
    """The max-slowdown gate results of the float32 cells, from compare's JSON."""
    command = [sys.executable, "-m", "mpbench", "compare", str(candidate), "--baseline"]
    command += [str(baseline), "--max-slowdown", limit, "--format", "json"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mpbench compare failed ({done.returncode}): {done.stderr[-2000:]}")
    gates = json.loads(done.stdout)["gates"]
    return [g for g in gates if g["gate"] == "max-slowdown" and _is_float32(g["cell"])]


def _is_float32(label: str) -> bool:
    """`torch/mnist_dense/float32` (a run's cell label) or `torch fp32` (a table's)."""
    return label.endswith(("/float32", " fp32"))


def describe(gate: dict) -> str:
    state = "FAIL" if not gate["passed"] else ("inconclusive" if gate["inconclusive"] else "pass")
    return f"{state} ({gate['value'] * 100:+.1f} %)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--config", default="configs/ci.toml")
    parser.add_argument("--framework", default="torch")
    parser.add_argument("--slowdown", type=float, default=0.2)
    parser.add_argument("--max-slowdown", default=None, help="default: the gate script's")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs here")
    parser.add_argument(
        "--reuse", type=Path, default=None, help="judge the run-* directories kept here by --keep"
    )
    args = parser.parse_args()
    limit = args.max_slowdown or default_limit()
    load_before = os.getloadavg()[0]
    root = args.keep or Path(tempfile.mkdtemp(prefix="gate-power-"))
    root.mkdir(parents=True, exist_ok=True)
    runs, seconds = [], []
    if args.reuse is not None:
        root = args.reuse
        runs = sorted(root.glob("run-*"))
        seconds = [_wall(run) for run in runs]
        args.runs = max(args.runs, len(runs))  # --runs N adds runs up to N
    for i in range(len(runs), args.runs):
        out = root / f"run-{i}"
        seconds.append(run_recipe(args.config, args.framework, out))
        runs.append(out)
        print(f"run {i + 1}/{args.runs}: {seconds[-1]:.0f} s", flush=True)
    caught = alarms = pairs = 0
    for i, j in permutations(range(len(runs)), 2):
        slowed = slowed_copy(runs[j], 1 + args.slowdown, root / f"slowed-{j}-for-{i}")
        same = float32_gates(runs[j], runs[i], limit)
        slow = float32_gates(slowed, runs[i], limit)
        for plain, scaled in zip(same, slow, strict=True):
            pairs += 1
            alarms += not plain["passed"]
            caught += not scaled["passed"] and not scaled["inconclusive"]
            print(
                f"baseline run {i + 1}, candidate run {j + 1}, {plain['cell']}: unchanged "
                f"{describe(plain)}; float32 ×{1 + args.slowdown:g} {describe(scaled)}"
            )
        shutil.rmtree(slowed)
    if args.keep is None and args.reuse is None:
        shutil.rmtree(root)
    print(
        f"\n{args.config} ({args.framework}), {args.runs} runs, {pairs} baseline/candidate "
        f"pairs, --max-slowdown {limit}, load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    print(
        f"power (a +{args.slowdown:.0%} float32 slowdown caught as FAIL): "
        f"{caught}/{pairs} = {caught / max(pairs, 1):.0%} (target >= 90 %)"
    )
    print(
        f"false alarms (FAIL with nothing changed): {alarms}/{pairs} = "
        f"{alarms / max(pairs, 1):.0%} (target <= 5 %)"
    )
    print(
        f"recipe time per run: min {min(seconds):.0f} s, median "
        f"{statistics.median(seconds):.0f} s, max {max(seconds):.0f} s (target <= 180 s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
