"""Run in a child process by `mpbench detect --measure`: time one framework's training step
under float32 and each 16-bit policy, as the cells apply them, to rate the policies from a
measurement (mpbench.detect.steps; the ratings in mpbench.policies).

One framework per process: torch and TensorFlow must not share one (their allocators, thread
pools and Keras' global dtype policy are process-global). Usage:

    python -m mpbench.detect.step_child --framework torch|tensorflow --device cpu|cuda[:N]
        [--batch N] [--units N] [--budget SECONDS] [--threads N] [--policies a,b,c]

The last stdout line is `MPBENCH_STEP <json>`; the JSON always has "ok", and "error" when
not ok.

The step is mnist_dense's (mpbench/workloads/spec.py MNIST_DENSE; the detect package imports
no workload, so its shape is repeated here and a test keeps the two equal): 784 → units →
units → 10, ReLU, the output in float32 (torch: the logits cast before the cross-entropy;
Keras: a float32 softmax layer), RMSprop (lr 1e-3, rho 0.9, epsilon 1e-7), at the cells'
default units and batch for the device (64 units and batch 8192 on a CPU, 4096 units on an
accelerator). The policies are applied as the backends apply them: torch
`torch.autocast(device_type, dtype)` with `torch.amp.GradScaler` for fp16
(backends/torch/precision.py, steps.py); Keras `keras.mixed_precision.set_global_policy`
before the model is built, compile() wrapping the optimizer in a LossScaleOptimizer for fp16
and `train_on_batch`, the step `fit` runs (backends/tensorflow/models.py), XLA off as the
cells' default. TF32 is off, as under float32 and the mixed policies.

Method: float32 is warmed up and timed first, for a provisional median. Each other policy
then gets one untimed call (tracing, kernel choice, allocation) and one checked step: one
over STOP_RATIO × float32's median stops that policy there (Keras fp16 on a CPU takes
seconds a step) and its ratio is kept from that step, marked stopped_early. The remaining
policies are then timed interleaved, one step of each per round (slow drift of the machine
hits all alike), until each has `min_steps` and the budget (seconds per policy) is spent, or
`max_steps`. speedup = float32's median / the policy's median. CPU: perf_counter around each
step (torch CPU ops return when done; Keras' train_on_batch returns the loss as a number, a
read-back); CUDA: torch.cuda.synchronize() before each clock read. The timed part runs
inside a contention window (mpbench.results.contention), as measure_child's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from mpbench.detect.child import STEP_MARKER, answer, one_line

FRAMEWORKS = ("torch", "tensorflow")
BASELINE = "float32"
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
INPUTS, CLASSES = 784, 10  # mnist_dense: a flattened 28×28 image, ten digits
CPU_UNITS, ACCELERATOR_UNITS = 64, 4096  # MNIST_DENSE.units_cpu / units_accelerator
BATCH = 8192  # MNIST_DENSE.batch_size
RMSPROP = {"learning_rate": 1e-3, "rho": 0.9, "epsilon": 1e-7}  # Keras' defaults, spelled out
# A policy whose first step takes this many times float32's median is not timed further:
# it is slow beyond doubt, and more steps of it would cost the user minutes.
STOP_RATIO = 20.0


@dataclass(frozen=True)
class Limits:
    budget: float = 1.0  # seconds of timed steps per policy
    warmup: int = 2  # untimed calls per policy, the first included
    min_steps: int = 3
    max_steps: int = 50


def default_units(device_text: str) -> int:
    """The cells' default width for the device (MNIST_DENSE.default_units)."""
    return CPU_UNITS if device_text.partition(":")[0] == "cpu" else ACCELERATOR_UNITS


# --- the timing, framework-neutral -----------------------------------------------------


Step = Callable[[], None]  # one training step; returns when the device has finished it


def _timed(step: Step, clock: Callable[[], float]) -> float:
    begin = clock()
    step()
    return clock() - begin


@dataclass
class _Run:
    """What the timing found so far: each stopped policy's one step (seconds), each failed
    policy's error."""

    stopped: dict[str, float]
    failed: dict[str, str]

    def out(self, policy: str) -> bool:
        return policy in self.stopped or policy in self.failed


def _warm_and_check(
    steps: dict[str, Step], limits: Limits, clock: Callable[[], float]
) -> tuple[float, _Run]:
    """float32's provisional median, and the policies stopped at their checked step or
    failed (an error stops its policy only; float32's is the measurement's)."""
    for _ in range(limits.warmup):
        _timed(steps[BASELINE], clock)
    provisional = statistics.median(
        [_timed(steps[BASELINE], clock) for _ in range(max(1, limits.min_steps))]
    )
    run = _Run({}, {})
    for policy, step in steps.items():
        if policy == BASELINE:
            continue
        try:
            _timed(step, clock)  # tracing, kernel choice, allocation: never judged
            checked = _timed(step, clock)
            if checked > STOP_RATIO * provisional:
                run.stopped[policy] = checked
                continue
            for _ in range(limits.warmup - 2):
                _timed(step, clock)
        except Exception as error:  # an unsupported dtype here: this policy's answer
            run.failed[policy] = one_line(error)
    return provisional, run


def _rounds(
    steps: dict[str, Step], limits: Limits, clock: Callable[[], float], run: _Run
) -> dict[str, list[float]]:
    """Interleaved rounds, one step of each running policy per round."""
    running = [p for p in steps if not run.out(p)]
    times: dict[str, list[float]] = {policy: [] for policy in running}
    deadline = clock() + limits.budget * len(running)
    while True:
        for policy in [p for p in running if not run.out(p)]:
            try:
                times[policy].append(_timed(steps[policy], clock))
            except Exception as error:
                if policy == BASELINE:
                    raise
                run.failed[policy] = one_line(error)
        done = min(len(times[p]) for p in running if not run.out(p))
        if done >= limits.max_steps or (done >= limits.min_steps and clock() >= deadline):
            return times


def time_steps(
    steps: dict[str, Step], limits: Limits, clock: Callable[[], float] = time.perf_counter
) -> dict[str, dict[str, Any]]:
    """Per policy: its timed steps' median and best, and its speedup over float32 (module
    docstring); or why it stopped early, or its error. `steps` must hold float32."""
    provisional, run = _warm_and_check(steps, limits, clock)
    times = _rounds(steps, limits, clock, run)
    baseline = statistics.median(times[BASELINE])
    results: dict[str, dict[str, Any]] = {}
    for policy in steps:
        if policy in run.failed:
            results[policy] = {"error": run.failed[policy]}
        elif policy in run.stopped:
            first = run.stopped[policy]
            results[policy] = {
                "steps": 1,
                "first_s": first,
                "speedup": baseline / first,
                "stopped_early": True,
                "why": f"its first step took {first / provisional:.0f}× float32's median "
                f"(over {STOP_RATIO:g}×): not timed further",
            }
        else:
            median = statistics.median(times[policy])
            results[policy] = {
                "steps": len(times[policy]),
                "median_s": median,
                "best_s": min(times[policy]),
                "speedup": baseline / median,
                "stopped_early": False,
            }
    return results


# --- torch -------------------------------------------------------------------------------


def _torch_device(torch: Any, device_text: str) -> Any:
    device = torch.device(device_text)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        device = torch.device("cuda", device.index or 0)
        torch.cuda.set_device(device)
        from mpbench.detect.measure_child import _set_tf32

        _set_tf32(torch, False)  # float32 and the mixed policies: TF32 off (DESIGN §2)
    elif device.type not in ("cpu", "mps"):
        raise RuntimeError(f"unsupported device {device_text!r}")
    return device


def _torch_step(torch: Any, device: Any, policy: str, units: int, batch: int, seen: dict) -> Step:
    """One policy's model, optimizer and step, as backends/torch applies the policy."""
    nn, functional = torch.nn, torch.nn.functional
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(INPUTS, units), nn.ReLU(), nn.Linear(units, units), nn.ReLU(),
        nn.Linear(units, CLASSES),
    ).to(device)  # fmt: skip
    optimizer = torch.optim.RMSprop(
        model.parameters(), lr=RMSPROP["learning_rate"], alpha=RMSPROP["rho"],
        eps=RMSPROP["epsilon"],
    )  # fmt: skip
    x = torch.randn(batch, INPUTS, device=device)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    dtype = {"mixed_float16": torch.float16, "mixed_bfloat16": torch.bfloat16}.get(policy)
    scaler = torch.amp.GradScaler(device.type) if policy == "mixed_float16" else None

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elif device.type == "mps":
            torch.mps.synchronize()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        cast = torch.autocast(device.type, dtype) if dtype else contextlib.nullcontext()
        with cast:
            logits = model(x)
        seen.setdefault(policy, {"compute_dtype": str(logits.dtype).replace("torch.", "")})
        loss = functional.cross_entropy(logits.float(), y)  # the loss in float32
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        synchronize()

    return step


def torch_steps(
    device_text: str, policies: list[str], units: int, batch: int, threads: int | None
) -> tuple[dict[str, Any], dict[str, Step], dict]:
    import torch

    if threads:
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(threads)  # as a cell (backends/torch pin_threads)
    device = _torch_device(torch, device_text)
    seen: dict = {}
    steps = {p: _torch_step(torch, device, p, units, batch, seen) for p in policies}
    info = {
        "framework_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "device_type": device.type,
    }
    return info, steps, seen


# --- TensorFlow / Keras --------------------------------------------------------------------


def _tf_placement(tf: Any, device_text: str) -> str:
    """The TensorFlow device for `device_text`; only that GPU visible, its memory growing on
    demand (before the runtime starts), as backends/tensorflow/device.resolve does."""
    kind, _, index = device_text.partition(":")
    if kind == "cpu":
        return "/CPU:0"
    if kind != "cuda":
        raise RuntimeError(f"TensorFlow runs on cpu or cuda, not {device_text!r}")
    gpus = tf.config.list_physical_devices("GPU")
    wanted = int(index or 0)
    if wanted >= len(gpus):
        raise RuntimeError(f"TensorFlow sees {len(gpus)} GPU(s), no cuda:{wanted}")
    tf.config.set_visible_devices(gpus[wanted], "GPU")
    tf.config.experimental.set_memory_growth(gpus[wanted], True)
    return "/GPU:0"


def _keras_step(
    tf: Any, keras: Any, place: str, policy: str, data: tuple, units: int, seen: dict
) -> Step:
    """One policy's compiled model and its train_on_batch, as backends/tensorflow builds it:
    the global dtype policy set before the layers are built (each layer keeps the policy it
    was built under), a float32 softmax, compile() adding the LossScaleOptimizer for fp16."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        with tf.device(place):
            model = keras.Sequential(
                [
                    keras.Input(shape=(INPUTS,)),
                    keras.layers.Dense(units, activation="relu"),
                    keras.layers.Dense(units, activation="relu"),
                    keras.layers.Dense(CLASSES),
                    keras.layers.Activation("softmax", dtype="float32"),
                ]
            )
            model.compile(
                optimizer=keras.optimizers.RMSprop(**RMSPROP),
                loss=keras.losses.SparseCategoricalCrossentropy(),
                jit_compile=False,
            )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    seen[policy] = {
        "compute_dtype": model.layers[0].compute_dtype,
        "loss_scaling": isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer),
    }
    x, y = data

    def step() -> None:
        with tf.device(place):
            model.train_on_batch(x, y)  # returns the loss as a number: the step is done

    return step


def tensorflow_steps(
    device_text: str, policies: list[str], units: int, batch: int, threads: int | None
) -> tuple[dict[str, Any], dict[str, Step], dict]:
    import numpy as np
    import tensorflow as tf

    if threads:  # before the runtime starts, as a cell (backends/tensorflow pin_threads)
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    place = _tf_placement(tf, device_text)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    import keras

    rng = np.random.default_rng(0)
    with tf.device(place):
        data = (
            tf.constant(rng.random((batch, INPUTS), dtype=np.float32)),
            tf.constant(rng.integers(0, CLASSES, batch)),
        )
    seen: dict = {}
    steps = {p: _keras_step(tf, keras, place, p, data, units, seen) for p in policies}
    info = {
        "framework_version": tf.__version__,
        "keras_version": keras.__version__,
        "threads": tf.config.threading.get_intra_op_parallelism_threads() or None,
        "device_type": device_text.partition(":")[0],
    }
    return info, steps, seen


# --- the child -----------------------------------------------------------------------------


def _build(framework: str, device: str, policies: list[str], units: int, batch: int, threads):
    build = torch_steps if framework == "torch" else tensorflow_steps
    return build(device, policies, units, batch, threads)


def measure(
    framework: str,
    device: str,
    policies: list[str],
    limits: Limits,
    units: int,
    batch: int,
    threads: int | None = None,
) -> dict[str, Any]:
    import psutil

    from mpbench.results.contention import ContentionWindow

    info, steps, seen = _build(framework, device, policies, units, batch, threads)
    window = ContentionWindow(psutil.Process()).start()
    started = time.perf_counter()
    timed = time_steps(steps, limits)
    seconds = round(time.perf_counter() - started, 2)
    reading = window.stop()
    for policy, entry in timed.items():
        entry.update(seen.get(policy, {}))
    return {
        "ok": True,
        "framework": framework,
        "device": device,
        **info,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "units": units,
        "batch": batch,
        "step": f"mnist_dense {INPUTS}→{units}→{units}→{CLASSES}, batch {batch}, RMSprop",
        "limits": asdict(limits),
        "policies": timed,
        "seconds": seconds,
        "contention": reading.to_dict(),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mpbench.detect.step_child")
    parser.add_argument("--framework", required=True, choices=FRAMEWORKS)
    parser.add_argument("--device", required=True)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--units", type=int, default=None, help="default: the cells' units")
    parser.add_argument("--budget", type=float, default=None, help="seconds per policy")
    parser.add_argument("--min-steps", type=int, default=None)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    return parser


def main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 with argparse's usage message on bad options
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    wrong = [p for p in policies if p not in POLICIES]
    if wrong or BASELINE not in policies or args.batch <= 0 or (args.threads or 1) <= 0:
        parser.print_usage(sys.stderr)
        print(f"usage error: --policies {args.policies!r} (float32 among them), "
              f"--batch {args.batch}, --threads {args.threads}", file=sys.stderr)  # fmt: skip
        return 2
    given = {"budget": args.budget, "min_steps": args.min_steps, "max_steps": args.max_steps}
    limits = Limits(**{k: v for k, v in given.items() if v is not None})
    units = args.units or default_units(args.device)
    return answer(
        STEP_MARKER,
        lambda: measure(
            args.framework, args.device, policies, limits, units, args.batch, args.threads
        ),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
