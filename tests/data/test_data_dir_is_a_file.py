"""`--data-dir` may name the dataset file itself, or a batch folder: find, check_data and
load all accept it (docs/data.md, "Where mpbench looks")."""

from __future__ import annotations

from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import DataNotFound, check_data, find
from mpbench.data.locate import CIFAR_ARCHIVE, CIFAR_BIN, CIFAR_PY, MNIST_IDX, MNIST_NPZ


def _same(loaded: data.LoadedDataset, split: formats.Split) -> None:
    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(loaded, key), getattr(split, key), err_msg=key)


def _mnist(root: Path, layout: str, split: formats.Split) -> tuple[Path, str, Path]:
    """(what --data-dir names, the format found, the origin read)."""
    if layout == "npz file":
        path = formats.write_mnist_npz(root / "downloads" / "my-mnist.npz", split)
        return path, MNIST_NPZ, path
    folder = formats.write_mnist_idx(root / "idx", split, gz=layout == "idx.gz file")
    suffix = ".gz" if layout == "idx.gz file" else ""
    return folder / f"t10k-labels-idx1-ubyte{suffix}", MNIST_IDX, folder


def _cifar(root: Path, layout: str, split: formats.Split) -> tuple[Path, str, Path]:
    if layout == "bin folder":
        folder = formats.write_cifar_bin(root, split)
        return folder, CIFAR_BIN, folder
    if layout == "py folder":
        folder = formats.write_cifar_py(root, split)
        return folder, CIFAR_PY, folder
    if layout == "bin batch file":
        folder = formats.write_cifar_bin(root, split)
        return folder / "data_batch_3.bin", CIFAR_BIN, folder
    if layout == "py batch file":
        folder = formats.write_cifar_py(root, split)
        return folder / "test_batch", CIFAR_PY, folder
    name = {
        "python archive": "cifar-10-python.tar.gz",
        "binary archive": "cifar-10-binary.tar.gz",
        "keras 3 archive": "cifar-10-batches-py-target_archive",
        "renamed archive": "my-copy.tgz",
    }[layout]
    maker = formats.write_cifar_bin if layout == "binary archive" else formats.write_cifar_py
    archive = formats.tar_gz(root / "downloads" / name, maker(root / "staging", split))
    return archive, CIFAR_ARCHIVE, archive


@pytest.mark.parametrize("layout", ["npz file", "idx file", "idx.gz file"])
def test_mnist_file_as_data_dir(tmp_path: Path, layout: str) -> None:
    split = formats.random_mnist(seed=5)
    named, fmt, origin = _mnist(tmp_path, layout, split)
    found = find("mnist", named)
    assert found is not None and (found.format, found.path) == (fmt, origin)
    assert found.place.label == "data-dir"
    check = check_data("mnist", "real", named, allow_download=False)
    assert (check.source, check.origin, check.train_size, check.test_size) == (
        "real",
        str(origin),
        12,
        5,
    )
    loaded = data.load("mnist", mode="real", data_dir=str(named), allow_download=False)
    _same(loaded, split)
    assert loaded.origin == str(origin)


@pytest.mark.parametrize(
    "layout",
    [
        "bin folder",
        "py folder",
        "bin batch file",
        "py batch file",
        "python archive",
        "binary archive",
        "keras 3 archive",
        "renamed archive",
    ],
)
def test_cifar_file_or_folder_as_data_dir(tmp_path: Path, homes, layout: str) -> None:
    split = formats.random_cifar(seed=8, per_batch=2, test=3)
    named, fmt, origin = _cifar(tmp_path, layout, split)
    found = find("cifar10", named)
    assert found is not None and (found.format, found.path) == (fmt, origin)
    check = check_data("cifar10", "real", named, allow_download=False)
    assert (check.source, check.origin, check.train_size, check.test_size) == (
        "real",
        str(origin),
        10,
        3,
    )
    loaded = data.load("cifar10", mode="real", data_dir=named, allow_download=False)
    _same(loaded, split)
    assert loaded.origin == str(origin)


def test_file_of_the_other_dataset_falls_through_to_the_caches(tmp_path: Path, homes) -> None:
    """`--data-dir mnist.npz` with a CIFAR workload: not CIFAR data, so the caches are
    searched next, as for a folder without it."""
    npz = formats.write_mnist_npz(tmp_path / "mnist.npz", formats.random_mnist())
    with pytest.raises(DataNotFound, match=rf"no CIFAR-10 data found in {npz}, "):
        check_data("cifar10", "real", npz, allow_download=False)
    split = formats.random_cifar(seed=2)
    formats.write_cifar_bin(homes.datasets, split)
    check = check_data("cifar10", "real", npz, allow_download=False)
    assert check.origin == str(homes.datasets / "cifar-10-batches-bin")


def test_unrecognised_file_name_is_not_data(tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello")
    assert find("mnist", odd) is None and find("cifar10", odd) is None
    with pytest.raises(DataNotFound, match=rf"no MNIST data found in {odd}, "):
        check_data("mnist", "real", odd, allow_download=False)


def test_the_status_report_accepts_a_file(tmp_path: Path) -> None:
    from mpbench.data.status import collect_status

    npz = formats.write_mnist_npz(tmp_path / "mnist.npz", formats.random_mnist())
    mnist, cifar = collect_status(npz)
    assert (mnist.found, mnist.place, mnist.path) == (True, "data-dir", str(npz))
    assert cifar.found is False and cifar.searched[0] == str(npz)
