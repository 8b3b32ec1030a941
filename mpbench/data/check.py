"""`check_data`: what `load` would give each cell, decided once in the parent.

`mpbench run` calls it once per dataset before it creates the run directory. Without it
a missing, corrupt or hostile data file would surface in every cell's child process as
an `error` record; with it the run is refused up front with one line naming the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mpbench.data.resolve import read_found, resolve
from mpbench.data.text import TEXT_DATASETS, read_text, resolve_text


@dataclass
class DataCheck:
    dataset: str  # "mnist", "cifar10" or "tinyshakespeare"
    source: str  # "real" or "synthetic"
    train_size: int  # samples (a text dataset: windows) in the training split cells use
    test_size: int
    origin: str | None  # the file/folder the real data comes from; None for synthetic
    warning: str | None  # e.g. auto mode fell back to synthetic: what load() warns


def check_data(
    dataset: str,
    mode: str,
    data_dir: str | Path | None,
    allow_download: bool,
    seed: int = 0,
    synthetic_train_size: int | None = None,
    synthetic_test_size: int | None = None,
    *,
    notify: Callable[[str], None] | None = None,
    seq_len: int | None = None,
) -> DataCheck:
    """Locate (downloading into the cache when allowed, so the cells find it there) and
    fully read and validate the real copy `load` would use; for synthetic data only
    validate the sizes. Raises InvalidInput (DataError, DataNotFound, ...) with one line.
    A text dataset is cut into windows of `seq_len` (its sizes are windows).

    Prints nothing: `warning` carries the fall-back message, and `notify` (silent by
    default) hears the line a download announces."""
    if dataset in TEXT_DATASETS:
        found, (train, test), warning = resolve_text(
            dataset, mode, data_dir, seq_len, synthetic_train_size, synthetic_test_size
        )
        if found is None:
            return DataCheck(dataset, "synthetic", train, test, None, warning)
        text = read_text(found, seq_len)
        return DataCheck(dataset, "real", len(text.x_train), len(text.x_test), text.origin, None)
    resolved = resolve(
        dataset,
        mode,
        data_dir,
        allow_download,
        seed,
        synthetic_train_size,
        synthetic_test_size,
        notify,
    )
    if resolved.found is None:
        train, test = resolved.synthetic_sizes
        return DataCheck(dataset, "synthetic", train, test, None, resolved.warning)
    # Read it all: an archive is extracted (and kept for the cells) only if it passes, and
    # every check `load` makes is made here, so a cell cannot fail where this passed.
    loaded = read_found(resolved.found)
    return DataCheck(dataset, "real", len(loaded.x_train), len(loaded.x_test), loaded.origin, None)
