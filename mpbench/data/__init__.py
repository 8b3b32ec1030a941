"""Datasets for the reference workloads: real MNIST / CIFAR-10 or seeded synthetic stand-ins.

Framework-free: `load` returns numpy arrays (uint8 images, uint8 labels, the official
train/test split) and a description of where they came from (DESIGN.md §6).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from mpbench.data import cifar, mnist, synthetic
from mpbench.data.dataset import DATASETS, IMAGE_SHAPES, LABELS, REAL_SIZES, LoadedDataset
from mpbench.data.download import DownloadFailed, fetch_dataset, source
from mpbench.data.errors import (
    ChecksumMismatch,
    DataError,
    DataNotFound,
    UnsafeArchive,
    UnsafeData,
    UnsafePickle,
)
from mpbench.data.locate import CIFAR_ARCHIVE, MNIST_NPZ, Found, Place, find, places
from mpbench.data.locations import cache_dir, datasets_dir
from mpbench.errors import unknown_choice

MODES = ("auto", "real", "synthetic")

__all__ = [
    "DATASETS",
    "IMAGE_SHAPES",
    "MODES",
    "REAL_SIZES",
    "ChecksumMismatch",
    "DataError",
    "DataNotFound",
    "LoadedDataset",
    "UnsafeArchive",
    "UnsafeData",
    "UnsafePickle",
    "cache_dir",
    "datasets_dir",
    "find",
    "load",
    "read_found",
    "source",
]


def load(
    dataset: str,
    mode: str = "auto",
    data_dir: str | Path | None = None,
    allow_download: bool = True,
    seed: int = 0,
    synthetic_train_size: int | None = None,
    synthetic_test_size: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> LoadedDataset:
    """Real data if found (or fetched); synthetic when asked, or in `auto` mode when no
    real copy can be had (with a warning). `real` never falls back."""
    if dataset not in DATASETS:
        raise unknown_choice("dataset", dataset, DATASETS)
    if mode not in MODES:
        raise unknown_choice("data mode", mode, MODES)
    warn = warn or _warn_stderr

    def stand_in() -> LoadedDataset:
        return synthetic.generate(dataset, seed, synthetic_train_size, synthetic_test_size)

    if mode == "synthetic":
        return stand_in()
    found = find(dataset, data_dir)
    if found is not None:
        return read_found(found)
    problem = "downloads are disabled"
    if allow_download:
        try:
            path = fetch_dataset(dataset, notify=warn)
        except DownloadFailed as exc:
            problem = str(exc)
        else:
            fmt = MNIST_NPZ if dataset == "mnist" else CIFAR_ARCHIVE
            return read_found(Found(dataset, fmt, path, Place("mpbench cache", path.parent)))
    searched = ", ".join(str(place.path) for place in places(data_dir))
    name = LABELS[dataset]
    if mode == "real":
        raise DataNotFound(
            f"no {name} data found in {searched}, and {problem}; fetch it on a machine with "
            "network access (see `mpbench data`) or use --data synthetic"
        )
    warn(
        f"no {name} data found in {searched}, and {problem}: using synthetic-{dataset}, "
        f"a seeded stand-in; its accuracy is not {name} accuracy"
    )
    return stand_in()


def read_found(found: Found) -> LoadedDataset:
    """Read and validate one located copy."""
    return mnist.read(found) if found.dataset == "mnist" else cifar.read(found)


def _warn_stderr(message: str) -> None:
    print(f"mpbench: warning: {message}", file=sys.stderr)
