"""Per-step numerics: the bounded log, and the gradient health read from real torch and
TensorFlow gradients."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest

from mpbench.results.sidefile import NUMERICS_COLUMNS as COLUMNS
from mpbench.telemetry.numerics import NumericsLog, torch_grad_health

# --- NumericsLog ---------------------------------------------------------------------------


def test_every_step_is_kept_while_there_is_room():
    log = NumericsLog(max_points=10)
    for step in range(1, 6):
        log.record(step, loss=1.0 / step, loss_scale=65536.0, skipped=step == 2)
    columns = log.columns()
    assert set(columns) == set(COLUMNS)
    assert columns["step"] == [1, 2, 3, 4, 5]
    assert columns["skipped"] == [False, True, False, False, False]
    assert columns["grad_norm"] == [None] * 5  # not measured
    assert log.stride == 1


def test_a_long_run_stays_bounded_evenly_spaced_and_counts_exactly():
    log = NumericsLog(max_points=1000)
    steps = 100_000
    for step in range(1, steps + 1):
        bad = step in (70_001, 70_002)
        log.record(
            step,
            loss=math.nan if bad else 1.0,
            loss_scale=2.0 ** (16 - step // 20_000),
            skipped=step % 7 == 0 or bad,
            grad_norm=math.inf if bad else 0.5,
            nonfinite_grads=3 if bad else 0,
        )
    columns = log.columns()
    stored = len(columns["step"])
    assert 500 <= stored <= 1000
    assert len({len(values) for values in columns.values()}) == 1
    gaps = set(np.diff(columns["step"]).tolist())
    assert gaps == {log.stride}  # evenly spaced, from the first step on
    assert columns["step"][0] == 1
    assert columns["step"][-1] > steps - log.stride  # reaches the end of the run
    totals = log.totals()
    assert totals["total_steps"] == steps and totals["last_step"] == steps
    assert totals["skipped_steps"] == steps // 7 + 2  # exact, whatever was dropped
    assert totals["nonfinite_steps"] == 2 and totals["first_nonfinite_step"] == 70_001
    assert totals["nonfinite_loss_steps"] == 2 and totals["nonfinite_grad_steps"] == 2
    assert totals["grad_checked_steps"] == steps
    assert totals["min_loss_scale"] == 2.0**11
    json.dumps(log.to_dict(), allow_nan=False)  # strict JSON


def test_stride_doubling_keeps_every_second_point():
    log = NumericsLog(max_points=4)
    for step in range(10):
        log.record(step, loss=float(step))
    # calls 0..9: stride 1 -> 2 at call 4 -> 4 at call 8; kept: multiples of 4
    assert log.stride == 4
    assert log.columns()["step"] == [0, 4, 8]
    assert log.columns()["loss"] == [0.0, 4.0, 8.0]


def test_every_sets_the_first_stride_and_due_tells_which_steps_are_kept():
    log = NumericsLog(max_points=100, every=5)
    kept = []
    for step in range(1, 21):
        if log.due():
            kept.append(step)
        log.record(step, loss=1.0)
    assert kept == log.columns()["step"] == [1, 6, 11, 16]


def test_non_finite_values_are_stored_as_null_and_flagged():
    log = NumericsLog()
    log.record(1, loss=2.3, grad_norm=1.5, nonfinite_grads=0, skipped=False)
    log.record(2, loss=math.inf, loss_scale=math.nan, grad_norm=math.nan, nonfinite_grads=7)
    columns = log.columns()
    assert columns["loss"] == [2.3, None] and columns["grad_norm"] == [1.5, None]
    assert columns["loss_scale"] == [None, None]
    assert columns["nonfinite_grads"] == [0, 7]
    assert columns["skipped"] == [False, None]
    assert log.first_nonfinite_step == 2
    assert json.loads(json.dumps(log.to_dict(), allow_nan=False))["stride"] == 1


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        NumericsLog(max_points=1)
    with pytest.raises(ValueError):
        NumericsLog(every=0)


# --- torch gradient health -----------------------------------------------------------------


@pytest.fixture
def torch():
    """torch on one thread: these tensors are tiny, and another busy process on the machine
    cannot then stall each kernel's thread barrier."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(before)


def _trained_grads(torch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    unused = torch.nn.Linear(3, 3)  # its parameters have no gradient
    x, y = torch.randn(32, 20), torch.randint(0, 5, (32,))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return [*model.parameters(), *unused.parameters()]


def test_finite_gradients_give_the_global_norm_and_no_bad_elements(torch):
    params = _trained_grads(torch)
    norm, bad = torch_grad_health(params)
    grads = [p.grad.numpy() for p in params if p.grad is not None]
    expected = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in grads))
    assert bad == 0
    assert norm == pytest.approx(expected, rel=1e-5)
    # what clip_grad_norm_ reports (it returns the total norm before clipping)
    clipped = torch.nn.utils.clip_grad_norm_(params, max_norm=math.inf)
    assert norm == pytest.approx(clipped.item(), rel=1e-6)


def test_the_scale_the_gradients_carry_is_divided_out(torch):
    params = _trained_grads(torch)
    plain, _ = torch_grad_health(params)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(1024.0)
    scaled, bad = torch_grad_health(params, scale=1024.0)
    assert bad == 0 and scaled == pytest.approx(plain, rel=1e-6)
    with pytest.raises(ValueError):
        torch_grad_health(params, scale=0.0)


def test_non_finite_gradients_give_no_norm_and_their_count(torch):
    params = _trained_grads(torch)
    params[0].grad[0, :3] = math.inf
    params[2].grad[1, 1] = math.nan
    norm, bad = torch_grad_health(params, scale=65536.0)
    assert norm is None and bad == 4


def test_float16_gradients_are_summed_without_overflowing(torch):
    params = [torch.nn.Parameter(torch.zeros(n, dtype=torch.float16)) for n in (300, 40)]
    for p in params:
        p.grad = torch.full_like(p, 200.0)  # squares overflow float16 (65504), the norm must not
    norm, bad = torch_grad_health(params)
    assert bad == 0 and norm == pytest.approx(200.0 * math.sqrt(340), rel=1e-3)


def test_no_gradients_at_all(torch):
    model = torch.nn.Linear(3, 3)
    assert torch_grad_health(model.parameters()) == (0.0, 0)


def test_gradients_after_a_grad_scaler_step_are_already_unscaled(torch):
    """Where the backend calls it: after train_step returns, scaler.step has unscaled the
    gradients in place (non-fused optimizer), so no scale is passed."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=4096.0)
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    reference = torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    norm, bad = torch_grad_health(model.parameters())
    expected = torch.linalg.vector_norm(torch.cat([g.flatten() for g in reference])).item()
    assert bad == 0 and norm == pytest.approx(expected, rel=1e-5)
    # An overflowing step: scaler.step skipped it, and the gradients it saw are still there.
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss * math.inf).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 2048.0  # halved: the step was skipped
    assert torch_grad_health(model.parameters()) == (None, 8 * 4 + 4)


def test_finite_elements_whose_norm_overflows_give_no_norm_and_no_count(torch):
    params = _trained_grads(torch)
    params[0].grad.fill_(1e30)  # finite, but the squares overflow float32
    assert torch_grad_health(params) == (None, 0)


# --- TensorFlow gradient health ------------------------------------------------------------


@pytest.mark.tensorflow
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="no TensorFlow")
def test_tensorflow_gradients_in_graph_and_on_the_host():
    # One test pays TensorFlow's import (seconds): every TF check is here.
    import tensorflow as tf

    from mpbench.telemetry.numerics import tf_grad_health, tf_grad_health_tensors

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((20, 16)).astype(np.float32), rng.standard_normal(16)]
    expected = math.sqrt(sum(float((a.astype(np.float64) ** 2).sum()) for a in arrays))
    grads = [tf.constant(arrays[0]), tf.constant(arrays[1], tf.float16), None]

    norm, bad = tf_grad_health(grads)
    assert bad == 0 and norm == pytest.approx(expected, rel=1e-3)  # one float16 tensor

    scaled = [g * 512.0 for g in grads if g is not None]
    norm, bad = tf_grad_health(scaled, scale=512.0)
    assert bad == 0 and norm == pytest.approx(expected, rel=1e-3)

    @tf.function
    def in_graph(a, b):
        return tf_grad_health_tensors([a, b])

    poisoned = arrays[0].copy()
    poisoned[0, :2] = np.inf
    poisoned[3, 3] = np.nan
    norm_t, bad_t = in_graph(tf.constant(poisoned), tf.constant(arrays[1], tf.float32))
    assert norm_t.dtype == tf.float32 and bad_t.dtype == tf.int64
    assert not math.isfinite(float(norm_t)) and int(bad_t) == 3
    assert tf_grad_health([tf.constant(poisoned)]) == (None, 3)

    sparse = tf.IndexedSlices(tf.constant([[3.0, 4.0]]), tf.constant([1]), tf.constant([4, 2]))
    assert tf_grad_health([sparse]) == (pytest.approx(5.0), 0)
    assert tf_grad_health([None]) == (0.0, 0)
