"""Writers for the real on-disk dataset formats, byte for byte as the originals are laid out.

Used by the tests to create small genuine-format files (no network, no real datasets).
"""

from __future__ import annotations

import gzip
import io
import pickle
import socket
import struct
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

IDX_NAMES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}
CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR_LABEL_NAMES = [
    b"airplane", b"automobile", b"bird", b"cat", b"deer",
    b"dog", b"frog", b"horse", b"ship", b"truck",
]  # fmt: skip


@dataclass
class Split:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def random_mnist(seed: int = 0, train: int = 12, test: int = 5) -> Split:
    rng = np.random.default_rng(seed)
    return Split(
        rng.integers(0, 256, (train, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, train, dtype=np.uint8),
        rng.integers(0, 256, (test, 28, 28), dtype=np.uint8),
        rng.integers(0, 10, test, dtype=np.uint8),
    )


def random_cifar(seed: int = 0, per_batch: int = 3, test: int = 4) -> Split:
    """CIFAR-shaped split; the train part is 5 batches of `per_batch` images."""
    rng = np.random.default_rng(seed)
    train = 5 * per_batch
    return Split(
        rng.integers(0, 256, (train, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, train, dtype=np.uint8),
        rng.integers(0, 256, (test, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, test, dtype=np.uint8),
    )


def closed_port() -> int:
    """A port nothing listens on (bound, then released): connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- MNIST -----------------------------------------------------------------------------


def write_mnist_npz(path: Path, split: Split) -> Path:
    """As Keras caches it: an uncompressed npz with the four arrays."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        np.savez(
            f, x_train=split.x_train, y_train=split.y_train,
            x_test=split.x_test, y_test=split.y_test,
        )  # fmt: skip
    return path


def idx_images_bytes(images: np.ndarray, magic: int = 2051) -> bytes:
    count, rows, cols = images.shape
    return struct.pack(">IIII", magic, count, rows, cols) + images.astype(np.uint8).tobytes()


def idx_labels_bytes(labels: np.ndarray, magic: int = 2049) -> bytes:
    return struct.pack(">II", magic, len(labels)) + np.asarray(labels, np.uint8).tobytes()


def write_mnist_idx(folder: Path, split: Split, gz: bool = False) -> Path:
    """The four IDX files (big-endian headers), raw or gzipped as on the original site."""
    folder.mkdir(parents=True, exist_ok=True)
    contents = {
        IDX_NAMES["train", "images"]: idx_images_bytes(split.x_train),
        IDX_NAMES["train", "labels"]: idx_labels_bytes(split.y_train),
        IDX_NAMES["test", "images"]: idx_images_bytes(split.x_test),
        IDX_NAMES["test", "labels"]: idx_labels_bytes(split.y_test),
    }
    for name, data in contents.items():
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)
    return folder


# --- CIFAR-10 --------------------------------------------------------------------------


def planes(images: np.ndarray) -> np.ndarray:
    """(N, 32, 32, 3) -> (N, 3072): the R plane, then G, then B, each row-major."""
    return images.transpose(0, 3, 1, 2).reshape(len(images), 3072)


def cifar_bin_bytes(images: np.ndarray, labels: np.ndarray) -> bytes:
    records = np.concatenate([np.asarray(labels, np.uint8)[:, None], planes(images)], axis=1)
    return records.tobytes()


def _batches(split: Split) -> list[tuple[str, np.ndarray, np.ndarray]]:
    x_parts = np.array_split(split.x_train, 5)
    y_parts = np.array_split(split.y_train, 5)
    out = [(name, x, y) for name, x, y in zip(CIFAR_TRAIN, x_parts, y_parts, strict=True)]
    return [*out, ("test_batch", split.x_test, split.y_test)]


def write_cifar_bin(root: Path, split: Split) -> Path:
    """`cifar-10-batches-bin/` with data_batch_1..5.bin, test_batch.bin, batches.meta.txt."""
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name, x, y in _batches(split):
        (folder / f"{name}.bin").write_bytes(cifar_bin_bytes(x, y))
    (folder / "batches.meta.txt").write_bytes(b"\n".join(CIFAR_LABEL_NAMES) + b"\n")
    return folder


class Py2Pickle:
    """Emits protocol-2 opcodes the way Python 2's cPickle wrote the genuine CIFAR batches:
    `str` as (SHORT_)BINSTRING, numpy arrays via numpy.core.multiarray._reconstruct."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.out.write(b"\x80\x02")  # PROTO 2

    def string(self, value: bytes) -> None:
        if len(value) < 256:
            self.out.write(b"U" + bytes([len(value)]) + value)
        else:
            self.out.write(b"T" + struct.pack("<I", len(value)) + value)

    def int_(self, value: int) -> None:
        if 0 <= value < 256:
            self.out.write(b"K" + bytes([value]))
        elif 0 <= value < 65536:
            self.out.write(b"M" + struct.pack("<H", value))
        else:
            self.out.write(b"J" + struct.pack("<i", value))

    def global_(self, module: str, name: str) -> None:
        self.out.write(b"c" + module.encode() + b"\n" + name.encode() + b"\n")

    def uint8_array(self, array: np.ndarray) -> None:
        self.global_("numpy.core.multiarray", "_reconstruct")
        self.global_("numpy", "ndarray")
        self.int_(0)
        self.out.write(b"\x85")  # TUPLE1: shape (0,)
        self.string(b"b")
        self.out.write(b"\x87R")  # TUPLE3, REDUCE
        self.out.write(b"(")  # MARK: state (1, shape, dtype, fortran, raw)
        self.int_(1)
        self.out.write(b"(")
        for dim in array.shape:
            self.int_(dim)
        self.out.write(b"t")
        self.global_("numpy", "dtype")
        self.string(b"u1")
        self.int_(0)
        self.int_(1)
        self.out.write(b"\x87R")
        self.out.write(b"(")  # dtype state (3, '|', None, None, None, -1, -1, 0)
        self.int_(3)
        self.string(b"|")
        self.out.write(b"NNN")
        self.out.write(b"J" + struct.pack("<i", -1) + b"J" + struct.pack("<i", -1))
        self.int_(0)
        self.out.write(b"tb")  # TUPLE, BUILD
        self.out.write(b"\x89")  # NEWFALSE: not fortran-ordered
        self.string(np.ascontiguousarray(array).tobytes())
        self.out.write(b"tb")

    def batch(self, data: np.ndarray, labels: list[int], batch_label: bytes) -> bytes:
        self.out.write(b"}(")  # EMPTY_DICT, MARK
        self.string(b"data")
        self.uint8_array(data)
        self.string(b"labels")
        self.out.write(b"](")
        for label in labels:
            self.int_(label)
        self.out.write(b"e")  # APPENDS
        self.string(b"batch_label")
        self.string(batch_label)
        self.string(b"filenames")
        self.out.write(b"](")
        for i in range(len(labels)):
            self.string(f"image_{i:05d}.png".encode())
        self.out.write(b"eu.")  # APPENDS, SETITEMS, STOP
        return self.out.getvalue()


def py_batch_bytes(
    images: np.ndarray,
    labels: np.ndarray,
    batch_label: bytes,
    style: str = "py2",
    protocol: int = 2,
    numpy_core: str = "numpy.core",
    labels_as_array: bool = False,
) -> bytes:
    """One CIFAR python batch: {b"data": uint8 (N, 3072), b"labels": [ints], b"batch_label",
    b"filenames"}.

    style "py2": Python 2 cPickle's opcodes (the genuine files). style "py3": Python 3's
    pickle at `protocol` (bytes become `_codecs.encode` at protocol 2), with numpy's
    `_core` module name rewritten to `numpy_core` ("numpy.core" as numpy 1.x writes it).
    """
    data = planes(images)
    label_list = [int(v) for v in labels]
    if style == "py2":
        return Py2Pickle().batch(data, label_list, batch_label)
    batch = {
        b"batch_label": batch_label,
        b"labels": np.asarray(labels, np.int64) if labels_as_array else label_list,
        b"data": data,
        b"filenames": [f"image_{i:05d}.png".encode() for i in range(len(labels))],
    }
    raw = pickle.dumps(batch, protocol=protocol)
    if numpy_core != "numpy._core":
        raw = _rename_module(raw, protocol, "numpy._core", numpy_core)
    return raw


def _rename_module(raw: bytes, protocol: int, old: str, new: str) -> bytes:
    """Rewrite numpy's module name in GLOBAL (protocol 2) or SHORT_BINUNICODE (4, 5)."""
    if protocol <= 2:
        return raw.replace(old.encode() + b".", new.encode() + b".")
    out = raw
    for suffix in (".multiarray", ".numeric"):
        before, after = (old + suffix).encode(), (new + suffix).encode()
        out = out.replace(
            b"\x8c" + bytes([len(before)]) + before, b"\x8c" + bytes([len(after)]) + after
        )
    # FRAME lengths (protocol >= 4) count the bytes of each frame; the names changed length.
    return _reframe(out)


def _reframe(raw: bytes) -> bytes:
    """Drop FRAME opcodes (optional framing) so edited protocol-4/5 pickles stay valid."""
    import pickletools

    pieces = []
    last = 0
    for opcode, _arg, pos in pickletools.genops(raw):
        if opcode.name == "FRAME":
            pieces.append(raw[last:pos])
            last = pos + 9  # opcode byte + 8-byte length
    pieces.append(raw[last:])
    return b"".join(pieces)


def write_cifar_py(root: Path, split: Split, **style: object) -> Path:
    """`cifar-10-batches-py/` with data_batch_1..5, test_batch, batches.meta, readme.html."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for i, (name, x, y) in enumerate(_batches(split)):
        label = b"testing batch 1 of 1" if name == "test_batch" else f"training batch {i + 1} of 5"
        (folder / name).write_bytes(py_batch_bytes(x, y, _as_bytes(label), **style))  # type: ignore[arg-type]
    meta = {b"label_names": CIFAR_LABEL_NAMES, b"num_cases_per_batch": 10000, b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=2))
    (folder / "readme.html").write_bytes(b"<meta HTTP-EQUIV='REFRESH' content='0'>\n")
    return folder


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def tar_gz(archive: Path, folder: Path) -> Path:
    """Archive `folder` (with its directory entry) the way the originals are packed."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return archive


# The opening of TinyShakespeare's input.txt (karpathy/char-rnn; the text is public domain):
# speaker lines ending in a colon, the speech, a blank line, ASCII with "\n" line ends.
SHAKESPEARE_OPENING = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\n"
    "All:\nResolved. resolved.\n\n"
    "First Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n\n"
    "All:\nWe know't, we know't.\n\n"
    "First Citizen:\nLet us kill him, and we'll have corn at our own price.\nIs't a verdict?\n\n"
    "All:\nNo more talking on't; let it be done: away, away!\n\n"
)


def write_text_corpus(path: Path, size: int) -> bytes:
    """A TinyShakespeare-format `input.txt` of exactly `size` bytes (the opening repeated)."""
    text = SHAKESPEARE_OPENING.encode("ascii")
    data = (text * (size // len(text) + 1))[:size]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data
