"""Find a real copy of a dataset on disk, in the documented look-up order.

Order: `--data-dir`, the mpbench cache (`<cache>/datasets`), the Keras cache
(`~/.keras/datasets`). Within one place the cheapest safe format wins: MNIST `mnist.npz`
before IDX files; CIFAR-10 binary batches before python (pickle) batches before archives.
This only looks at names; the readers validate the contents.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mpbench.data.files import is_file, kind
from mpbench.data.locations import datasets_dir, keras_datasets_dir
from mpbench.errors import InvalidInput

MNIST_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
CIFAR_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
CIFAR_BIN_DIR = "cifar-10-batches-bin"
CIFAR_PY_DIR = "cifar-10-batches-py"
CIFAR_ARCHIVES = (
    "cifar-10-binary.tar.gz",  # the canonical binary archive
    "cifar-10-python.tar.gz",  # the canonical python archive
    "cifar-10-batches-py.tar.gz",  # Keras 2's cached copy of the python archive
    "cifar-10-batches-py-target_archive",  # Keras 3's cached copy of the python archive
)

# format names, as shown by `mpbench data`
MNIST_NPZ = "mnist.npz"
MNIST_IDX = "idx"
CIFAR_BIN = "cifar-binary"
CIFAR_PY = "cifar-python"
CIFAR_ARCHIVE = "tar.gz"


@dataclass(frozen=True)
class Place:
    """A folder that is searched, in the user's words."""

    label: str  # "data-dir" | "mpbench cache" | "keras cache"
    path: Path


@dataclass(frozen=True)
class Found:
    dataset: str
    format: str
    path: Path  # the file or folder to read
    place: Place


def places(data_dir: str | Path | None) -> list[Place]:
    """The folders searched, in order. A `data_dir` that does not exist is bad input."""
    out: list[Place] = []
    if data_dir is not None:
        if isinstance(data_dir, str) and not data_dir.strip():
            raise InvalidInput("data dir '': empty path; name a folder or a dataset file")
        try:
            path = Path(data_dir).expanduser()
        except RuntimeError as exc:  # "~nosuchuser/...": no home folder to expand to
            raise InvalidInput(f"data dir {str(data_dir)!r}: {exc}") from None
        if kind(path) is None:
            raise InvalidInput(f"data dir {str(path)!r} does not exist")
        out.append(Place("data-dir", path))
    out.append(Place("mpbench cache", datasets_dir()))
    out.append(Place("keras cache", keras_datasets_dir()))
    return out


def find(dataset: str, data_dir: str | Path | None = None) -> Found | None:
    """The first real copy of `dataset` in look-up order, or None."""
    for place in places(data_dir):
        found = find_in(dataset, place)
        if found is not None:
            return found
    return None


def find_in(dataset: str, place: Place) -> Found | None:
    """The first copy of `dataset` in one place, or None."""
    path = place.path
    found = kind(path)
    if found == "file":  # --data-dir may name the file itself
        return _file_format(dataset, path, place)
    if found != "dir":
        return None
    for fmt, candidate in _candidates(dataset, path):
        return Found(dataset, fmt, candidate, place)
    return None


def _candidates(dataset: str, root: Path) -> Iterator[tuple[str, Path]]:
    """Existing copies under `root`, best first."""
    if dataset == "mnist":
        if is_file(root / "mnist.npz"):
            yield MNIST_NPZ, root / "mnist.npz"
        for folder in (root, root / "MNIST" / "raw"):  # the latter is torchvision's layout
            if idx_file(folder, MNIST_IDX_FILES[0]) is not None:
                yield MNIST_IDX, folder
        return
    # `root` itself may be the batch folder (e.g. --data-dir .../cifar-10-batches-bin).
    for folder in (root / CIFAR_BIN_DIR, root):
        if is_file(folder / "data_batch_1.bin"):
            yield CIFAR_BIN, folder
    for folder in (root / CIFAR_PY_DIR, root / "cifar-10-batches-py-target" / CIFAR_PY_DIR, root):
        if is_file(folder / "data_batch_1"):
            yield CIFAR_PY, folder
    for name in CIFAR_ARCHIVES:
        if is_file(root / name):
            yield CIFAR_ARCHIVE, root / name


def _file_format(dataset: str, path: Path, place: Place) -> Found | None:
    """What a `--data-dir` naming a file holds, by its name. One of the IDX files or CIFAR
    batches stands for the folder it is in (the reader needs its siblings)."""
    name = path.name
    if dataset == "mnist":
        if name.endswith(".npz"):
            return Found(dataset, MNIST_NPZ, path, place)
        if name.removesuffix(".gz") in MNIST_IDX_FILES:
            return Found(dataset, MNIST_IDX, path.parent, place)
        return None
    if name.endswith((".tar.gz", ".tgz", ".tar")) or name in CIFAR_ARCHIVES:
        return Found(dataset, CIFAR_ARCHIVE, path, place)
    if name.removesuffix(".bin") in CIFAR_BATCHES:
        fmt = CIFAR_BIN if name.endswith(".bin") else CIFAR_PY
        return Found(dataset, fmt, path.parent, place)
    return None


def idx_file(folder: Path, name: str) -> Path | None:
    """`name` or `name.gz` in `folder` (raw preferred), or None."""
    for candidate in (folder / name, folder / f"{name}.gz"):
        if is_file(candidate):
            return candidate
    return None
