"""Where a cell's time goes: start-up (asking for the cell's process until its first training
step is done) against training, for torch and TensorFlow, with each cell started as a new
interpreter and forked from its framework's fork server, interleaved.

Every cell here is a real mpbench cell, started the way `mpbench run` starts one
(`run_in_child` in mpbench/runner/launchers/process.py): as a new interpreter running
launchers/cell.py, or forked by a fork server (launchers/zygote.py) that lives for the whole
benchmark, as it lives for a whole run. A cell reports its first step as soon as it is done:

  start-up   from asking for the process to that first progress event: the interpreter (or
             the fork), mpbench, the framework's import (a fork has it already), the data,
             the model, the optimizer and one training step (in torch, the first optimizer
             step imports torch._dynamo; a fork server has imported it)
  wall       the whole cell, until its final record arrives
  rest       wall - start-up: the timed steps, the end-to-end window, the evaluation

and, as a floor, the bare imports in a new interpreter (`python -c "import torch"`,
`import tensorflow as tf; import keras`), timed the same way. A fork server's own start
(paid once per framework and run, by its first cell) is started before the rounds and
reported on its own. K rounds; each round runs every arm once in a random (seeded) order, so
drift of the machine hits every arm alike. The summary gives min / median / max per arm,
the ratio of the medians, each cell's training memory by launcher, and the 1-minute load
average before and after.

    python benchmarks/cell_startup.py [--rounds 5] [--framework torch tensorflow]
        [--max-steps 20] [--seed 0] [--device cpu|cuda|cuda:N]

On a GPU (`--device cuda`) the cells train on it: a torch cell forked from the server creates
its own CUDA context, and its training memory is the CUDA allocator's peak, its own. A
TensorFlow GPU cell always starts as a new process (docs/measurement.md), so TensorFlow is
left out there.

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
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.launchers.process import run_in_child
from mpbench.runner.launchers.zygote import ForkServers
from mpbench.runner.matrix import expand

IMPORTS = {
    "torch": "import torch",
    "tensorflow": "import tensorflow as tf; import keras",
}


def cell_spec(framework: str, max_steps: int, workdir: Path, device: str = "cpu"):
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
        device=device,
    )
    config = build_config(options)
    _, _, cells = expand(config, collect(environ=dict(os.environ)), "startup")
    return cells[0].spec


def run_cell(spec, workdir: Path, servers: ForkServers | None) -> tuple[float, float, int]:
    """(start-up, wall, training memory bytes) of one cell: run_in_child measures the
    start-up as `mpbench run` records it."""
    outcome = run_in_child(spec, 300, workdir / "cell.log", lambda *_: None, False, servers)
    if outcome.status != "ok":
        raise SystemExit(f"cell {spec.cell_id} ended {outcome.status}: {outcome.reason}")
    expected = "new process" if servers is None else "fork server"
    if outcome.launcher != expected:
        raise SystemExit(f"cell {spec.cell_id} started as a {outcome.launcher}, not a {expected}")
    return outcome.startup_s, outcome.wall_s, outcome.measurements.memory.training_bytes


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
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    args = parser.parse_args()
    if args.device != "cpu" and "tensorflow" in args.framework:
        print("TensorFlow GPU cells are never forked: left out", file=sys.stderr)
        args.framework = [fw for fw in args.framework if fw != "tensorflow"]
    if not args.framework:
        raise SystemExit("no framework left to measure")

    load_before = os.getloadavg()[0]
    figures: dict[str, list[float]] = {}
    server_start: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, ForkServers(Path(tmp) / "logs", print) as servers:
        workdir = Path(tmp)
        specs = {fw: cell_spec(fw, args.max_steps, workdir, args.device) for fw in args.framework}
        for framework, spec in specs.items():  # the servers' own start, once, as in a run
            started = time.monotonic()
            run_cell(spec, workdir, servers)
            server_start[framework] = time.monotonic() - started
        arms = [(kind, fw) for fw in args.framework for kind in ("new", "forked", "import")]
        rng = random.Random(args.seed)
        for round_index in range(args.rounds):
            rng.shuffle(arms)
            for kind, framework in arms:
                if kind == "import":
                    figures.setdefault(f"{framework} import", []).append(run_import(framework))
                    continue
                startup, wall, memory = run_cell(
                    specs[framework], workdir, servers if kind == "forked" else None
                )
                for part, value in (("start-up", startup), ("wall", wall), ("memory", memory)):
                    figures.setdefault(f"{framework} {kind} {part}", []).append(value)
                figures.setdefault(f"{framework} {kind} rest", []).append(wall - startup)
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]

    print(
        f"cells: mnist_dense fp32, device {args.device}, max_steps {args.max_steps}; "
        f"{args.rounds} rounds"
    )
    print(f"1-minute load average: {load_before:.2f} before, {load_after:.2f} after")
    print(f"{'seconds':<30} {'min':>6} {'median':>6} {'max':>6}   (max/min - 1)")
    for framework in args.framework:
        print(f"{framework + ' import':<30} {spread(figures[framework + ' import'])}")
        for kind in ("new", "forked"):
            for part in ("start-up", "rest", "wall"):
                values = figures[f"{framework} {kind} {part}"]
                print(f"{f'{framework} {kind} {part}':<30} {spread(values)}")
        ratio = statistics.median(figures[f"{framework} new start-up"]) / statistics.median(
            figures[f"{framework} forked start-up"]
        )
        wall_ratio = statistics.median(figures[f"{framework} new wall"]) / statistics.median(
            figures[f"{framework} forked wall"]
        )
        print(f"{framework + ' new / forked':<30} start-up {ratio:.1f}x, wall {wall_ratio:.1f}x")
        print(f"{framework + ' fork server start':<30} {server_start[framework]:6.2f} (once)")
        for kind in ("new", "forked"):
            mib = [b / 2**20 for b in figures[f"{framework} {kind} memory"]]
            print(f"{f'{framework} {kind} training MiB':<30} {spread(mib)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
