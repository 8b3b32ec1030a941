"""MNIST: mnist.npz and IDX files (raw, .gz, torchvision's MNIST/raw), and their errors."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import DataError, UnsafePickle
from mpbench.data.locations import sha256_file


def assert_same(loaded: data.LoadedDataset, split: formats.Split) -> None:
    for key in ("x_train", "y_train", "x_test", "y_test"):
        got, want = getattr(loaded, key), getattr(split, key)
        assert got.dtype == np.uint8, key
        np.testing.assert_array_equal(got, want, err_msg=key)
    assert loaded.x_train.shape[1:] == (28, 28)


def test_npz_round_trip(tmp_path: Path) -> None:
    split = formats.random_mnist()
    path = formats.write_mnist_npz(tmp_path / "in" / "mnist.npz", split)
    loaded = data.load("mnist", mode="real", data_dir=tmp_path / "in", allow_download=False)
    assert_same(loaded, split)
    assert loaded.describe() == {
        "name": "mnist",
        "source": "real",
        "origin": str(path),
        "sha256": {"mnist.npz": sha256_file(path)},
        "train_size": 12,
        "test_size": 5,
    }


def test_data_dir_may_name_the_npz_file(tmp_path: Path) -> None:
    split = formats.random_mnist(seed=3)
    path = formats.write_mnist_npz(tmp_path / "elsewhere.npz", split)
    assert_same(data.load("mnist", mode="real", data_dir=path, allow_download=False), split)


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_idx_round_trip(tmp_path: Path, gz: bool) -> None:
    split = formats.random_mnist(seed=1)
    folder = formats.write_mnist_idx(tmp_path / "idx", split, gz=gz)
    loaded = data.load("mnist", mode="real", data_dir=folder, allow_download=False)
    assert_same(loaded, split)
    suffix = ".gz" if gz else ""
    names = [f"{n}{suffix}" for n in formats.IDX_NAMES.values()]
    assert loaded.origin == str(folder)
    assert loaded.sha256 == {n: sha256_file(folder / n) for n in names}


def test_idx_in_torchvision_layout(tmp_path: Path) -> None:
    split = formats.random_mnist(seed=2)
    formats.write_mnist_idx(tmp_path / "root" / "MNIST" / "raw", split, gz=True)
    loaded = data.load("mnist", mode="real", data_dir=tmp_path / "root", allow_download=False)
    assert_same(loaded, split)
    assert loaded.origin == str(tmp_path / "root" / "MNIST" / "raw")


def _idx_folder(tmp_path: Path) -> Path:
    return formats.write_mnist_idx(tmp_path / "idx", formats.random_mnist())


def _load_idx(folder: Path) -> data.LoadedDataset:
    return data.load("mnist", mode="real", data_dir=folder, allow_download=False)


def test_truncated_idx_images(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    path = folder / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte: truncated: header announces "):
        _load_idx(folder)


def test_truncated_idx_header(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    (folder / "t10k-labels-idx1-ubyte").write_bytes(struct.pack(">I", 2049) + b"\x00\x00")
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte: truncated: 6 bytes"):
        _load_idx(folder)


def test_truncated_gzip(tmp_path: Path) -> None:
    folder = formats.write_mnist_idx(tmp_path / "idx", formats.random_mnist(), gz=True)
    path = folder / "train-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte.gz: not a valid gzip file"):
        _load_idx(folder)


def test_wrong_magic(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    images = formats.random_mnist().x_train
    # a labels magic on an images file (the classic swapped-files mistake)
    (folder / "train-images-idx3-ubyte").write_bytes(formats.idx_images_bytes(images, 2049))
    with pytest.raises(DataError, match=r"wrong magic number 2049 .*starts with 2051"):
        _load_idx(folder)


def test_little_endian_header_is_wrong_magic(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    labels = formats.random_mnist().y_test
    raw = struct.pack("<II", 2049, len(labels)) + labels.tobytes()
    (folder / "t10k-labels-idx1-ubyte").write_bytes(raw)
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte: wrong magic number"):
        _load_idx(folder)


def test_labels_out_of_range_idx(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    labels = formats.random_mnist().y_train.copy()
    labels[4] = 12
    (folder / "train-labels-idx1-ubyte").write_bytes(formats.idx_labels_bytes(labels))
    with pytest.raises(DataError, match=r"train-labels-idx1-ubyte: label 12 out of range"):
        _load_idx(folder)


def test_trailing_bytes(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    path = folder / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes() + b"\x00" * 7)
    with pytest.raises(DataError, match=r"7 unexpected bytes after the 5 images"):
        _load_idx(folder)


def test_wrong_image_size(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    images = np.zeros((3, 32, 32), np.uint8)
    (folder / "t10k-images-idx3-ubyte").write_bytes(formats.idx_images_bytes(images))
    with pytest.raises(DataError, match=r"images are 32x32, expected 28x28"):
        _load_idx(folder)


def test_image_and_label_counts_differ(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    (folder / "t10k-labels-idx1-ubyte").write_bytes(formats.idx_labels_bytes(np.zeros(4)))
    with pytest.raises(DataError, match=r"t10k images file holds 5 images but the labels"):
        _load_idx(folder)


def test_missing_idx_file(tmp_path: Path) -> None:
    folder = _idx_folder(tmp_path)
    (folder / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte \(or .*\.gz\) is missing"):
        _load_idx(folder)


def _npz_with(tmp_path: Path, **arrays: np.ndarray) -> Path:
    split = formats.random_mnist()
    base = {k: getattr(split, k) for k in ("x_train", "y_train", "x_test", "y_test")}
    base.update(arrays)
    path = tmp_path / "bad" / "mnist.npz"
    path.parent.mkdir()
    np.savez(path, **base)
    return path


def _load_npz(path: Path) -> data.LoadedDataset:
    return data.load("mnist", mode="real", data_dir=path.parent, allow_download=False)


def test_npz_labels_out_of_range(tmp_path: Path) -> None:
    path = _npz_with(tmp_path, y_test=np.array([0, 1, 2, 3, -1]))
    with pytest.raises(DataError, match=r"mnist.npz y_test: label -1 out of range; expected 0"):
        _load_npz(path)


def test_npz_wrong_dtype(tmp_path: Path) -> None:
    path = _npz_with(tmp_path, x_train=np.zeros((12, 28, 28), np.float32))
    with pytest.raises(DataError, match=r"x_train: images have dtype float32, expected uint8"):
        _load_npz(path)


def test_npz_label_count_mismatch(tmp_path: Path) -> None:
    path = _npz_with(tmp_path, y_train=np.zeros(11, np.uint8))
    with pytest.raises(DataError, match=r"y_train: 11 labels for 12 images"):
        _load_npz(path)


def test_npz_missing_key(tmp_path: Path) -> None:
    path = tmp_path / "bad" / "mnist.npz"
    path.parent.mkdir()
    np.savez(path, x_train=np.zeros((1, 28, 28), np.uint8))
    with pytest.raises(DataError, match=r"no y_train, x_test, y_test array"):
        _load_npz(path)


def test_npz_with_pickled_objects_is_refused(tmp_path: Path) -> None:
    path = _npz_with(tmp_path, y_train=np.array([object()] * 12, dtype=object))
    with pytest.raises(UnsafePickle, match=r"holds pickled objects"):
        _load_npz(path)


def test_npz_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "bad" / "mnist.npz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(b"not an npz"))
    with pytest.raises(DataError, match=r"mnist.npz: not a valid .npz file"):
        _load_npz(path)


def test_npz_truncated(tmp_path: Path) -> None:
    path = _npz_with(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match=r"mnist.npz: not a valid .npz file"):
        _load_npz(path)


def test_keras_label_shape_n_by_1_is_accepted(tmp_path: Path) -> None:
    split = formats.random_mnist()
    path = _npz_with(tmp_path, y_train=split.y_train.reshape(-1, 1))
    np.testing.assert_array_equal(_load_npz(path).y_train, split.y_train)


def test_idx_bytes_are_big_endian() -> None:
    """Guard the writer itself: the header is exactly what the IDX spec says."""
    raw = formats.idx_images_bytes(np.zeros((2, 28, 28), np.uint8))
    assert raw[:16] == bytes.fromhex("00000803 00000002 0000001c 0000001c")
    assert io.BytesIO(raw).getbuffer().nbytes == 16 + 2 * 784
