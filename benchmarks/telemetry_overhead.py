"""What telemetry costs a cell: torch step-time medians with and without it, on this machine.

Runs the real torch cell (`mpbench.backends.torch.backend.run_cell`, mnist_dense, synthetic
data) in this process, alternating a cell with telemetry (per-step numerics, the gradient
health on every kept step, the divergence detector, the device sampler thread, the energy
meter) and a cell whose telemetry is a no-op, for several rounds, so machine drift hits
both alike. The step timer stops before the numerics are taken, so what telemetry can add
to a timed step is the sampler thread's competition for the CPU and whatever the numerics
leave behind (a host sync, caches); the wall time of the cell shows the rest.

Prints per policy the median step time of each variant per round, the per-round ratio
(with / without) and its range, and the cells' wall times.

    python benchmarks/telemetry_overhead.py [--policy fp32 --policy bf16] [--rounds 5]
        [--units 256] [--batch-size 256] [--steps 60] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from mpbench.backends.base import CellSpec
from mpbench.backends.torch import backend
from mpbench.policies import resolve
from mpbench.telemetry.cell import CellTelemetry


class NoTelemetry(CellTelemetry):
    """The same interface, doing nothing: the baseline."""

    def start_timed(self) -> None:
        pass

    def stop_timed(self, samples: int) -> None:
        pass

    def wants_gradients(self) -> bool:
        return False

    def step(self, *args: Any, **kwargs: Any) -> None:
        pass


def _cell(policy: str, args: argparse.Namespace, telemetry: type, seed: int) -> tuple[float, float]:
    """(median timed step s, cell wall s) of one real torch cell."""
    backend.CellTelemetry = telemetry  # the backend looks the class up at call time
    spec = CellSpec(
        run_id="bench",
        cell_id=f"torch/mnist_dense/{policy}/r0",
        framework="torch",
        workload="mnist_dense",
        policy=policy,
        repeat=0,
        device="cpu",
        batch_size=args.batch_size,
        epochs=100,
        max_steps=args.steps,
        warmup_steps=5,
        units=args.units,
        seed=seed,
        data="synthetic",
        synthetic_train_size=args.batch_size * 16,
        synthetic_test_size=256,
        intra_op_threads=args.threads,
        inter_op_threads=args.threads,
    )
    start = time.perf_counter()
    measured = backend.run_cell(spec, lambda step, total: None, lambda message: None)
    wall = time.perf_counter() - start
    timed = measured.step_times_s[measured.warmup_steps :]
    return statistics.median(timed), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    policies = [resolve(p).name for p in (args.policy or ["fp32", "bf16"])]
    print(
        f"torch mnist_dense units {args.units}, batch {args.batch_size}, {args.steps} steps "
        f"(5 warm-up), {args.rounds} rounds, with and without telemetry alternating"
    )
    for policy in policies:
        _cell(policy, args, CellTelemetry, 0)  # warm the caches and lazy imports once
        rows = []
        for index in range(args.rounds):
            # Alternate which variant goes first, so neither always runs on a warmer machine.
            order = [CellTelemetry, NoTelemetry] if index % 2 == 0 else [NoTelemetry, CellTelemetry]
            got = {kind: _cell(policy, args, kind, index) for kind in order}
            rows.append((got[CellTelemetry], got[NoTelemetry]))
        with_ms = [w[0] * 1000 for w, _ in rows]
        without_ms = [n[0] * 1000 for _, n in rows]
        ratios = [w[0] / n[0] for w, n in rows]
        walls = [(w[1], n[1]) for w, n in rows]
        print(f"\n{policy}:")
        print(f"  step median, with telemetry     {_spread(with_ms)} ms")
        print(f"  step median, without            {_spread(without_ms)} ms")
        print(f"  with / without, per round       {_spread(ratios, '.3f')}")
        print(
            f"  cell wall s, with / without     {_spread([w for w, _ in walls], '.2f')} / "
            f"{_spread([n for _, n in walls], '.2f')}"
        )
    backend.CellTelemetry = CellTelemetry


def _spread(values: list[float], spec: str = ".3f") -> str:
    return (
        f"{statistics.median(values):{spec}} (min {min(values):{spec}}, max {max(values):{spec}})"
    )


if __name__ == "__main__":
    main()
