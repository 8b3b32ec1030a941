"""How much does mpbench's harness add to a training step?

Runs mpbench's cell (a real `mpbench run` subprocess) and a minimal hand-written loop of the
same model, policy, batch and device (also in its own process), interleaved round by round in
one run, and prints the ratio of median step times. Target: <= 1.03 for PyTorch and <= 1.05
for TensorFlow.

    python benchmarks/harness_overhead.py [--framework torch|tensorflow|all] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNITS, BATCH, STEPS, WARMUP = 1024, 1024, 60, 5  # --units, --batch-size, --steps override


def synthetic_mnist(train_size: int | None = None):
    """The same synthetic MNIST stand-in mpbench trains on (loading is outside the timing):
    8 batches, or `train_size` samples."""
    from mpbench.data import load

    size = train_size or 8 * BATCH
    data = load("mnist", mode="synthetic", synthetic_train_size=size, synthetic_test_size=16)
    images = (data.x_train.reshape(-1, 784) / 255.0).astype("float32")
    return images, data.y_train.astype("int64")


def minimal_torch(policy: str, shuffled: bool = False) -> list[float]:
    """The loop a person would write by hand: autocast, scaler for fp16, sync, perf_counter.
    Its batches are 8 slices of the data, in turn; `shuffled`: mpbench's data path instead
    (MNIST's 60,000 training samples, a new permutation each epoch, each batch gathered from
    it into the same buffer before the clock starts), so that a difference between the two
    is the data path's."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(784, UNITS), nn.ReLU(), nn.Linear(UNITS, UNITS), nn.ReLU(), nn.Linear(UNITS, 10)
    )
    for layer in model:  # the same initialisation as mpbench's models (Keras' Glorot-uniform)
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9, eps=1e-7)
    dtype = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(policy)
    scaler = torch.amp.GradScaler("cpu") if policy == "mixed_float16" else None
    images, labels = synthetic_mnist(60_000 if shuffled else None)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    per_epoch = len(x) // BATCH
    order = torch.randperm(len(x))
    xb, yb = x.new_empty((BATCH, x.shape[1])), y.new_empty((BATCH,))
    times = []
    for step in range(STEPS):
        if shuffled:
            if step % per_epoch == 0:
                order = torch.randperm(len(x))
            rows = order[(step % per_epoch) * BATCH : (step % per_epoch + 1) * BATCH]
            xb, yb = torch.index_select(x, 0, rows, out=xb), torch.index_select(y, 0, rows, out=yb)
        else:
            start = (step % 8) * BATCH
            xb, yb = x[start : start + BATCH], y[start : start + BATCH]
        began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
            logits = model(xb)
        loss = nn.functional.cross_entropy(logits.float(), yb)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        times.append(time.perf_counter() - began)
        loss.item()
    return times[WARMUP:]


def minimal_tensorflow(policy: str, loop: str) -> list[float]:
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    keras.mixed_precision.set_global_policy(policy)
    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(UNITS, activation="relu"),
            keras.layers.Dense(UNITS, activation="relu"),
            keras.layers.Dense(10),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )
    optimizer = keras.optimizers.RMSprop(learning_rate=1e-3, rho=0.9, epsilon=1e-7)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    x, y = synthetic_mnist()
    times: list[float] = []
    if loop == "fit":
        model.compile(optimizer=optimizer, loss=loss_fn, jit_compile=False)

        class Timer(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                self.began = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                float(logs["loss"])
                times.append(time.perf_counter() - self.began)

        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat().prefetch(2)
        model.fit(data, epochs=1, steps_per_epoch=STEPS, verbose=0, callbacks=[Timer()])
        return times[WARMUP:]
    if policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    xs, ys = tf.constant(x), tf.constant(y)
    for step in range(STEPS):
        start = (step % 8) * BATCH
        began = time.perf_counter()
        float(train_step(xs[start : start + BATCH], ys[start : start + BATCH]))
        times.append(time.perf_counter() - began)
    return times[WARMUP:]


def mpbench_median(framework: str, policy: str, loop: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        command = [
            sys.executable,
            "-m",
            "mpbench",
            "run",
            "--framework",
            framework,
            "--workload",
            "mnist_dense",
            "--policy",
            policy,
            "--device",
            "cpu",
            "--data",
            "synthetic",
            "--units",
            str(UNITS),
            "--batch-size",
            str(BATCH),
            "--max-steps",
            str(STEPS),
            "--warmup-steps",
            str(WARMUP),
            "--loop",
            loop,
            "--out",
            str(out),
        ]
        subprocess.run(command, check=True, capture_output=True)
        record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
        if record["status"] != "ok":
            raise SystemExit(f"mpbench cell failed: {record['reason']}")
        return record["step_time"]["median_s"]


def _size(units: int, batch: int, steps: int) -> None:
    """The model's width, the batch and the steps of both sides (the CPU default cell is
    64 units at batch 8192: `--units 64 --batch-size 8192`)."""
    global UNITS, BATCH, STEPS
    UNITS, BATCH, STEPS = units, batch, steps


def minimal_median(framework: str, policy: str, loop: str, shuffled: bool = False) -> float:
    command = [sys.executable, __file__, "--minimal", framework, "--policy", policy, "--loop", loop]
    command += ["--shuffled"] if shuffled else []
    command += ["--units", str(UNITS), "--batch-size", str(BATCH), "--steps", str(STEPS)]
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return statistics.median(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", default="all", choices=["torch", "tensorflow", "all"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policy", default=None)
    parser.add_argument("--loop", default="fit", choices=["fit", "custom"])
    parser.add_argument("--minimal", choices=["torch", "tensorflow"], help=argparse.SUPPRESS)
    parser.add_argument("--units", type=int, default=UNITS)
    parser.add_argument("--batch-size", type=int, default=BATCH)
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument(
        "--shuffled",
        action="store_true",
        help="torch: also time the hand-written loop on mpbench's data path (shuffled batches)",
    )
    args = parser.parse_args()
    _size(args.units, args.batch_size, args.steps)
    if args.minimal == "torch":
        print(json.dumps(minimal_torch(args.policy, args.shuffled)))
        return
    if args.minimal == "tensorflow":
        print(json.dumps(minimal_tensorflow(args.policy, args.loop)))
        return

    cases = []
    if args.framework in ("torch", "all"):
        cases += [("torch", p, "fit") for p in ("float32", "mixed_bfloat16")]
    if args.framework in ("tensorflow", "all"):
        cases += [("tensorflow", "float32", "fit"), ("tensorflow", "mixed_bfloat16", "fit")]
        cases += [("tensorflow", "mixed_float16", "custom")]
    if args.policy:
        cases = [c for c in cases if c[1] == args.policy]
    print(f"mnist_dense, units {UNITS}, batch {BATCH}, {STEPS} steps ({WARMUP} warm-up), CPU")
    print(f"load average before: {_load()}")
    header = ("framework", "policy", "loop", "mpbench ms", "minimal ms", "ratio (range)")
    print("{:<11}{:<16}{:<10}{:>11}{:>11}  {}".format(*header))
    for framework, policy, loop in cases:
        arms = {"minimal": False}
        if args.shuffled and framework == "torch":
            arms["shuffled"] = True
        ours: list[float] = []
        theirs: dict[str, list[float]] = {arm: [] for arm in arms}
        for _ in range(args.rounds):  # interleaved so drift on a shared machine hits both
            ours.append(mpbench_median(framework, policy, loop))
            for arm, shuffled in arms.items():
                theirs[arm].append(minimal_median(framework, policy, loop, shuffled))
        a = statistics.median(ours)
        for arm, values in theirs.items():
            b = statistics.median(values)
            ratios = [x / y for x, y in zip(ours, values, strict=True)]
            label = loop if arm == "minimal" else f"{loop}/shuf"
            spread = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
            print(
                f"{framework:<11}{policy:<16}{label:<10}{a * 1e3:>11.2f}{b * 1e3:>11.2f}  {spread}"
            )
    print(f"load average after: {_load()}")


def _load() -> str:
    import os

    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
