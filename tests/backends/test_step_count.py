"""One step count per cell: what a cell trains, what it numbers, what it records.

Tiny real cells run in-process through `run_cell`, on the CPU:
- the compiling step of `--compile` leaves nothing trained, so a compiled cell trains the
  same steps as its eager twin and takes its memory baseline at the same point;
- the timed steps are numbered 1..N in both frameworks, and a whole-cell verdict names the
  last of them, as the side file's last point does;
- the record's timed steps plus its end-to-end window are every optimizer step the cell
  trained (`--max-steps` caps the timed steps; the window adds about as many again).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from builders import cell_spec

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
torch = pytest.importorskip("torch")

from mpbench.backends.base import CellSpec, Measurements  # noqa: E402
from mpbench.backends.torch import backend as torch_backend  # noqa: E402
from mpbench.backends.torch.compiled import Compiler  # noqa: E402
from mpbench.telemetry.memory import TrainingMemory  # noqa: E402

BATCH, TRAIN = 64, 1024  # 16 steps per epoch


def spec(framework: str, policy: str, **changes: Any) -> CellSpec:
    values = dict(batch_size=BATCH, max_steps=12, synthetic_train_size=TRAIN)
    return cell_spec(framework=framework, policy=policy, **{**values, **changes})


class _Built:
    """Keeps the torch model and optimizer a cell builds, to look at them afterwards."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        build_model, build_optimizer = torch_backend.build_model, torch_backend.build_optimizer

        def model(*args: Any) -> torch.nn.Module:
            self.model = build_model(*args)
            return self.model

        def optimizer(*args: Any) -> torch.optim.Optimizer:
            self.optimizer = build_optimizer(*args)
            return self.optimizer

        monkeypatch.setattr(torch_backend, "build_model", model)
        monkeypatch.setattr(torch_backend, "build_optimizer", optimizer)

    def optimizer_steps(self) -> int:
        """Optimizer steps applied: RMSprop's per-parameter step count (all equal)."""
        assert self.optimizer is not None
        steps = {int(s["step"]) for s in self.optimizer.state.values()}
        assert len(steps) == 1
        return steps.pop()

    def weights(self) -> list[torch.Tensor]:
        assert self.model is not None
        return [p.detach().clone() for p in self.model.parameters()]


def _compile_with(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """--compile with another Dynamo backend: "aot_eager" traces forward and backward like
    Inductor (Dynamo, AOTAutograd) without generating code, so a test compiles in a second."""
    monkeypatch.setattr(torch_backend, "Compiler", lambda module: Compiler(module, backend=backend))


def run_torch(cell: CellSpec) -> Measurements:
    return torch_backend.run_cell(cell, lambda step, total: None, lambda message: None)


# --- torch.compile: the compiling step trains nothing -------------------------------------


def _eager_and_compiled(monkeypatch: pytest.MonkeyPatch, backend: str, **changes: Any):
    cells = {}
    for compiled in (False, True):
        with monkeypatch.context() as patch:
            built = _Built(patch)
            _compile_with(patch, backend)
            m = run_torch(spec("torch", "float32", compile=compiled, **changes))
            cells[compiled] = (m, built.optimizer_steps(), built.weights())
    return cells[False], cells[True]


def test_a_compiled_cell_trains_the_same_steps_as_its_eager_twin(monkeypatch) -> None:
    (eager, eager_steps, eager_weights), (compiled, compiled_steps, compiled_weights) = (
        _eager_and_compiled(monkeypatch, "aot_eager")
    )
    assert compiled.compile is not None and eager.compile is None
    # Every step the cell trained is a timed step or a step of the end-to-end window.
    trained = len(eager.step_times_s) + eager.end_to_end.steps
    assert eager_steps == compiled_steps == trained
    for a, b in zip(eager_weights, compiled_weights, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert compiled.epoch_losses == pytest.approx(eager.epoch_losses, rel=1e-5)
    assert compiled.test_loss == pytest.approx(eager.test_loss, rel=1e-5)


def _baseline_state(monkeypatch: pytest.MonkeyPatch, compiled: bool) -> tuple[int, bool]:
    """(optimizer states, whether any gradient exists) when the cell starts its memory
    meter."""
    built = _Built(monkeypatch)
    _compile_with(monkeypatch, "aot_eager")
    seen: list[tuple[int, bool]] = []

    class Meter:
        def __init__(self, device: Any) -> None:
            assert built.model is not None and built.optimizer is not None
            grads = any(p.grad is not None for p in built.model.parameters())
            seen.append((len(built.optimizer.state), grads))

        def stop(self) -> TrainingMemory:
            return TrainingMemory(0, 0, "test meter")

    monkeypatch.setattr(torch_backend, "memory_meter", Meter)
    run_torch(spec("torch", "float32", compile=compiled, max_steps=4))
    assert len(seen) == 1
    return seen[0]


def test_a_compiled_cell_starts_its_memory_baseline_where_the_eager_cell_does(
    monkeypatch,
) -> None:
    """The baseline is taken with the weights and data only: no gradients and no optimizer
    state yet, which the first timed step allocates as training memory in either cell."""
    for compiled in (False, True):
        with monkeypatch.context() as patch:
            assert _baseline_state(patch, compiled) == (0, False), f"compile={compiled}"


def _frames_of_a_fresh_compile() -> int:
    from mpbench.backends.torch.precision import apply_policy
    from mpbench.backends.torch.steps import train_step
    from mpbench.policies import resolve

    precision = apply_policy(resolve("fp32"), torch.device("cpu"))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = [(torch.rand(16, 8), torch.randint(0, 4, (16,)))]
    compiler = Compiler(model, backend="eager")
    compiler.compile_step(
        lambda: train_step(compiler.module, optimizer, precision, batch), lambda: None
    )
    compiler.training_done()
    stats = compiler.stats()
    assert stats.recompiles == 0 and stats.evaluation_recompiles == 0
    return stats.frames_compiled


def test_a_compiler_counts_only_the_frames_it_compiled() -> None:
    """Dynamo's counters outlive torch._dynamo.reset(): a second Compiler in one process
    reports its own frames, not the first one's too."""
    first = _frames_of_a_fresh_compile()
    assert first >= 1
    assert _frames_of_a_fresh_compile() == first


# --- one numbering: the timed steps 1..N --------------------------------------------------


def _assert_one_numbering(m: Measurements, steps: int) -> None:
    """The record's divergence, the side file's points and the reason name the same steps."""
    assert m.status == "diverged"
    assert m.divergence is not None and m.divergence["signal"] == "skipped_fraction"
    numerics = m.telemetry["numerics"]
    assert numerics["columns"]["step"] == list(range(1, steps + 1))
    assert numerics["totals"]["last_step"] == steps
    assert m.divergence["step"] == steps
    assert m.reason.startswith(f"{steps} of {steps} steps skipped")
    assert m.loss_scale.counted_steps == m.loss_scale.skipped_steps == steps
    assert m.loss_scale.final_scale == pytest.approx(numerics["columns"]["loss_scale"][-1])


def test_a_torch_cell_that_skips_every_step_names_its_last_timed_step() -> None:
    # A static scale of 1e30 overflows every float16 gradient: every step is skipped.
    steps = 12  # fewer than the detector's window: judged when the cell ends
    m = run_torch(spec("torch", "mixed_float16", loss_scale=1e30, warmup_steps=5))
    _assert_one_numbering(m, steps)


@pytest.fixture
def keras_float32_afterwards():
    """run_cell sets Keras' process-global dtype policy; leave the next test a clean one."""
    keras = pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    yield
    keras.mixed_precision.set_global_policy("float32")


def run_tensorflow(cell: CellSpec) -> Measurements:
    from mpbench.backends.tensorflow.backend import run_cell

    return run_cell(cell, lambda step, total: None, lambda message: None)


@pytest.mark.tensorflow
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_keras_cell_that_skips_every_step_names_its_last_timed_step(
    loop: str, keras_float32_afterwards
) -> None:
    """The end-to-end window after the timed steps (7 steps here, and fit's untimed warm-up
    step) is not part of the verdict, which judges the steps the side file holds."""
    cell = spec("tensorflow", "mixed_float16", loop=loop, loss_scale=1e30, warmup_steps=5)
    _assert_one_numbering(run_tensorflow(cell), 12)


@pytest.mark.tensorflow
def test_under_accumulation_the_keras_verdict_still_names_the_last_timed_step(
    keras_float32_afterwards,
) -> None:
    """Keras counts skips per micro-batch (24 of them here) but numbers steps as torch does."""
    m = run_tensorflow(  # 8 steps of 2 micro-batches per epoch: 12 steps in 2 epochs
        spec("tensorflow", "mixed_float16", loop="custom", loss_scale=1e30, accumulate=2, epochs=2)
    )
    assert m.status == "diverged" and m.divergence is not None
    assert m.telemetry["numerics"]["columns"]["step"][-1] == m.divergence["step"] == 12
    assert m.loss_scale.counted_steps == m.loss_scale.skipped_steps == 24


# --- every trained step is in the record --------------------------------------------------

# 20 timed steps of 16 per epoch: the end-to-end window runs two whole epochs (32 steps).
WINDOWED = {"epochs": 2, "max_steps": 20}


def test_a_torch_records_steps_are_every_step_it_trained(monkeypatch) -> None:
    built = _Built(monkeypatch)
    m = run_torch(spec("torch", "float32", **WINDOWED))
    assert (len(m.step_times_s), m.end_to_end.steps) == (20, 32)
    assert built.optimizer_steps() == 20 + 32


@pytest.mark.tensorflow
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_keras_records_steps_are_every_step_it_trained(
    loop: str, monkeypatch, keras_float32_afterwards
) -> None:
    import keras

    from mpbench.backends.tensorflow import models

    built: list[keras.Model] = []
    compiled_model = models.compiled_model

    def keep(*args: Any) -> keras.Model:
        built.append(compiled_model(*args))
        return built[-1]

    monkeypatch.setattr(models, "compiled_model", keep)
    m = run_tensorflow(spec("tensorflow", "float32", loop=loop, **WINDOWED))
    assert (len(m.step_times_s), m.end_to_end.steps) == (20, 32)
    applied = int(keras.ops.convert_to_numpy(built[0].optimizer.iterations))
    assert applied == 20 + 32
