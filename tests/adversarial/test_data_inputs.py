"""Hostile and broken data, as a user meets it: `mpbench data` and `mpbench run` as real
subprocesses against private caches, with every download pointed at a closed port.

`mpbench data` only looks at names (docs/data.md), so a hostile file is listed as found,
without a traceback, and a path that cannot be looked at is one line and exit 2.
`mpbench run --data real` must refuse each hostile case up front: exit 2, one line naming
the file, no traceback, and no run directory.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest
from adversary import assert_refused
from cli import run_mpbench


@dataclass
class Hostile:
    dataset: str  # "mnist" | "cifar10"
    data_dir: Path  # what --data-dir names
    named: Path  # the file (or folder) the refusal must name
    fragment: str  # what the refusal must say about it


class Calls:
    """Pickles as a call of `func(*args)`: what a hostile file can ask the unpickler."""

    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (self.func, self.args)


def runs_command(command: str) -> Calls:
    return Calls(os.system, command)


def _marker(root: Path) -> Path:
    """The file a pickle payload would create if it ever ran."""
    return root.parent / "pwned"


# --- MNIST ---------------------------------------------------------------------------


def truncated_npz(root: Path) -> Hostile:
    path = formats.write_mnist_npz(root / "mnist.npz", formats.random_mnist())
    path.write_bytes(path.read_bytes()[:700])
    return Hostile("mnist", root, path, "not a valid .npz file")


def npz_named_directly(root: Path) -> Hostile:
    hostile = truncated_npz(root)
    return Hostile("mnist", hostile.named, hostile.named, hostile.fragment)


def npz_wrong_shapes(root: Path) -> Hostile:
    root.mkdir(parents=True)
    path = root / "mnist.npz"
    split = formats.random_mnist()
    np.savez(path, x_train=np.zeros((12, 32, 32), np.uint8), y_train=split.y_train,
             x_test=split.x_test, y_test=split.y_test)  # fmt: skip
    return Hostile("mnist", root, path, "x_train: images have shape (12, 32, 32)")


def npz_with_pickled_objects(root: Path) -> Hostile:
    root.mkdir(parents=True)
    path = root / "mnist.npz"
    split = formats.random_mnist()
    payload = np.array([runs_command(f"touch {_marker(root)}")] * 12, dtype=object)
    np.savez(path, x_train=split.x_train, y_train=payload, x_test=split.x_test,
             y_test=split.y_test)  # fmt: skip
    return Hostile("mnist", root, path, "holds pickled objects")


def npz_terabyte_header(root: Path) -> Hostile:
    root.mkdir(parents=True)
    path = root / "mnist.npz"
    header = "{'descr': '|u1', 'fortran_order': False, 'shape': (1000000000000, 28, 28), }"
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    member = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    with zipfile.ZipFile(path, "w") as archive:
        for key in ("x_train", "y_train", "x_test", "y_test"):
            archive.writestr(f"{key}.npy", member)
    return Hostile("mnist", root, path, "header announces shape")


def idx_wrong_magic(root: Path) -> Hostile:
    folder = formats.write_mnist_idx(root, formats.random_mnist())
    path = folder / "train-images-idx3-ubyte"
    path.write_bytes(b"\x00\x00\x08\x01" + path.read_bytes()[4:])
    return Hostile("mnist", root, path, "wrong magic number 2049")


def idx_broken_gzip(root: Path) -> Hostile:
    folder = formats.write_mnist_idx(root, formats.random_mnist(), gz=True)
    path = folder / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:20])
    return Hostile("mnist", root, path, "not a valid gzip file")


def empty_dir(root: Path) -> Hostile:
    root.mkdir(parents=True)
    return Hostile("mnist", root, root, "no MNIST data found in")


# --- CIFAR-10 ------------------------------------------------------------------------


def _py_batch(root: Path, raw: bytes) -> Path:
    folder = formats.write_cifar_py(root, formats.random_cifar())
    (folder / "data_batch_1").write_bytes(raw)
    return folder / "data_batch_1"


def pickle_that_runs_code(root: Path) -> Hostile:
    batch = {
        b"data": np.zeros((2, 3072), np.uint8),
        b"labels": runs_command(f"touch {_marker(root)}"),
    }
    path = _py_batch(root, pickle.dumps(batch, protocol=2))
    return Hostile("cifar10", root, path, "refused to unpickle")


def pickle_with_a_deep_key(root: Path) -> Hostile:
    """A 1 MB pickle whose dict key nests a million tuples: hashing it would crash."""
    raw = b"\x80\x02}" + b"K\x01" + b"\x85" * 1_000_000 + b"K\x02s."
    return Hostile("cifar10", root, _py_batch(root, raw), "holds a tuple as a dict key")


def pickle_bytearray_bomb(root: Path) -> Hostile:
    """bytearray(10**12) would zero-fill a terabyte."""
    raw = pickle.dumps({b"data": Calls(bytearray, 10**12)}, protocol=2)
    return Hostile("cifar10", root, _py_batch(root, raw), "builtins.bytearray of a int")


def bin_batch_fifo(root: Path) -> Hostile:
    folder = formats.write_cifar_bin(root, formats.random_cifar())
    path = folder / "test_batch.bin"
    path.unlink()
    os.mkfifo(path)
    return Hostile("cifar10", root, path, "not a regular file")


def bin_batch_wrong_size(root: Path) -> Hostile:
    folder = formats.write_cifar_bin(root, formats.random_cifar())
    path = folder / "data_batch_5.bin"
    path.write_bytes(path.read_bytes() + b"\x00")
    return Hostile("cifar10", root, path, "is not a whole number of 3073-byte records")


def _add(tar: tarfile.TarFile, name: str, content: bytes = b"x", kind: bytes | None = None) -> None:
    info = tarfile.TarInfo(name)
    if kind is not None:
        info.type, info.linkname = kind, "/etc/passwd"
        tar.addfile(info)
        return
    info.size = len(content)
    tar.addfile(info, io.BytesIO(content))


def _archive(root: Path, extra: Callable[[tarfile.TarFile], None]) -> Path:
    folder = formats.write_cifar_bin(root.parent / "staging", formats.random_cifar())
    path = root / "cifar-10-binary.tar.gz"
    root.mkdir(parents=True)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
        extra(tar)
    return path


def archive_dotdot(root: Path) -> Hostile:
    path = _archive(root, lambda tar: _add(tar, "cifar-10-batches-bin/../../escaped"))
    return Hostile("cifar10", root, path, "climbs out of the folder with '..'")


def archive_symlink(root: Path) -> Hostile:
    path = _archive(root, lambda tar: _add(tar, "cifar-10-batches-bin/link", kind=tarfile.SYMTYPE))
    return Hostile("cifar10", path, path, "is a link")


def archive_truncated(root: Path) -> Hostile:
    path = _archive(root, lambda tar: None)
    path.write_bytes(path.read_bytes()[:-500])
    return Hostile("cifar10", root, path, "not a readable tar archive")


def archive_of_hostile_batches(root: Path) -> Hostile:
    folder = formats.write_cifar_py(root.parent / "staging", formats.random_cifar())
    batch = {
        b"data": np.zeros((2, 3072), np.uint8),
        b"labels": runs_command(f"touch {_marker(root)}"),
    }
    for name in (*formats.CIFAR_TRAIN, "test_batch"):
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    path = formats.tar_gz(root / "cifar-10-python.tar.gz", folder)
    return Hostile("cifar10", path, path, "refused to unpickle")


CASES: dict[str, Callable[[Path], Hostile]] = {
    f.__name__: f
    for f in (
        empty_dir,
        truncated_npz,
        npz_named_directly,
        npz_wrong_shapes,
        npz_with_pickled_objects,
        npz_terabyte_header,
        idx_wrong_magic,
        idx_broken_gzip,
        pickle_that_runs_code,
        pickle_with_a_deep_key,
        pickle_bytearray_bomb,
        bin_batch_fifo,
        bin_batch_wrong_size,
        archive_dotdot,
        archive_symlink,
        archive_truncated,
        archive_of_hostile_batches,
    )
}
WORKLOAD = {"mnist": "mnist_dense", "cifar10": "cifar10_cnn"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """Private caches, and downloads that are refused at once (a closed local port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {
        "MPBENCH_CACHE": str(tmp_path / "cache"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "KERAS_HOME": str(tmp_path / "keras"),
        "MPBENCH_MNIST_URL": f"http://127.0.0.1:{port}/mnist.npz",
        "MPBENCH_CIFAR10_URL": f"http://127.0.0.1:{port}/cifar-10-binary.tar.gz",
        "MPBENCH_DOWNLOAD_TIMEOUT": "5",
        "COLUMNS": "200",
    }


def _extracted(env: dict[str, str]) -> list[Path]:
    folder = Path(env["MPBENCH_CACHE"]) / "datasets" / "extracted"
    return sorted(folder.rglob("*")) if folder.exists() else []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES)
def test_data_lists_without_reading(tmp_path: Path, env: dict[str, str], case: str) -> None:
    hostile = CASES[case](tmp_path / "in")
    result = run_mpbench("data", "--json", "--data-dir", str(hostile.data_dir), env=env)
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    report = {d["dataset"]: d for d in json.loads(result.stdout)["datasets"]}
    assert report[hostile.dataset]["searched"][0] == str(hostile.data_dir)
    assert report[hostile.dataset]["found"] is (case != "empty_dir")
    assert not _marker(tmp_path / "in").exists()


@pytest.mark.parametrize(
    "data_dir, fragment",
    [
        ("nope", "does not exist"),
        ("~no-such-user-mpbench/data", "~no-such-user-mpbench/data"),
        ("x" * 300, "File name too long"),
    ],
    ids=["missing", "unknown user", "name too long"],
)
def test_data_refuses_a_path_it_cannot_look_at(
    tmp_path: Path, env: dict[str, str], data_dir: str, fragment: str
) -> None:
    result = run_mpbench("data", "--data-dir", data_dir, env=env, cwd=tmp_path)
    assert_refused(result, fragment)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", CASES)
def test_run_refuses_up_front(
    tmp_path: Path, env: dict[str, str], tiny_config: Path, case: str
) -> None:
    hostile = CASES[case](tmp_path / "in")
    out = tmp_path / "run"
    result = run_mpbench(
        "run", "--config", str(tiny_config), "--framework", "torch",
        "--workload", WORKLOAD[hostile.dataset], "--policy", "fp32", "--device", "cpu",
        "--data", "real", "--data-dir", str(hostile.data_dir), "--out", str(out),
        env=env,
    )  # fmt: skip
    assert_refused(result, str(hostile.named), hostile.fragment)
    assert not out.exists()
    assert not _marker(tmp_path / "in").exists()
    assert _extracted(env) == []  # nothing of a refused archive stays in the cache
