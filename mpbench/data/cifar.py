"""CIFAR-10 readers: binary batches, python (pickle) batches, and their tar.gz archives.

Images come back channels-last (N, 32, 32, 3) as Keras returns them; both on-disk formats
store each image as three 1024-byte planes R, G, B.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from mpbench.data import safe_pickle
from mpbench.data.archive import extract_safely
from mpbench.data.dataset import IMAGE_SHAPES, LoadedDataset, check_images, check_labels
from mpbench.data.errors import DataError
from mpbench.data.files import is_dir, is_file, kind, read_file
from mpbench.data.locate import CIFAR_ARCHIVE, CIFAR_BIN, CIFAR_BIN_DIR, CIFAR_PY_DIR, Found
from mpbench.data.locations import datasets_dir, sha256_bytes, sha256_file

TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
PIXELS = 32 * 32 * 3
RECORD_BYTES = 1 + PIXELS  # one label byte, then the R, G and B planes


def read(found: Found) -> LoadedDataset:
    if found.format == CIFAR_ARCHIVE:
        return read_archive(found.path)
    if found.format == CIFAR_BIN:
        return read_bin_folder(found.path)
    return read_py_folder(found.path)


def read_bin_folder(folder: Path) -> LoadedDataset:
    """`data_batch_1.bin` .. `data_batch_5.bin` and `test_batch.bin`."""
    return _read_batches(folder, ".bin", parse_bin_batch)


def read_py_folder(folder: Path) -> LoadedDataset:
    """`data_batch_1` .. `data_batch_5` and `test_batch`, through the restricted unpickler."""
    return _read_batches(folder, "", parse_py_batch)


def parse_bin_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    if not data or len(data) % RECORD_BYTES:
        raise DataError(
            f"{where}: {len(data)} bytes is not a whole number of {RECORD_BYTES}-byte records "
            "(1 label byte + 3072 pixel bytes)"
        )
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    images = check_images(_planes_to_hwc(records[:, 1:]), IMAGE_SHAPES["cifar10"], where)
    return images, check_labels(records[:, 0].copy(), len(images), where)


def parse_py_batch(data: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    batch = safe_pickle.loads(data, where)
    if not isinstance(batch, dict):
        raise DataError(f"{where}: holds a {type(batch).__name__}, expected a dict")
    pixels = _entry(batch, "data", where)
    labels = _entry(batch, "labels", where)
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8:
        kind = getattr(pixels, "dtype", type(pixels).__name__)
        raise DataError(f"{where}: 'data' is {kind}, expected a uint8 array")
    if pixels.ndim != 2 or pixels.shape[1] != PIXELS or len(pixels) == 0:
        raise DataError(f"{where}: 'data' has shape {pixels.shape}, expected (N, {PIXELS})")
    if pixels.nbytes > len(data):
        # Genuine pixels are rebuilt from bytes in the file. A pickle can also call
        # numpy.ndarray(shape) for an uninitialised array of any size, which reordering
        # below would then have to touch (terabytes); no file this size holds that much.
        raise DataError(
            f"{where}: 'data' claims {len(pixels)} images ({pixels.nbytes} bytes) but the "
            f"file holds only {len(data)} bytes"
        )
    images = check_images(_planes_to_hwc(pixels), IMAGE_SHAPES["cifar10"], where)
    return images, check_labels(labels, len(images), where)


def read_archive(archive: Path) -> LoadedDataset:
    """Extract (once, keyed by the archive's SHA-256) into the mpbench cache, then read.

    An extraction whose batches are refused is deleted, so nothing from a refused archive
    stays in the cache. One found from an earlier run that fails (say, a batch deleted by
    hand) is extracted afresh once before the archive is refused."""
    try:
        digest = sha256_file(archive)
    except OSError as exc:
        raise DataError(f"{archive}: cannot read ({exc.strerror or exc})") from exc
    target = datasets_dir() / "extracted" / digest[:16]
    if is_dir(target):
        try:
            return _read_extracted(archive, digest, target)
        except DataError:
            _discard(target)
    try:
        return _read_extracted(archive, digest, _extract(archive, target))
    except DataError as exc:
        _discard(target)
        raise _in_archive(exc, archive, target) from exc


def _extract(archive: Path, target: Path) -> Path:
    try:
        return extract_safely(archive, target)
    except OSError as exc:
        raise DataError(f"{archive}: cannot extract into {target} ({exc})") from exc


def _read_extracted(archive: Path, digest: str, folder: Path) -> LoadedDataset:
    if is_file(folder / CIFAR_BIN_DIR / "data_batch_1.bin"):
        inner, loaded = CIFAR_BIN_DIR, read_bin_folder(folder / CIFAR_BIN_DIR)
    elif is_file(folder / CIFAR_PY_DIR / "data_batch_1"):
        inner, loaded = CIFAR_PY_DIR, read_py_folder(folder / CIFAR_PY_DIR)
    else:
        raise DataError(f"{archive}: holds neither {CIFAR_BIN_DIR}/ nor {CIFAR_PY_DIR}/ batches")
    members = loaded.sha256 or {}
    loaded.sha256 = {archive.name: digest, **{f"{inner}/{k}": v for k, v in members.items()}}
    loaded.origin = str(archive)
    return loaded


def _in_archive(exc: DataError, archive: Path, folder: Path) -> DataError:
    """The same refusal, naming the archive the user has and the member inside it, not
    the extracted copy (which `_discard` has just deleted)."""
    message = str(exc).replace(f"{folder}/", "")
    if not message.startswith(f"{archive}:"):
        message = f"{archive}: {message}"
    return type(exc)(message)


def _discard(folder: Path) -> None:
    """Remove an extraction that was refused. A failure to remove it is not the user's
    problem to see here: the refusal that caused it is what gets reported."""
    shutil.rmtree(folder, ignore_errors=True)


def _read_batches(folder: Path, suffix: str, parse: Any) -> LoadedDataset:
    digests: dict[str, str] = {}
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    for name in (*TRAIN_BATCHES, TEST_BATCH):
        path = folder / f"{name}{suffix}"
        if kind(path) is None:
            raise DataError(f"{folder}: CIFAR-10 batch {path.name} is missing")
        raw = read_file(path)
        digests[path.name] = sha256_bytes(raw)
        parts.append(parse(raw, str(path)))
    x_train = np.concatenate([images for images, _ in parts[:-1]])
    y_train = np.concatenate([labels for _, labels in parts[:-1]])
    x_test, y_test = parts[-1]
    return LoadedDataset(x_train, y_train, x_test, y_test, "cifar10", "real", str(folder), digests)


def _entry(batch: dict[Any, Any], key: str, where: str) -> Any:
    """Genuine (Python 2) batches have bytes keys; accept str keys from Python 3 writers."""
    for candidate in (key.encode(), key):
        if candidate in batch:
            return batch[candidate]
    raise DataError(f"{where}: no {key!r} entry (keys: {_some_keys(batch)})")


def _some_keys(batch: dict[Any, Any]) -> str:
    """A short list of the keys for a message: a hostile dict can have millions, or keys
    of a gigabyte (the unpickler admits only bytes, strings and numbers as keys)."""
    first = itertools.islice(batch, 10)
    shown = [repr(k[:16] if isinstance(k, bytes | str) else k) for k in first]
    return ", ".join(sorted(shown)) + (", ..." if len(batch) > 10 else "")


def _planes_to_hwc(pixels: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
