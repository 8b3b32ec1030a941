"""Where a cell's time goes: start-up (a new process until its first training step is done)
against training, for torch and TensorFlow, interleaved.

Every cell here is a real mpbench cell, started the way `mpbench run` starts one
(`mpbench.runner.execute.run_in_child`: `python -m mpbench.runner.child`, the spec on stdin,
events on a pipe). A cell reports its first step as soon as it is done, so

  start-up   the time from starting the process to that first progress event: the
             interpreter, mpbench, the framework's import, the data, the model, the
             optimizer and one training step (which, in torch, imports torch._dynamo the
             first time an optimizer steps)
  wall       the whole cell, until its final record arrives
  rest       wall - start-up: the timed steps, the end-to-end window, the evaluation

and, as a floor, the bare imports in a new interpreter (`python -c "import torch"`,
`import tensorflow as tf; import keras`), timed the same way. K rounds; each round runs every
arm once in a random (seeded) order, so drift of the machine hits every arm alike. The summary
gives min / median / max per arm and the 1-minute load average before and after.

    python benchmarks/cell_startup.py [--rounds 5] [--framework torch tensorflow]
        [--max-steps 20] [--seed 0]

Run it on a quiet machine: no test suite, no other benchmark beside it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mpbench.detect import collect
from mpbench.runner.cells import expand
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.execute import run_in_child

IMPORTS = {
    "torch": "import torch",
    "tensorflow": "import tensorflow as tf; import keras",
}


def cell_spec(framework: str, max_steps: int, workdir: Path):
    """The spec `mpbench run -f FRAMEWORK -w mnist_dense -p fp32 --data synthetic` gives its
    first cell, sized small (steps of about 1 ms here): start-up is what is left to see."""
    config_file = workdir / "startup.toml"
    config_file.write_text(
        "[run]\ndata = 'synthetic'\nwarmup_steps = 2\ntimeout = 300\n"
        "[workloads.mnist_dense]\nbatch_size = 128\nunits = 64\nepochs = 1\n"
        f"max_steps = {max_steps}\n"
    )
    options = RunOptions(
        config=config_file,
        frameworks=[framework],
        workloads=["mnist_dense"],
        policies=["fp32"],
        device="cpu",
    )
    config = build_config(options)
    _, _, cells = expand(config, collect(environ=dict(os.environ)), "startup")
    return cells[0].spec


def run_cell(spec, workdir: Path) -> tuple[float, float]:
    """(start-up, wall) of one cell, in seconds."""
    first_step: list[float] = []
    started = time.monotonic()

    def on_step(step: int, total: int) -> None:
        if not first_step:
            first_step.append(time.monotonic() - started)

    outcome = run_in_child(spec, 300, workdir / "cell.log", on_step)
    wall = time.monotonic() - started
    if outcome.status != "ok":
        raise SystemExit(f"cell {spec.cell_id} ended {outcome.status}: {outcome.reason}")
    return first_step[0], wall


def run_import(framework: str) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", IMPORTS[framework]], check=True, capture_output=True)
    return time.monotonic() - started


def spread(values: list[float]) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low:6.2f} {mid:6.2f} {high:6.2f}   ({high / low - 1:5.1%})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--framework", nargs="+", default=["torch", "tensorflow"])
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        specs = {fw: cell_spec(fw, args.max_steps, workdir) for fw in args.framework}
        arms = [("cell", fw) for fw in args.framework] + [("import", fw) for fw in args.framework]
        rng = random.Random(args.seed)
        for round_index in range(args.rounds):
            rng.shuffle(arms)
            for kind, framework in arms:
                if kind == "cell":
                    startup, wall = run_cell(specs[framework], workdir)
                    figures.setdefault(f"{framework} start-up", []).append(startup)
                    figures.setdefault(f"{framework} wall", []).append(wall)
                    figures.setdefault(f"{framework} rest", []).append(wall - startup)
                else:
                    figures.setdefault(f"{framework} import", []).append(run_import(framework))
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]

    print(f"cells: mnist_dense fp32, CPU, max_steps {args.max_steps}; {args.rounds} rounds")
    print(f"1-minute load average: {load_before:.2f} before, {load_after:.2f} after")
    print(f"{'seconds':<22} {'min':>6} {'median':>6} {'max':>6}   (max/min - 1)")
    for framework in args.framework:
        for part in ("import", "start-up", "rest", "wall"):
            values = figures[f"{framework} {part}"]
            print(f"{framework + ' ' + part:<22} {spread(values)}")
        share = statistics.median(
            s / w
            for s, w in zip(
                figures[f"{framework} start-up"], figures[f"{framework} wall"], strict=True
            )
        )
        print(f"{framework + ' start-up / wall':<22} {share:6.0%} (median over cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
