"""Deciding which data a run uses: the one locating step behind `load` (in every cell) and
`check_data` (once, in the parent, before a run directory exists).

Both must reach the same answer, so both go through `resolve`: validate the request, then
in `real`/`auto` mode find a copy on disk in the documented order, else download one into
the cache when allowed, else refuse (`real`) or fall back to the synthetic stand-in
(`auto`, with the warning the caller passes on). Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mpbench.data import cifar, mnist, synthetic
from mpbench.data.dataset import DATASETS, LABELS, LoadedDataset
from mpbench.data.download import DownloadFailed, fetch_dataset
from mpbench.data.errors import DataNotFound, one_line
from mpbench.data.locate import CIFAR_ARCHIVE, MNIST_NPZ, Found, Place, find, places
from mpbench.errors import InvalidInput, unknown_choice

MODES = ("auto", "real", "synthetic")


@dataclass(frozen=True)
class Resolved:
    found: Found | None  # the real copy to read; None: the synthetic stand-in
    synthetic_sizes: tuple[int, int]  # (train, test) the stand-in would have; validated
    warning: str | None  # why `auto` fell back to synthetic data


def resolve(
    dataset: str,
    mode: str,
    data_dir: str | Path | None,
    allow_download: bool,
    seed: int,
    synthetic_train_size: int | None,
    synthetic_test_size: int | None,
    notify: Callable[[str], None] | None = None,
) -> Resolved:
    """Where the data comes from, or InvalidInput (one line). `notify` hears the one line
    a download announces; it is the only thing said before returning."""
    if dataset not in DATASETS:
        raise unknown_choice("dataset", dataset, DATASETS)
    if mode not in MODES:
        raise unknown_choice("data mode", mode, MODES)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise InvalidInput(f"seed must be an integer, got {seed!r}")
    # Checked in every mode: a bad size in the config is bad input even when real data
    # happens to be found today.
    sizes = synthetic.sizes(dataset, synthetic_train_size, synthetic_test_size)
    if mode == "synthetic":
        return Resolved(None, sizes, None)
    found = find(dataset, data_dir)
    if found is not None:
        return Resolved(found, sizes, None)
    problem = "downloads are disabled"
    if allow_download:
        try:
            path = fetch_dataset(dataset, notify=notify)
        except DownloadFailed as exc:
            problem = str(exc)
        else:
            fmt = MNIST_NPZ if dataset == "mnist" else CIFAR_ARCHIVE
            fetched = Found(dataset, fmt, path, Place("mpbench cache", path.parent))
            return Resolved(fetched, sizes, None)
    searched = ", ".join(str(place.path) for place in places(data_dir))
    name = LABELS[dataset]
    if mode == "real":
        raise DataNotFound(
            f"no {name} data found in {searched}, and {problem}; fetch it on a machine with "
            "network access (see `mpbench data`) or use --data synthetic"
        )
    warning = (
        f"no {name} data found in {searched}, and {problem}: using synthetic-{dataset}, "
        f"a seeded stand-in; its accuracy is not {name} accuracy"
    )
    return Resolved(None, sizes, one_line(warning))


def read_found(found: Found) -> LoadedDataset:
    """Read and validate one located copy."""
    return mnist.read(found) if found.dataset == "mnist" else cifar.read(found)
