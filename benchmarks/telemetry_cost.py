"""What does per-step numerics telemetry cost next to a training step? (issue 14)

Trains mpbench's mnist_dense model (torch, units 256, batch 256 by default) with mpbench's own
train_step on this machine's CPU, and in every round alternates plain steps with steps
followed by `torch_grad_health` (the gradient norm and non-finite count, one host read on a
healthy step). Each step is timed as the backend times it (train_step, then reading the
loss); the health call is timed on its own, and so is the design not taken (counting
non-finite elements on every step, not only when the norm is not finite). Per round: the
median step, the median health call, and the ratio (step + health) / step. Printed: medians
over rounds and their spread (min..max), plus the pure-Python bookkeeping per step
(NumericsLog.record + DivergenceDetector.observe).

    python benchmarks/telemetry_cost.py [--units 256] [--batch-size 256] [--rounds 7]
        [--steps 40] [--policies float32 mixed_float16] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time


def measure_policy(policy_name: str, args: argparse.Namespace) -> dict[str, list[float]]:
    import torch

    from mpbench.backends.torch.models import build_model, build_optimizer
    from mpbench.backends.torch.precision import apply_policy
    from mpbench.backends.torch.steps import train_step
    from mpbench.policies import resolve
    from mpbench.telemetry.numerics import torch_grad_health
    from mpbench.workloads import get_workload

    torch.manual_seed(0)
    device = torch.device("cpu")
    workload = get_workload("mnist_dense")
    model = build_model(workload, args.units).to(device)
    optimizer = build_optimizer(workload, model.parameters())
    precision = apply_policy(resolve(policy_name), device)
    x = torch.rand(8 * args.batch_size, 784)
    y = torch.randint(0, 10, (8 * args.batch_size,))
    batches = [
        [(x[i : i + args.batch_size], y[i : i + args.batch_size])]
        for i in range(0, len(x), args.batch_size)
    ]
    check_skip = precision.scaler is not None

    def step(index: int) -> float:
        began = time.perf_counter()
        result = train_step(
            model, optimizer, precision, batches[index % len(batches)], check_skip=check_skip
        )
        result.loss.item()  # the backend reads the loss inside its timed region
        return time.perf_counter() - began

    def health() -> float:
        began = time.perf_counter()
        torch_grad_health(model.parameters())  # after scaler.step: already unscaled
        return time.perf_counter() - began

    def count_every_step() -> float:
        """The design not taken: count non-finite elements on every step (isfinite + sum per
        tensor) beside the norm, read back together."""
        began = time.perf_counter()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2)))
        count = torch.stack([torch.isfinite(g).logical_not_().sum() for g in grads]).sum()
        torch.stack([norm.double(), count.double()]).tolist()
        return time.perf_counter() - began

    for index in range(args.warmup):
        step(index)
        health()
        count_every_step()
    rounds: dict[str, list[float]] = {"step": [], "health": [], "ratio": [], "eager": []}
    index = 0
    for _ in range(args.rounds):
        plain, with_health, calls, eager = [], [], [], []
        for _ in range(args.steps):
            plain.append(step(index))
            index += 1
            seconds = step(index)
            index += 1
            cost = health()
            with_health.append(seconds + cost)
            calls.append(cost)
            eager.append(count_every_step())
        rounds["step"].append(statistics.median(plain))
        rounds["health"].append(statistics.median(calls))
        rounds["eager"].append(statistics.median(eager))
        rounds["ratio"].append(statistics.median(with_health) / statistics.median(plain))
    return rounds


def bookkeeping_us(steps: int = 20_000) -> float:
    """Microseconds per step of NumericsLog.record + DivergenceDetector.observe."""
    from mpbench.telemetry.divergence import DivergenceDetector, DivergenceRules
    from mpbench.telemetry.numerics import NumericsLog

    log = NumericsLog()
    detector = DivergenceDetector(DivergenceRules(spike_z=6.0))
    began = time.perf_counter()
    for step in range(1, steps + 1):
        loss = 2.3 - 1e-5 * step + 1e-3 * (step % 5)
        detector.observe(step, loss, 65536.0, False)
        log.record(step, loss, 65536.0, False, 1.25, 0)
    return (time.perf_counter() - began) / steps * 1e6


def spread(values: list[float], unit: float, fmt: str) -> str:
    return (
        f"{statistics.median(values) * unit:{fmt}} "
        f"(min {min(values) * unit:{fmt}}, max {max(values) * unit:{fmt}})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40, help="pairs of steps per round")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--policies", nargs="+", default=["float32", "mixed_float16"])
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's); 1 keeps a shared machine's other "
        "processes from stalling every parallel kernel",
    )
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    print(
        f"torch {torch.__version__}, CPU, {torch.get_num_threads()} threads; mnist_dense "
        f"units {args.units}, batch {args.batch_size}; {args.rounds} rounds x {args.steps} "
        "step pairs (plain, then step + torch_grad_health)"
    )
    for policy in args.policies:
        rounds = measure_policy(policy, args)
        print(f"\n{policy}:")
        print(f"  step (median of rounds)     {spread(rounds['step'], 1e3, '.3f')} ms")
        print(f"  torch_grad_health           {spread(rounds['health'], 1e6, '.0f')} us")
        print(f"  (step + health) / step      {spread(rounds['ratio'], 1, '.3f')}")
        share = [h / s for h, s in zip(rounds["health"], rounds["step"], strict=True)]
        print(f"  health call / step          {spread(share, 100, '.1f')} %")
        print(f"  not taken: count every step {spread(rounds['eager'], 1e6, '.0f')} us")
    print(f"\nNumericsLog.record + DivergenceDetector.observe: {bookkeeping_us():.1f} us per step")


if __name__ == "__main__":
    main()
