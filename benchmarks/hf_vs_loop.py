"""mpbench against a plain PyTorch loop of the same Hugging Face model (issue 41's acceptance).

A user's question is "what does bf16 buy my model"; mpbench's answer must be the one a plain
training loop of that model would give. Each round runs, each in a process of its own and in
an order that alternates round by round: a hand-written loop of GPT-2 (transformers' own
`GPT2LMHeadModel`, as transformers returns it: a ModelOutput, Conv1D projections) at float32
and under bf16 autocast, and `mpbench run -w benchmarks.hf_models:GPT2 -p fp32 -p bf16` (the
same model, data, batch, optimizer and thread count, handed to mpbench as a UserWorkload
returning the raw HF model). It prints, per round and as median (range) over the rounds:
mpbench's median step over the loop's for each policy (target: within 5 %), and each side's
bf16 speed-up with their ratio. Measure on a quiet machine (nothing else training): the load
average is printed before and after.

    python benchmarks/hf_vs_loop.py [--rounds 5] [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("float32", "mixed_bfloat16")
WARMUP = 5


def plain_loop(policy: str, steps: int) -> list[float]:
    """The loop a person writes by hand: autocast for bf16, the logits cast to float32 for the
    loss, perf_counter around each step (a CPU runs synchronously)."""
    import torch

    sys.path.insert(0, str(ROOT))
    from benchmarks import hf_models

    torch.manual_seed(0)
    model, optimizer, loss_fn = hf_models.gpt2("cpu")
    x, y, _, _ = hf_models.lm_data(0)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    batch = hf_models.BATCH
    bf16 = policy == "mixed_bfloat16"
    times = []
    for step in range(steps + WARMUP):
        start = (step * batch) % (len(x) - batch)
        xb, yb = x[start : start + batch], y[start : start + batch]
        began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(xb).logits
        loss = loss_fn(logits.float(), yb)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - began)
        loss.item()
    return times[WARMUP:]


def run_plain(policy: str, steps: int, threads: int) -> float:
    code = (
        "import json, statistics, sys, torch; "
        f"torch.set_num_threads({threads}); "
        f"sys.path.insert(0, {str(ROOT)!r}); "
        "from benchmarks.hf_vs_loop import plain_loop; "
        f"print(json.dumps(statistics.median(plain_loop({policy!r}, {steps}))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_mpbench(steps: int, out: Path) -> dict[str, float]:
    command = [
        sys.executable, "-m", "mpbench", "run", "-w", "benchmarks.hf_models:GPT2", "-f", "torch",
        "-p", "fp32", "-p", "bf16", "--repeat", "1", "--device", "cpu",
        "--max-steps", str(steps + WARMUP), "--warmup-steps", str(WARMUP), "--out", str(out),
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    medians = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["status"] != "ok":
            raise SystemExit(
                f"mpbench cell {record['policy']} {record['status']}: {record['reason']}"
            )
        if record["step_time"]["count"] != steps:  # the same steps as the loop, or no ratio
            raise SystemExit(
                f"mpbench timed {record['step_time']['count']} steps, not {steps}: "
                "an epoch of benchmarks/hf_models.py's data is too short"
            )
        medians[record["policy"]] = record["step_time"]["median_s"]
        threads = record["threads"]
    return {**medians, "threads": threads.get("intra_op")}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    threads = os.cpu_count() or 1
    ratios: dict[str, list[float]] = {p: [] for p in POLICIES}
    gains: dict[str, list[float]] = {"loop": [], "mpbench": []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            order = ["plain", "mpbench"] if index % 2 == 0 else ["mpbench", "plain"]
            plain: dict[str, float] = {}
            for side in order:
                if side == "mpbench":
                    ours = run_mpbench(args.steps, Path(tmp) / f"round{index}")
                    threads = ours.pop("threads") or threads
                else:
                    for policy in POLICIES if index % 2 == 0 else POLICIES[::-1]:
                        plain[policy] = run_plain(policy, args.steps, threads)
            for policy in POLICIES:
                ratios[policy].append(ours[policy] / plain[policy])
            gains["loop"].append(plain["float32"] / plain["mixed_bfloat16"])
            gains["mpbench"].append(ours["float32"] / ours["mixed_bfloat16"])
            print(
                f"round {index + 1}: step ms loop fp32 {plain['float32'] * 1e3:.2f} bf16 "
                f"{plain['mixed_bfloat16'] * 1e3:.2f}; mpbench fp32 {ours['float32'] * 1e3:.2f} "
                f"bf16 {ours['mixed_bfloat16'] * 1e3:.2f} ({threads} threads)"
            )
    print(f"mpbench / loop, float32 step: {spread(ratios['float32'])}")
    print(f"mpbench / loop, bf16 step:    {spread(ratios['mixed_bfloat16'])}")
    print(f"bf16 speed-up, loop:    {spread(gains['loop'])}")
    print(f"bf16 speed-up, mpbench: {spread(gains['mpbench'])}")
    ratio = [m / p for m, p in zip(gains["mpbench"], gains["loop"], strict=True)]
    print(f"mpbench's speed-up / the loop's: {spread(ratio)}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
