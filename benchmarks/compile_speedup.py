"""Eager vs torch.compile training-step times for mnist_dense on this machine (`--compile`).

Both variants train their own copy of the same model in one process with mpbench's own step
(`mpbench.backends.torch.steps.train_step`): compiled once first (its compile time printed),
then timed in interleaved blocks (eager block, compiled block, eager block, ...) so that
machine drift hits both alike. Prints per policy the median step time of each, the p10–p90
spread over all timed steps, the median of the per-round ratios and their range.

    python benchmarks/compile_speedup.py [--policy bf16 --policy fp32] [--units 64]
        [--batch-size 256] [--rounds 5] [--steps 20]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from mpbench.backends.torch.compiled import Compiler
from mpbench.backends.torch.models import build_model, build_optimizer
from mpbench.backends.torch.precision import apply_policy
from mpbench.backends.torch.steps import train_step
from mpbench.policies import resolve
from mpbench.workloads import get_workload


def _timed_block(step, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return times


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def measure(policy_name: str, units: int, batch: int, rounds: int, steps: int) -> None:
    workload = get_workload("mnist_dense")
    torch.manual_seed(0)
    eager = build_model(workload, units)
    compiled_source = copy.deepcopy(eager)
    policy = resolve(policy_name)
    x = torch.rand(batch, *workload.input_shape).reshape(batch, -1)
    y = torch.randint(0, 10, (batch,))
    variants = {}
    for name, model in (("eager", eager), ("compiled", compiled_source)):
        optimizer = build_optimizer(workload, model.parameters())
        precision = apply_policy(policy, torch.device("cpu"))
        forward = model
        if name == "compiled":
            compiler = Compiler(model)
            forward = compiler.module
            compiler.compile_step(
                lambda f=forward, o=optimizer, p=precision: train_step(f, o, p, [(x, y)]),
                lambda: None,
            )
            print(f"{policy.name}: compile (first step) {compiler.compile_s:.1f} s")

        def step(f=forward, o=optimizer, p=precision):
            train_step(f, o, p, [(x, y)]).loss.item()

        for _ in range(3):  # warm-up outside the timing
            step()
        variants[name] = step
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    ratios = []
    for _ in range(rounds):
        medians = {}
        for name, step in variants.items():
            block = _timed_block(step, steps)
            times[name] += block
            medians[name] = statistics.median(block)
        ratios.append(medians["eager"] / medians["compiled"])
    compiler.training_done()
    recompiles = compiler.stats().recompiles
    for name, values in times.items():
        print(
            f"{policy.name} {name:>8}: median {statistics.median(values) * 1e3:.2f} ms/step "
            f"(p10–p90 {_pct(values, 0.1) * 1e3:.2f}–{_pct(values, 0.9) * 1e3:.2f} ms, "
            f"n={len(values)})"
        )
    print(
        f"{policy.name} eager/compiled: median of {rounds} round ratios "
        f"{statistics.median(ratios):.2f}x (range {min(ratios):.2f}–{max(ratios):.2f}x); "
        f"recompiles after the first step: {recompiles}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--units", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for policy in args.policy or ["fp32", "bf16"]:
        measure(policy, args.units, args.batch_size, args.rounds, args.steps)


if __name__ == "__main__":
    main()
