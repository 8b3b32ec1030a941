"""MNIST readers: Keras' `mnist.npz` and the original IDX files (raw or gzipped)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mpbench.data import npz
from mpbench.data.dataset import IMAGE_SHAPES, LoadedDataset, check_images, check_labels
from mpbench.data.errors import DataError
from mpbench.data.files import gunzip, read_file
from mpbench.data.locate import MNIST_IDX_FILES, MNIST_NPZ, Found, idx_file
from mpbench.data.locations import sha256_bytes

IDX_IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
IDX_LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
_ROWS, _COLS = IMAGE_SHAPES["mnist"]


def read(found: Found) -> LoadedDataset:
    if found.format == MNIST_NPZ:
        return read_npz(found.path)
    return read_idx_folder(found.path)


def read_npz(path: Path) -> LoadedDataset:
    """`mnist.npz` as Keras caches it: uint8 images (N, 28, 28), integer labels (N,)."""
    raw = read_file(path)
    arrays = npz.read_arrays(raw, NPZ_KEYS, str(path))
    x_train = check_images(arrays["x_train"], IMAGE_SHAPES["mnist"], f"{path} x_train")
    x_test = check_images(arrays["x_test"], IMAGE_SHAPES["mnist"], f"{path} x_test")
    y_train = check_labels(arrays["y_train"], len(x_train), f"{path} y_train")
    y_test = check_labels(arrays["y_test"], len(x_test), f"{path} y_test")
    return LoadedDataset(
        x_train, y_train, x_test, y_test, "mnist", "real", str(path), {path.name: sha256_bytes(raw)}
    )


def read_idx_folder(folder: Path) -> LoadedDataset:
    """The four IDX files (each raw or .gz) in `folder`."""
    digests: dict[str, str] = {}
    arrays: list[np.ndarray] = []
    for name in MNIST_IDX_FILES:
        path = idx_file(folder, name)
        if path is None:
            raise DataError(f"{folder}: MNIST IDX file {name} (or {name}.gz) is missing")
        raw = read_file(path)
        digests[path.name] = sha256_bytes(raw)
        data = gunzip(raw, path) if path.name.endswith(".gz") else raw
        if "images" in name:
            arrays.append(parse_idx_images(data, str(path)))
        else:
            arrays.append(parse_idx_labels(data, str(path)))
    x_train, y_train, x_test, y_test = arrays
    for images, labels, split in ((x_train, y_train, "train"), (x_test, y_test, "t10k")):
        if len(images) != len(labels):
            raise DataError(
                f"{folder}: {split} images file holds {len(images)} images but the labels "
                f"file holds {len(labels)} labels"
            )
    return LoadedDataset(x_train, y_train, x_test, y_test, "mnist", "real", str(folder), digests)


def parse_idx_images(data: bytes, where: str) -> np.ndarray:
    """IDX3: big-endian magic 2051, count, rows, cols, then count*rows*cols bytes."""
    count, rows, cols = _idx_header(data, where, IDX_IMAGES_MAGIC, dims=3)
    if (rows, cols) != (_ROWS, _COLS):
        raise DataError(f"{where}: images are {rows}x{cols}, expected {_ROWS}x{_COLS}")
    _check_length(data, 16, count * rows * cols, f"{count} images", where)
    images = np.frombuffer(data, dtype=np.uint8, offset=16).reshape(count, rows, cols).copy()
    return check_images(images, IMAGE_SHAPES["mnist"], where)


def parse_idx_labels(data: bytes, where: str) -> np.ndarray:
    """IDX1: big-endian magic 2049, count, then count label bytes."""
    (count,) = _idx_header(data, where, IDX_LABELS_MAGIC, dims=1)
    _check_length(data, 8, count, f"{count} labels", where)
    labels = np.frombuffer(data, dtype=np.uint8, offset=8).copy()
    return check_labels(labels, count, where)


def _idx_header(data: bytes, where: str, magic: int, dims: int) -> tuple[int, ...]:
    header = 4 + 4 * dims
    if len(data) < 4:
        raise DataError(f"{where}: truncated: {len(data)} bytes, too short for an IDX header")
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        kind = "image" if magic == IDX_IMAGES_MAGIC else "label"
        raise DataError(
            f"{where}: wrong magic number {found} (0x{found:08x}); "
            f"an IDX {kind} file starts with {magic}"
        )
    if len(data) < header:
        raise DataError(f"{where}: truncated: {len(data)} bytes, header needs {header}")
    return tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))


def _check_length(data: bytes, header: int, body: int, what: str, where: str) -> None:
    if len(data) < header + body:
        raise DataError(
            f"{where}: truncated: header announces {what} ({header + body} bytes) "
            f"but the file holds {len(data)} bytes"
        )
    if len(data) > header + body:
        raise DataError(
            f"{where}: {len(data) - header - body} unexpected bytes after the {what} "
            "the header announces"
        )
