"""Per-step telemetry and the divergence detector in the TensorFlow / Keras 3 backend
(issue 14, docs/telemetry.md): tiny cells run in-process through `run_cell`, on the CPU."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from builders import cell_spec

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

from mpbench.backends.base import CellSpec, Measurements  # noqa: E402
from mpbench.backends.tensorflow.backend import run_cell  # noqa: E402
from mpbench.backends.tensorflow.loops import GRADIENT_EVERY  # noqa: E402
from mpbench.telemetry.cell import CellDiverged  # noqa: E402

pytestmark = pytest.mark.tensorflow

BATCH, TRAIN, STEPS = 64, 1024, 12  # 16 steps per epoch: max_steps cuts the one epoch


@pytest.fixture(autouse=True)
def float32_afterwards():
    """run_cell sets Keras' process-global dtype policy; leave the next test a clean one."""
    yield
    keras.mixed_precision.set_global_policy("float32")


def spec(policy: str, loop: str, **changes: Any) -> CellSpec:
    values = dict(batch_size=BATCH, max_steps=STEPS, synthetic_train_size=TRAIN, loop=loop)
    return cell_spec(framework="tensorflow", policy=policy, **{**values, **changes})


def run(cell: CellSpec) -> Measurements:
    return run_cell(cell, lambda step, total: None, lambda message: None)


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_an_ok_float32_cell_reports_one_loss_per_step(loop: str) -> None:
    m = run(spec("float32", loop))
    assert m.status == "ok" and m.divergence is None
    telemetry = m.telemetry
    assert telemetry is not None
    columns = telemetry["numerics"]["columns"]
    assert columns["step"] == list(range(1, STEPS + 1))
    losses = columns["loss"]
    assert len(losses) == STEPS == len(m.step_times_s)
    assert all(math.isfinite(loss) and loss > 0 for loss in losses)
    # The per-step losses are the steps' own, not fit's running mean: they average to the
    # epoch's loss (one epoch, cut by max_steps) and they fall as the model learns.
    assert sum(losses) / STEPS == pytest.approx(m.epoch_losses[0], rel=1e-4)
    assert losses[-1] < losses[0]
    # No loss scaler: nothing can be skipped and there is no scale.
    assert columns["loss_scale"] == [None] * STEPS
    assert columns["skipped"] == [None] * STEPS
    if loop == "custom":  # the custom step returns the gradient health, sampled
        checked = [(step - 1) % GRADIENT_EVERY == 0 for step in columns["step"]]
        assert [n is not None and n > 0 for n in columns["grad_norm"]] == checked
        assert columns["nonfinite_grads"] == [0 if c else None for c in checked]
        assert telemetry["summary"]["grad_norm_median"] > 0
    else:  # fit does not expose the gradients
        assert columns["grad_norm"] == [None] * STEPS
        assert columns["nonfinite_grads"] == [None] * STEPS
    summary = telemetry["summary"]
    assert summary["steps"] == STEPS
    assert summary["skipped_steps"] == 0
    assert "mean_cpu_util_pct" in summary
    assert telemetry["energy"]["reason"] == "no energy counter on this machine"


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_dynamic_float16_scale_fills_the_scale_and_skipped_columns(loop: str) -> None:
    m = run(spec("mixed_float16", loop))
    assert m.status == "ok"
    columns = m.telemetry["numerics"]["columns"]
    assert columns["loss_scale"] == [2.0**15] * STEPS  # no overflow, no growth in 12 steps
    assert columns["skipped"] == [False] * STEPS
    assert all(math.isfinite(loss) for loss in columns["loss"])
    assert m.loss_scale.skipped_steps == 0


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_static_scale_that_overflows_every_step_is_diverged(loop: str) -> None:
    """Every step skipped: the window of 20 steps fires at step 20, before the 24th step."""
    with pytest.raises(CellDiverged) as raised:
        run(spec("mixed_float16", loop, loss_scale=1e30, epochs=2, max_steps=24))
    divergence, telemetry = raised.value.divergence, raised.value.telemetry
    assert divergence.signal == "skipped_fraction"
    assert divergence.step == 20
    assert "20 of the last 20 steps skipped" in divergence.reason
    columns = telemetry["numerics"]["columns"]
    assert columns["step"] == list(range(1, 21))
    assert columns["skipped"] == [True] * 20
    assert columns["loss_scale"] == [pytest.approx(1e30)] * 20  # static: never halved
    assert all(math.isfinite(loss) for loss in columns["loss"])  # the weights stayed finite
    assert telemetry["summary"]["skipped_steps"] == 20
    if loop == "custom":  # sampled on steps 1 and 11: every gradient element overflowed
        assert [n for n in columns["nonfinite_grads"] if n is not None] == [
            columns["nonfinite_grads"][0]
        ] * 2
        assert columns["nonfinite_grads"][0] > 0
        assert columns["grad_norm"] == [None] * 20
    assert telemetry["device"] is not None  # the sampler was stopped and kept


def test_a_short_cell_with_an_overflowing_static_scale_ends_diverged_not_ok() -> None:
    """Shorter than the window: judged at the end of the cell, on all its micro-batches."""
    m = run(spec("mixed_float16", "custom", loss_scale=1e30))
    assert m.status == "diverged"
    assert m.divergence is not None and m.divergence["signal"] == "skipped_fraction"
    assert m.reason.endswith("with a static loss scale of 1e+30")
    assert m.telemetry["numerics"]["columns"]["skipped"] == [True] * STEPS
    assert math.isfinite(m.test_loss)  # skipped, not applied: no NaN weights


def test_a_non_finite_loss_is_the_detectors_signal() -> None:
    import numpy as np

    from mpbench.backends.tensorflow import models

    real_build = models.build_model

    def build_with_nan_logits(workload, units):  # a NaN loss from the first step
        model = real_build(workload, units)
        bias = model.layers[-2].bias
        bias.assign(np.full(bias.shape, np.nan, dtype="float32"))
        return model

    models.build_model = build_with_nan_logits
    try:
        with pytest.raises(CellDiverged) as raised:
            run(spec("float32", "fit", max_steps=4))
    finally:
        models.build_model = real_build
    assert raised.value.divergence.signal == "non_finite_loss"
    assert raised.value.divergence.step == 1
    assert str(raised.value) == "non-finite loss (nan) at step 1"
