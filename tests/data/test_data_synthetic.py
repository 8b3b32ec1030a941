"""Synthetic stand-ins: real shapes and ranges, deterministic, learnable but not trivial."""

from __future__ import annotations

import numpy as np
import pytest

from mpbench import data
from mpbench.data import synthetic


def pooled(images: np.ndarray, k: int) -> np.ndarray:
    """k x k average pooling, flattened: ~200 features keep the regression tiny and fast."""
    x = images if images.ndim == 4 else images[..., None]
    n, h, w, c = x.shape
    return x.reshape(n, h // k, k, w // k, k, c).mean(axis=(2, 4)).reshape(n, -1) / 255.0


def softmax_regression(
    train: np.ndarray, labels: np.ndarray, test: np.ndarray, steps: int = 150, lr: float = 2.0
) -> np.ndarray:
    """A tiny full-batch softmax (multinomial logistic) regression in numpy; returns the
    predicted test labels."""
    mean = train.mean(axis=0)
    train, test = (train - mean).astype(np.float32), (test - mean).astype(np.float32)
    weights = np.zeros((train.shape[1], 10), np.float32)
    bias = np.zeros(10, np.float32)
    onehot = np.eye(10, dtype=np.float32)[labels]
    for _ in range(steps):
        logits = train @ weights + bias
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        grad = (probs - onehot) / len(train)
        weights -= lr * train.T @ grad
        bias -= lr * grad.sum(axis=0)
    return (test @ weights + bias).argmax(axis=1)


@pytest.mark.parametrize("dataset, shape", [("mnist", (28, 28)), ("cifar10", (32, 32, 3))])
def test_default_sizes_shapes_and_ranges(dataset: str, shape: tuple[int, ...]) -> None:
    loaded = data.load(dataset, mode="synthetic", seed=3)
    train, test = data.REAL_SIZES[dataset]
    assert loaded.x_train.shape == (train, *shape) and loaded.x_test.shape == (test, *shape)
    assert loaded.x_train.dtype == np.uint8 and loaded.y_train.dtype == np.uint8
    assert loaded.y_train.shape == (train,) and loaded.y_test.shape == (test,)
    # Full use of the uint8 range, dark and bright pixels both present.
    assert loaded.x_train.min() <= 5 and loaded.x_train.max() >= 250
    # Balanced classes, as in the real test sets.
    assert np.bincount(loaded.y_test, minlength=10).tolist() == [test // 10] * 10
    assert loaded.describe()["name"] == f"synthetic-{dataset}"
    assert loaded.describe()["origin"] is None


def test_deterministic_for_a_seed() -> None:
    a = synthetic.generate("cifar10", seed=7, train_size=200, test_size=50)
    b = synthetic.generate("cifar10", seed=7, train_size=200, test_size=50)
    c = synthetic.generate("cifar10", seed=8, train_size=200, test_size=50)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key))
    assert not np.array_equal(a.x_train, c.x_train)


def test_mnist_and_cifar_differ_for_the_same_seed() -> None:
    mnist = synthetic.generate("mnist", seed=0, train_size=100, test_size=10)
    assert mnist.x_train.shape == (100, 28, 28)
    # MNIST-like: the border is darker than the centre.
    assert mnist.x_train[:, :3, :].mean() < mnist.x_train[:, 10:18, 10:18].mean()


@pytest.mark.parametrize("dataset, pool", [("mnist", 2), ("cifar10", 4)])
def test_learnable_far_above_chance_but_not_trivial(dataset: str, pool: int) -> None:
    loaded = synthetic.generate(dataset, seed=1, train_size=1000, test_size=500)
    train, test = pooled(loaded.x_train, pool), pooled(loaded.x_test, pool)
    predicted = softmax_regression(train, loaded.y_train, test)
    accuracy = float((predicted == loaded.y_test).mean())
    assert accuracy > 0.6, accuracy  # chance is 0.1
    assert accuracy < 0.99, accuracy  # some samples are blends that lean to another class

    # Control: the same model on shuffled labels learns nothing that transfers.
    shuffled = np.random.default_rng(0).permutation(loaded.y_train)
    predicted = softmax_regression(train, shuffled, test)
    assert float((predicted == loaded.y_test).mean()) < 0.25
