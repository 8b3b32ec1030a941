"""Datasets for the reference workloads: real MNIST / CIFAR-10 or seeded synthetic stand-ins.

Framework-free: `load` returns numpy arrays (uint8 images, uint8 labels, the official
train/test split) and a description of where they came from (docs/data.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from mpbench.data import synthetic
from mpbench.data.check import DataCheck, check_data
from mpbench.data.dataset import DATASETS, IMAGE_SHAPES, REAL_SIZES, LoadedDataset
from mpbench.data.download import source
from mpbench.data.errors import (
    ChecksumMismatch,
    DataError,
    DataNotFound,
    UnsafeArchive,
    UnsafeData,
    UnsafePickle,
)
from mpbench.data.locate import find
from mpbench.data.locations import cache_dir, datasets_dir
from mpbench.data.resolve import MODES, read_found, resolve
from mpbench.data.text import TEXT_DATASETS, load_text

__all__ = [
    "DATASETS",
    "IMAGE_SHAPES",
    "MODES",
    "REAL_SIZES",
    "TEXT_DATASETS",
    "ChecksumMismatch",
    "DataCheck",
    "DataError",
    "DataNotFound",
    "LoadedDataset",
    "UnsafeArchive",
    "UnsafeData",
    "UnsafePickle",
    "cache_dir",
    "check_data",
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
    seq_len: int | None = None,
) -> LoadedDataset:
    """Real data if found (or fetched); synthetic when asked, or in `auto` mode when no
    real copy can be had (with a warning). `real` never falls back. The same locating
    step as `check_data`, so a run checked in the parent loads the same data here.

    A text dataset (TEXT_DATASETS) comes as windows of `seq_len` byte tokens and the
    windows of the next bytes (mpbench.data.text); its sizes are in windows."""
    warn = warn or _warn_stderr
    if dataset in TEXT_DATASETS:
        loaded, warning = load_text(
            dataset, mode, data_dir, seed, seq_len, synthetic_train_size, synthetic_test_size
        )
        if warning:
            warn(warning)
        return loaded
    resolved = resolve(
        dataset,
        mode,
        data_dir,
        allow_download,
        seed,
        synthetic_train_size,
        synthetic_test_size,
        notify=warn,
    )
    if resolved.found is not None:
        return read_found(resolved.found)
    if resolved.warning:
        warn(resolved.warning)
    train, test = resolved.synthetic_sizes
    return synthetic.generate(dataset, seed, train, test)


def _warn_stderr(message: str) -> None:
    print(f"mpbench: warning: {message}", file=sys.stderr)
