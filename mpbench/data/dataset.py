"""The loaded dataset handed to the backends, and the checks every real file goes through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mpbench.data.errors import DataError

DATASETS = ("mnist", "cifar10")
NUM_CLASSES = 10
# Per-image shape as Keras returns it: MNIST (28, 28), CIFAR-10 channels-last (32, 32, 3).
IMAGE_SHAPES: dict[str, tuple[int, ...]] = {"mnist": (28, 28), "cifar10": (32, 32, 3)}
# The official train/test split sizes.
REAL_SIZES: dict[str, tuple[int, int]] = {"mnist": (60000, 10000), "cifar10": (50000, 10000)}
LABELS = {"mnist": "MNIST", "cifar10": "CIFAR-10"}


@dataclass
class LoadedDataset:
    """Images as uint8 (N, *IMAGE_SHAPES[dataset]), labels as uint8 (N,) in 0..9, plus where
    they came from. `name` is "synthetic-<dataset>" for stand-in data, never the real name."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    name: str
    source: str  # "real" | "synthetic"
    origin: str | None = None  # file or folder read; None for synthetic
    sha256: dict[str, str] | None = None  # file name -> digest of each file read

    def describe(self) -> dict[str, Any]:
        """Exactly the fields of `mpbench.results.DataInfo`."""
        return {
            "name": self.name,
            "source": self.source,
            "origin": self.origin,
            "sha256": dict(self.sha256) if self.sha256 is not None else None,
            "train_size": len(self.x_train),
            "test_size": len(self.x_test),
        }


def check_images(images: Any, image_shape: tuple[int, ...], where: str) -> np.ndarray:
    """Images must be a non-empty uint8 array of (N, *image_shape)."""
    if not isinstance(images, np.ndarray):
        raise DataError(f"{where}: images are a {type(images).__name__}, expected a numpy array")
    if images.dtype != np.uint8:
        raise DataError(f"{where}: images have dtype {images.dtype}, expected uint8")
    if images.ndim != 1 + len(image_shape) or tuple(images.shape[1:]) != image_shape:
        expected = "(N, " + ", ".join(str(d) for d in image_shape) + ")"
        raise DataError(f"{where}: images have shape {images.shape}, expected {expected}")
    if len(images) == 0:
        raise DataError(f"{where}: holds no images")
    return images


def check_labels(labels: Any, count: int, where: str) -> np.ndarray:
    """Labels must be `count` integers in 0..9; returned as a uint8 (N,) array."""
    if isinstance(labels, list | tuple):
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in labels):
            raise DataError(f"{where}: labels must be integers")
        # Range first: a Python int beyond int64 would make numpy raise OverflowError.
        bad = next((int(v) for v in labels if not 0 <= v < NUM_CLASSES), None)
        if bad is not None:
            # str() of a hostile int with thousands of digits raises ValueError: abbreviate.
            shown = str(bad) if bad.bit_length() <= 1000 else f"of {bad.bit_length()} bits"
            raise DataError(f"{where}: label {shown} out of range; expected 0..{NUM_CLASSES - 1}")
        labels = np.asarray(labels, dtype=np.int64)
    if not isinstance(labels, np.ndarray):
        raise DataError(f"{where}: labels are a {type(labels).__name__}, expected integers")
    if labels.dtype.kind not in "iu":
        raise DataError(f"{where}: labels have dtype {labels.dtype}, expected integers")
    if labels.ndim == 2 and labels.shape[1] == 1:  # Keras' (N, 1) layout
        labels = labels.reshape(-1)
    if labels.ndim != 1:
        raise DataError(f"{where}: labels have shape {labels.shape}, expected (N,)")
    if len(labels) != count:
        raise DataError(f"{where}: {len(labels)} labels for {count} images")
    if count and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        bad = labels[(labels < 0) | (labels >= NUM_CLASSES)][0]
        raise DataError(f"{where}: label {int(bad)} out of range; expected 0..{NUM_CLASSES - 1}")
    return labels.astype(np.uint8)
