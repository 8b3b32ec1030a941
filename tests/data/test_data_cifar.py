"""CIFAR-10: binary batches, python batches (genuine Python 2 pickles and Python 3 ones,
numpy 1.x and 2.x module names), both tar.gz archives, and their errors."""

from __future__ import annotations

import pickle
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import DataError
from mpbench.data.locations import sha256_file

BIN_FILES = [f"{n}.bin" for n in formats.CIFAR_TRAIN] + ["test_batch.bin"]
PY_FILES = [*formats.CIFAR_TRAIN, "test_batch"]


def assert_same(loaded: data.LoadedDataset, split: formats.Split) -> None:
    for key in ("x_train", "y_train", "x_test", "y_test"):
        got, want = getattr(loaded, key), getattr(split, key)
        assert got.dtype == np.uint8, key
        np.testing.assert_array_equal(got, want, err_msg=key)
    assert loaded.x_train.shape[1:] == (32, 32, 3)
    assert loaded.x_train.flags.c_contiguous


def load_real(where: Path) -> data.LoadedDataset:
    return data.load("cifar10", mode="real", data_dir=where, allow_download=False)


def test_planes_are_red_green_blue() -> None:
    """Guard the writer: a pure-red image is 1024 x 255, then 2048 x 0."""
    image = np.zeros((1, 32, 32, 3), np.uint8)
    image[..., 0] = 255
    record = formats.cifar_bin_bytes(image, np.array([7]))
    assert len(record) == 3073
    assert record[0] == 7
    assert record[1:1025] == b"\xff" * 1024 and record[1025:] == b"\x00" * 2048


def test_binary_batches_round_trip(tmp_path: Path) -> None:
    split = formats.random_cifar()
    folder = formats.write_cifar_bin(tmp_path / "in", split)
    loaded = load_real(tmp_path / "in")
    assert_same(loaded, split)
    assert loaded.describe()["name"] == "cifar10"
    assert loaded.origin == str(folder)
    assert loaded.sha256 == {n: sha256_file(folder / n) for n in BIN_FILES}


def test_data_dir_may_be_the_batch_folder(tmp_path: Path) -> None:
    split = formats.random_cifar(seed=4)
    folder = formats.write_cifar_bin(tmp_path, split)
    assert_same(load_real(folder), split)


@pytest.mark.parametrize(
    "style",
    [
        {"style": "py2"},  # the genuine files: Python 2 cPickle, numpy.core names
        {"style": "py3", "protocol": 2, "numpy_core": "numpy.core"},
        {"style": "py3", "protocol": 2, "numpy_core": "numpy._core"},
        {"style": "py3", "protocol": 4, "numpy_core": "numpy.core", "labels_as_array": True},
        {"style": "py3", "protocol": 5, "numpy_core": "numpy._core", "labels_as_array": True},
    ],
    ids=["py2-genuine", "py3-p2-core", "py3-p2-_core", "py3-p4-core-arrays", "py3-p5-_core"],
)
def test_python_batches_round_trip(tmp_path: Path, style: dict[str, object]) -> None:
    split = formats.random_cifar(seed=5)
    folder = formats.write_cifar_py(tmp_path / "in", split, **style)
    loaded = load_real(tmp_path / "in")
    assert_same(loaded, split)
    assert loaded.origin == str(folder)
    assert loaded.sha256 == {n: sha256_file(folder / n) for n in PY_FILES}


def test_binary_preferred_over_python_batches(tmp_path: Path) -> None:
    binary, python = formats.random_cifar(seed=1), formats.random_cifar(seed=2)
    formats.write_cifar_bin(tmp_path, binary)
    formats.write_cifar_py(tmp_path, python)
    assert_same(load_real(tmp_path), binary)


@pytest.mark.parametrize("kind", ["binary", "python"])
def test_archive_round_trip(tmp_path: Path, homes, kind: str) -> None:
    split = formats.random_cifar(seed=6)
    staging = tmp_path / "staging"
    if kind == "binary":
        folder = formats.write_cifar_bin(staging, split)
    else:
        folder = formats.write_cifar_py(staging, split)
    archive = formats.tar_gz(tmp_path / "in" / f"cifar-10-{kind}.tar.gz", folder)
    loaded = load_real(tmp_path / "in")
    assert_same(loaded, split)
    digest = sha256_file(archive)
    assert loaded.origin == str(archive)
    extracted = homes.datasets / "extracted" / digest[:16] / folder.name
    members = BIN_FILES if kind == "binary" else PY_FILES
    assert loaded.sha256 == {
        archive.name: digest,
        **{f"{folder.name}/{n}": sha256_file(extracted / n) for n in members},
    }
    # Extracted once: a second load reuses the folder (same inode) instead of re-extracting.
    inode = (extracted / members[0]).stat().st_ino
    assert_same(load_real(archive), split)
    assert (extracted / members[0]).stat().st_ino == inode


def test_keras3_cache_layout(homes) -> None:
    split = formats.random_cifar(seed=7)
    formats.write_cifar_py(homes.keras / "cifar-10-batches-py-target", split)
    loaded = data.load("cifar10", mode="real", allow_download=False)
    assert_same(loaded, split)
    assert loaded.origin == str(homes.keras / "cifar-10-batches-py-target" / "cifar-10-batches-py")


def test_binary_batch_not_whole_records(tmp_path: Path) -> None:
    folder = formats.write_cifar_bin(tmp_path, formats.random_cifar())
    path = folder / "data_batch_3.bin"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(DataError, match=r"data_batch_3.bin: 9218 bytes is not a whole number"):
        load_real(tmp_path)


def test_binary_label_out_of_range(tmp_path: Path) -> None:
    split = formats.random_cifar()
    folder = formats.write_cifar_bin(tmp_path, split)
    (folder / "test_batch.bin").write_bytes(
        formats.cifar_bin_bytes(split.x_test, np.array([1, 2, 10, 3]))
    )
    with pytest.raises(DataError, match=r"test_batch.bin: label 10 out of range; expected 0..9"):
        load_real(tmp_path)


def test_missing_batch(tmp_path: Path) -> None:
    folder = formats.write_cifar_bin(tmp_path, formats.random_cifar())
    (folder / "data_batch_5.bin").unlink()
    with pytest.raises(DataError, match=r"CIFAR-10 batch data_batch_5.bin is missing"):
        load_real(tmp_path)


def test_python_batch_label_out_of_range(tmp_path: Path) -> None:
    split = formats.random_cifar()
    folder = formats.write_cifar_py(tmp_path, split)
    raw = formats.py_batch_bytes(split.x_test, np.array([0, 99, 1, 2]), b"testing batch 1 of 1")
    (folder / "test_batch").write_bytes(raw)
    with pytest.raises(DataError, match=r"test_batch: label 99 out of range"):
        load_real(tmp_path)


def test_python_batch_without_labels(tmp_path: Path) -> None:
    folder = formats.write_cifar_py(tmp_path, formats.random_cifar())
    (folder / "data_batch_2").write_bytes(
        pickle.dumps({b"data": np.zeros((3, 3072), np.uint8)}, protocol=2)
    )
    with pytest.raises(DataError, match=r"data_batch_2: no 'labels' entry"):
        load_real(tmp_path)


def test_python_batch_wrong_pixel_count(tmp_path: Path) -> None:
    folder = formats.write_cifar_py(tmp_path, formats.random_cifar())
    batch = {b"data": np.zeros((3, 1024), np.uint8), b"labels": [0, 1, 2]}
    (folder / "data_batch_1").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DataError, match=r"data_batch_1: 'data' has shape \(3, 1024\)"):
        load_real(tmp_path)


def test_python_batch_truncated(tmp_path: Path) -> None:
    folder = formats.write_cifar_py(tmp_path, formats.random_cifar())
    path = folder / "data_batch_4"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match=r"data_batch_4: not a readable pickle"):
        load_real(tmp_path)


def test_corrupt_archive(tmp_path: Path) -> None:
    folder = formats.write_cifar_bin(tmp_path / "staging", formats.random_cifar())
    archive = formats.tar_gz(tmp_path / "in" / "cifar-10-binary.tar.gz", folder)
    archive.write_bytes(archive.read_bytes()[:-300])
    with pytest.raises(DataError, match=r"cifar-10-binary.tar.gz: not a readable tar archive"):
        load_real(tmp_path / "in")


def test_archive_without_batches(tmp_path: Path) -> None:
    other = tmp_path / "staging" / "something-else"
    other.mkdir(parents=True)
    (other / "readme.txt").write_text("hello")
    formats.tar_gz(tmp_path / "in" / "cifar-10-python.tar.gz", other)
    with pytest.raises(DataError, match=r"holds neither cifar-10-batches-bin/ nor"):
        load_real(tmp_path / "in")
