"""Where does bf16 start to pay on a CPU? A width sweep of MNIST dense, both frameworks.

On an AMX Xeon, bf16 matmuls run on the AMX tiles, yet at the Keras guide's CPU size (64 units,
batch 8192) a bf16 step gains ~1.45x in torch and ~1.2x in Keras, not the guide's "more than
2x". This script times plain training loops (no mpbench harness) of 784 -> W -> W -> 10 at
several widths W, float32 against mixed_bfloat16, each (framework, variant, width) in its own
process, interleaved round by round, and prints per width the median step time of each variant,
its speed-up over float32 with the range over rounds, and for torch the share of the bf16 step
spent converting dtypes (torch.profiler, aten::_to_copy).

The torch variants are the remedies the diagnosis names (results/bottleneck.py, CAST_REMEDY):

- `bf16`: torch.autocast(bfloat16), as mpbench's cells run it;
- `bf16-input`: the same, with the input batches stored in bfloat16 (autocast then converts
  the weights and gradients, not the batch);
- `bf16-compiled`: torch.compile (Inductor) of the model under autocast: it fuses the casts
  into their neighbours and has AMX GEMM templates.

Keras runs `fit` (as mpbench's default loop and the guide do) under the global policy.

    python benchmarks/amx_width_sweep.py [--widths 64 256 1024] [--batch-size 8192]
        [--rounds 3] [--framework torch tensorflow] [--steps 12]

Run it on a quiet machine (it prints the load average before and after): each process trains
alone, but a neighbour on two cores turns every figure into noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WARMUP = 3
TORCH_VARIANTS = ("float32", "bf16", "bf16-input", "bf16-compiled")
KERAS_VARIANTS = ("float32", "mixed_bfloat16")


def data(batch: int, batches: int = 4):
    """Synthetic MNIST-shaped batches (values in [0, 1], 10 classes): a few distinct ones, so
    a step does not always read the same memory."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((batches * batch, 784), dtype=np.float32)
    y = rng.integers(0, 10, batches * batch).astype(np.int64)
    return x, y


def torch_loop(variant: str, width: int, batch: int, steps: int) -> dict:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(784, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
    )
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9, eps=1e-7)
    x_np, y_np = data(batch)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    if variant == "bf16-input":
        x = x.to(torch.bfloat16)
    forward = torch.compile(model) if variant == "bf16-compiled" else model
    sixteen = variant != "float32"
    count = len(x) // batch

    def step(index: int) -> None:
        xb = x[(index % count) * batch : (index % count + 1) * batch]
        yb = y[(index % count) * batch : (index % count + 1) * batch]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=sixteen):
            logits = forward(xb)
        loss = nn.functional.cross_entropy(logits.float(), yb)
        loss.backward()
        optimizer.step()

    times = []
    for index in range(WARMUP + steps):
        began = time.perf_counter()
        step(index)
        times.append(time.perf_counter() - began)
    result = {"step_s": statistics.median(times[WARMUP:])}
    if sixteen:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            began = time.perf_counter()
            for index in range(5):
                step(index)
            wall_us = (time.perf_counter() - began) * 1e6
        casts = sum(e.cpu_time_total for e in profiler.key_averages() if e.key == "aten::_to_copy")
        result["cast_share"] = casts / wall_us
    return result


def keras_loop(variant: str, width: int, batch: int, steps: int) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    keras.mixed_precision.set_global_policy(variant)
    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-3, rho=0.9, epsilon=1e-7),
        loss="sparse_categorical_crossentropy",
        jit_compile=False,
    )
    times: list[float] = []

    class Timer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.began = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])  # the step's value read back: the step has finished
            times.append(time.perf_counter() - self.began)

    x, y = data(batch)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat().prefetch(2)
    model.fit(dataset, epochs=1, steps_per_epoch=WARMUP + steps, verbose=0, callbacks=[Timer()])
    return {"step_s": statistics.median(times[WARMUP:])}


def measure(framework: str, variant: str, width: int, batch: int, steps: int) -> dict:
    """One process: a framework's loop at one width, alone."""
    command = [sys.executable, __file__, "--child", framework, variant, str(width)]
    command += ["--batch-size", str(batch), "--steps", str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{framework} {variant} {width}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12, help="timed steps per process")
    parser.add_argument(
        "--framework", nargs="+", default=["torch", "tensorflow"], choices=["torch", "tensorflow"]
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        framework, variant, width = args.child
        loop = torch_loop if framework == "torch" else keras_loop
        print(json.dumps(loop(variant, int(width), args.batch_size, args.steps)))
        return 0

    cases = [
        (framework, variant)
        for framework in args.framework
        for variant in (TORCH_VARIANTS if framework == "torch" else KERAS_VARIANTS)
    ]
    print(f"MNIST dense 784-W-W-10, batch {args.batch_size}, {args.steps} timed steps a process")
    print(f"load average before: {load()}")
    found: dict[tuple[str, str, int], list[dict]] = {}
    for round_ in range(args.rounds):  # interleaved: drift hits every variant alike
        for width in args.widths:
            for framework, variant in cases:
                result = measure(framework, variant, width, args.batch_size, args.steps)
                found.setdefault((framework, variant, width), []).append(result)
        print(f"round {round_ + 1} done, load average {load()}", flush=True)
    print(f"load average after: {load()}\n")
    header = f"{'framework':<11}{'width':>6}  {'variant':<15}{'step ms':>9}  speed-up (range)"
    print(header + "   cast share")
    for framework, variant in cases:
        for width in args.widths:
            runs = found[(framework, variant, width)]
            base = found[(framework, "float32", width)]
            ms = statistics.median(r["step_s"] for r in runs) * 1e3
            # Per round: this variant against the float32 process of the same round.
            ratios = [b["step_s"] / r["step_s"] for b, r in zip(base, runs, strict=True)]
            gain = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            shares = [r["cast_share"] for r in runs if "cast_share" in r]
            share = f"{statistics.median(shares):.0%}" if shares else ""
            print(f"{framework:<11}{width:>6}  {variant:<15}{ms:>9.2f}  {gain:<20}{share:>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
