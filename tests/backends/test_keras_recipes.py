"""Training recipes in Keras 3, in-process on tiny models: the static loss scale that skips,
and gradient accumulation (docs/recipes.md)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

from mpbench.backends.tensorflow.loss_scale import StaticLossScaleOptimizer  # noqa: E402
from mpbench.backends.tensorflow.models import build_optimizer  # noqa: E402
from mpbench.workloads.spec import OptimizerSpec  # noqa: E402


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def _model(seed: int = 0) -> keras.Sequential:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(4),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.random((n, 8), dtype=np.float32), rng.integers(0, 4, n)


def _static(scale: float) -> tuple[keras.Sequential, StaticLossScaleOptimizer]:
    model = _model()
    optimizer = StaticLossScaleOptimizer(keras.optimizers.RMSprop(1e-3), scale)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    assert model.optimizer is optimizer  # compile() did not wrap it in a dynamic one
    return model, optimizer


def test_static_scale_skips_non_finite_steps_instead_of_applying_them(mixed_float16):
    model, optimizer = _static(1e30)
    x, y = _data(32)
    model.train_on_batch(x, y)  # builds the variables
    before = [w.copy() for w in model.get_weights()]
    for _ in range(3):
        model.train_on_batch(x, y)
    after = model.get_weights()
    assert all(np.isfinite(w).all() for w in after)  # no NaN let through
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert float(optimizer.dynamic_scale) == pytest.approx(1e30, rel=1e-6)  # never halved
    assert int(optimizer.inner_optimizer.iterations) == 0  # every step skipped, countably


def test_static_scale_that_fits_trains_at_a_constant_scale(mixed_float16):
    model, optimizer = _static(1024.0)
    x, y = _data(32)
    model.train_on_batch(x, y)
    before = [w.copy() for w in model.get_weights()]
    for _ in range(3):
        model.train_on_batch(x, y)
    assert not all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
    assert float(optimizer.dynamic_scale) == 1024.0
    assert int(optimizer.inner_optimizer.iterations) == 4


def test_four_accumulated_micro_batches_equal_one_batch_of_four_times_the_size():
    sgd = OptimizerSpec("sgd", 0.1)
    big, small = _model(), _model()
    big.compile(optimizer=build_optimizer(sgd), loss="sparse_categorical_crossentropy")
    small.compile(
        optimizer=build_optimizer(sgd, accumulate=4), loss="sparse_categorical_crossentropy"
    )
    x, y = _data(64)
    for _ in range(2):
        big.train_on_batch(x, y)
        for i in range(0, 64, 16):
            small.train_on_batch(x[i : i + 16], y[i : i + 16])
    assert int(small.optimizer.iterations) == 2  # one update per window of 4
    for a, b in zip(big.get_weights(), small.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_static_scale_on_another_keras_backend_is_a_skipped_cell(monkeypatch) -> None:
    """Keras' stateless path (JAX) would still halve the scale: refused, as `skipped`."""
    from mpbench.backends.base import Unsupported

    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(Unsupported, match="needs Keras' TensorFlow backend, not jax"):
        StaticLossScaleOptimizer(keras.optimizers.RMSprop(1e-3), 1024.0)
