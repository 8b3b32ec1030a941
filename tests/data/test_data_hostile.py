"""Hostile or broken input never escapes as anything but one InvalidInput line naming the
file: no OSError, ValueError, MemoryError, OverflowError, hang or crash.

The cases test_data_safety.py covers (pickles that run code, archive members that climb
out) are not repeated; these are the ways around them.
"""

from __future__ import annotations

import errno
import gzip
import io
import lzma
import os
import pickle
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import (
    DataError,
    DataNotFound,
    UnsafeArchive,
    UnsafePickle,
    check_data,
    download,
    files,
    npz,
)
from mpbench.data import archive as archive_module
from mpbench.errors import InvalidInput


def refused(call: Callable[[], Any], *fragments: str, error: type = InvalidInput) -> str:
    """`call` raises `error` with one line holding each fragment; returns the line."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def check(dataset: str, where: Path) -> Callable[[], Any]:
    return lambda: check_data(dataset, "real", where, allow_download=False)


class Calls:
    """Pickles as a call of `func(*args)`: what a hostile file can ask the unpickler."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (self.func, self.args)


# --- npz -------------------------------------------------------------------------------


def npz_bytes(override: dict[str, bytes] | None = None, compress: bool = False) -> bytes:
    """A valid small mnist.npz, with some members' raw .npy bytes replaced."""
    split = formats.random_mnist()
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as archive:
        for key in ("x_train", "y_train", "x_test", "y_test"):
            member = io.BytesIO()
            np.save(member, getattr(split, key))
            archive.writestr(f"{key}.npy", (override or {}).get(key, member.getvalue()))
    return buffer.getvalue()


def npy_header(
    shape: tuple[int, ...], descr: str = "|u1", version: tuple[int, int] = (1, 0)
) -> bytes:
    """An .npy header as numpy writes it (magic, version, length, padded dict), announcing
    whatever `shape` the test wants."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    length_bytes = 2 if version == (1, 0) else 4
    prefix = 6 + 2 + length_bytes
    padded = text + " " * (-(prefix + len(text) + 1) % 64) + "\n"
    size = len(padded).to_bytes(length_bytes, "little")
    return b"\x93NUMPY" + bytes(version) + size + padded.encode()


def write_npz(tmp_path: Path, raw: bytes) -> Path:
    path = tmp_path / "in" / "mnist.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    return path


@pytest.mark.parametrize(
    "member, fragments",
    [
        (npy_header((10**12, 28, 28)) + b"\0" * 64, ["x_train: header announces shape"]),
        (npy_header((-3, 28, 28)), ["x_train: header announces a negative shape"]),
        (npy_header((12, 28, 28)) + b"\0" * 100, ["but 100 bytes follow it"]),
        (npy_header((12, 28, 28), version=(3, 0)), ["format version (3, 0) is not supported"]),
        (b"\x93NUMPY\x01\x00" + b"\xff\xff" + b" " * 65535, ["not a valid .npz file"]),
        (b"not an npy file at all", ["not a valid .npz file"]),
    ],
    ids=["terabyte header", "negative shape", "short body", "npy v3", "huge header", "no magic"],
)
def test_npz_member_cannot_choose_the_allocation(
    tmp_path: Path, member: bytes, fragments: list[str]
) -> None:
    path = write_npz(tmp_path, npz_bytes({"x_train": member}))
    refused(check("mnist", path), str(path), *fragments, error=DataError)


def test_npz_bad_crc(tmp_path: Path) -> None:
    raw = bytearray(npz_bytes())
    raw[raw.index(b"\x93NUMPY") + 200] ^= 0xFF  # inside x_train's data: the CRC no longer fits
    path = write_npz(tmp_path, bytes(raw))
    refused(check("mnist", path), f"{path}: not a valid .npz file", "CRC", error=DataError)


@pytest.mark.parametrize(
    "field, value, fragment",
    [("flags", 1, "is encrypted"), ("method", 99, "compression method is not supported")],
    ids=["encrypted", "unknown compression"],
)
def test_npz_members_zipfile_cannot_read(
    tmp_path: Path, field: str, value: int, fragment: str
) -> None:
    """zipfile raises RuntimeError / NotImplementedError for these, not BadZipFile."""
    raw = bytearray(npz_bytes())
    offsets = {
        "flags": {b"PK\x03\x04": 6, b"PK\x01\x02": 8},
        "method": {b"PK\x03\x04": 8, b"PK\x01\x02": 10},
    }
    for signature, offset in offsets[field].items():
        at = raw.find(signature)
        while at != -1:
            raw[at + offset : at + offset + 2] = value.to_bytes(2, "little")
            at = raw.find(signature, at + 4)
    path = write_npz(tmp_path, bytes(raw))
    refused(check("mnist", path), f"{path}: not a valid .npz file", fragment, error=DataError)


def test_npz_member_larger_than_any_mnist_array(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(npz, "MAX_MEMBER_BYTES", 1000)
    path = write_npz(tmp_path, npz_bytes(compress=True))
    refused(check("mnist", path), "x_train: unpacks to 9536 bytes, more than", error=DataError)


def test_file_larger_than_any_dataset_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 4096)
    path = write_npz(tmp_path, npz_bytes())
    refused(check("mnist", path), str(path), "more than the 0 MiB a dataset file can be")


def test_gzip_bomb_idx_file(tmp_path: Path, monkeypatch) -> None:
    folder = formats.write_mnist_idx(tmp_path / "idx", formats.random_mnist(), gz=True)
    bomb = folder / "train-labels-idx1-ubyte.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (8 << 20)))  # 8 KiB that unpack to 8 MiB
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1 << 20)
    refused(check("mnist", folder), f"{bomb}: unpacks to more than 1 MiB", error=DataError)


# --- what sits where a data file should be -------------------------------------------


@pytest.mark.timeout(30)  # a FIFO opened for reading would block until a writer comes
@pytest.mark.parametrize("thing", ["fifo", "directory", "/dev/zero"])
def test_batch_that_is_not_a_regular_file(tmp_path: Path, thing: str) -> None:
    folder = formats.write_cifar_bin(tmp_path, formats.random_cifar())
    batch = folder / "data_batch_2.bin"
    batch.unlink()
    if thing == "fifo":
        os.mkfifo(batch)
    elif thing == "directory":
        batch.mkdir()
    else:
        batch.symlink_to("/dev/zero")
    refused(check("cifar10", folder), f"{batch}: not a regular file", error=DataError)


@pytest.mark.timeout(30)
def test_fifo_named_like_a_dataset_is_not_data(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "mnist.npz")
    refused(check("mnist", tmp_path), f"no MNIST data found in {tmp_path}", error=DataNotFound)
    refused(check("mnist", tmp_path / "mnist.npz"), "no MNIST data found", error=DataNotFound)


def _fail_for(monkeypatch, name: str, target: Path, code: int) -> None:
    """Make os.<name> fail with errno `code` for `target` (and anything under it) only:
    the tests run as root, whom chmod cannot keep out."""
    real = getattr(os, name)

    def fake(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path) == str(target) or str(path).startswith(f"{target}/"):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(files.os, name, fake)


def test_unreadable_data_file(tmp_path: Path, monkeypatch) -> None:
    path = formats.write_mnist_npz(tmp_path / "mnist.npz", formats.random_mnist())
    _fail_for(monkeypatch, "open", path, errno.EACCES)
    refused(check("mnist", tmp_path), f"{path}: cannot read (Permission denied)", error=DataError)


def test_folder_that_cannot_be_searched(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "locked"
    formats.write_mnist_npz(folder / "mnist.npz", formats.random_mnist())
    _fail_for(monkeypatch, "stat", folder / "mnist.npz", errno.EACCES)
    refused(check("mnist", folder), f"{folder / 'mnist.npz'}: cannot look at it", error=DataError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and searches everything")
def test_unreadable_file_for_real(tmp_path: Path) -> None:  # pragma: no cover - not as root
    path = formats.write_mnist_npz(tmp_path / "mnist.npz", formats.random_mnist())
    path.chmod(0)
    refused(check("mnist", tmp_path), f"{path}: cannot read", error=DataError)


@pytest.mark.parametrize(
    "data_dir, fragment",
    [
        ("", "empty path"),
        ("bad\0path", "not a usable path"),
        ("~no-such-user-mpbench/data", "~no-such-user-mpbench/data"),
        ("x" * 300, "File name too long"),
    ],
    ids=["empty", "NUL byte", "unknown user", "name too long"],
)
def test_unusable_data_dir(data_dir: str, fragment: str) -> None:
    for mode in ("real", "auto"):
        refused(lambda m=mode: check_data("mnist", m, data_dir, allow_download=False), fragment)


# --- pickles that ask for memory, time or a crash -----------------------------------------


def py_folder_with(tmp_path: Path, batch: object) -> tuple[Path, Path]:
    folder = formats.write_cifar_py(tmp_path, formats.random_cifar())
    raw = batch if isinstance(batch, bytes) else pickle.dumps(batch, protocol=2)
    (folder / "data_batch_1").write_bytes(raw)
    return folder, folder / "data_batch_1"


def test_pickled_array_larger_than_its_file(tmp_path: Path) -> None:
    """numpy.ndarray(shape) is allowed (arrays are rebuilt through it) but must not hand
    back a gigantic uninitialised array the reordering would then touch."""
    batch = {
        b"data": Calls(np.ndarray, (10**6, 3072), "u1"),
        b"labels": Calls(np.ndarray, (10**6,), "u1"),
    }
    folder, path = py_folder_with(tmp_path, batch)
    refused(check("cifar10", folder), f"{path}: 'data' claims 1000000 images", error=DataError)


@pytest.mark.parametrize(
    "payload, fragment",
    [
        (Calls(bytearray, 10**12), "refused to unpickle builtins.bytearray of a int"),
        (Calls(set, np.zeros(4)), "refused to unpickle builtins.set of a ndarray"),
        (Calls(frozenset, b"abc"), "refused to unpickle builtins.frozenset of a bytes"),
    ],
    ids=["bytearray(10**12)", "set(array)", "frozenset(bytes)"],
)
def test_allowed_containers_only_from_plain_data(
    tmp_path: Path, payload: object, fragment: str
) -> None:
    folder, path = py_folder_with(tmp_path, {b"data": payload})
    refused(check("cifar10", folder), str(path), fragment, error=UnsafePickle)


def test_deeply_nested_dict_key_does_not_crash(tmp_path: Path) -> None:
    """Hashing a tuple nested a million deep overflows the C stack (a segfault with the
    plain unpickler); it is refused before it is hashed."""
    deep_key = b"\x80\x02}" + b"K\x01" + b"\x85" * 1_000_000 + b"K\x02s."
    folder, path = py_folder_with(tmp_path, deep_key)
    refused(check("cifar10", folder), f"{path}: holds a tuple as a dict key", error=DataError)


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b"\x80\x04\x8f(K\x01\x85\x85\x85\x90.", "a tuple as a set item"),  # EMPTY_SET+ADDITEMS
        (b"\x80\x04(K\x01\x85\x85\x91.", "a tuple as a set item"),  # FROZENSET
        (b"(K\x01\x85K\x02d.", "a tuple as a dict key"),  # DICT (protocol 0/1)
    ],
    ids=["additems", "frozenset", "dict"],
)
def test_every_hashing_opcode_is_checked(tmp_path: Path, raw: bytes, fragment: str) -> None:
    folder, path = py_folder_with(tmp_path, raw)
    refused(check("cifar10", folder), str(path), fragment, error=DataError)


@pytest.mark.parametrize(
    "labels, fragment",
    [([2**70, 1, 1], "label 1180591620717411303424 out of range"), ([10**5000], "of 16610 bits")],
    ids=["beyond int64", "5000 digits"],
)
def test_label_too_large_for_numpy(tmp_path: Path, labels: list[int], fragment: str) -> None:
    batch = {b"data": np.zeros((len(labels), 3072), np.uint8), b"labels": labels}
    folder, path = py_folder_with(tmp_path, batch)
    refused(check("cifar10", folder), str(path), fragment, error=DataError)


def test_message_about_a_dict_with_many_keys_stays_short(tmp_path: Path) -> None:
    batch = {bytes([i % 256]) * (i + 1000): i for i in range(500)}
    folder, path = py_folder_with(tmp_path, batch)
    message = refused(check("cifar10", folder), f"{path}: no 'data' entry", error=DataError)
    assert len(message) < 2000


# --- archives ------------------------------------------------------------------------------


def _tar(path: Path, members: list[tuple[str, bytes | None]], compression: str = "gz") -> Path:
    """members: (name, data) for files, (name, None) for folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, f"w:{compression}") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return path


def _archive_in(tmp_path: Path) -> Path:
    return tmp_path / "in" / "cifar-10-binary.tar.gz"


def extracted_is_empty(homes: Any) -> None:
    extracted = homes.datasets / "extracted"
    assert not extracted.exists() or list(extracted.iterdir()) == []


def test_too_many_members(tmp_path: Path, homes) -> None:
    members = [(f"cifar-10-batches-bin/f{i}", b"") for i in range(1001)]
    archive = _tar(_archive_in(tmp_path), members)
    refused(check("cifar10", archive), "more than 1000 members", error=UnsafeArchive)
    extracted_is_empty(homes)


def test_decompressed_stream_is_bounded(tmp_path: Path, homes, monkeypatch) -> None:
    """tarfile reads pax and long-name headers whole: the decompressed stream, not only
    the members' declared sizes, must stop at a limit."""
    monkeypatch.setattr(archive_module, "MAX_STREAM_BYTES", 1 << 20)
    archive = _tar(_archive_in(tmp_path), [("cifar-10-batches-bin/big", b"\0" * (2 << 20))])
    refused(check("cifar10", archive), "unpacks to more than 1 MiB", error=UnsafeArchive)
    extracted_is_empty(homes)


@pytest.mark.parametrize(
    "members, fragment",
    [
        ([("d/a", b"1"), ("d/a", b"2")], "member 'd/a' appears twice"),
        ([("d/a", b"1"), ("d/a/b", b"2")], "d/a"),
        ([("d/" + "n" * 300, b"1")], "cannot extract member"),
    ],
    ids=["twice", "file then folder", "name too long"],
)
def test_members_that_cannot_be_written(
    tmp_path: Path, homes, members: list[tuple[str, bytes]], fragment: str
) -> None:
    archive = _tar(_archive_in(tmp_path), members)
    refused(check("cifar10", archive), str(archive), fragment, error=DataError)
    extracted_is_empty(homes)


@pytest.mark.parametrize("compression", ["xz", "bz2"])
def test_other_compressions_read_and_their_corruption_refused(
    tmp_path: Path, homes, compression: str
) -> None:
    split = formats.random_cifar(seed=4)
    folder = formats.write_cifar_bin(tmp_path / "staging", split)
    archive = _archive_in(tmp_path)  # the name says gz; the bytes decide
    archive.parent.mkdir(parents=True)
    with tarfile.open(archive, f"w:{compression}") as tar:
        tar.add(folder, arcname=folder.name)
    loaded = data.load("cifar10", mode="real", data_dir=archive, allow_download=False)
    np.testing.assert_array_equal(loaded.x_test, split.x_test)
    broken = tmp_path / "broken" / archive.name
    broken.parent.mkdir()
    broken.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    refused(check("cifar10", broken), f"{broken}: not a readable tar archive", error=DataError)


def test_xz_garbage(tmp_path: Path) -> None:
    archive = _archive_in(tmp_path)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(lzma.compress(b"x" * 100)[:12] + b"\xff" * 50)
    refused(check("cifar10", archive), "not a readable tar archive", error=DataError)


def test_unreadable_archive(tmp_path: Path, monkeypatch) -> None:
    folder = formats.write_cifar_bin(tmp_path / "staging", formats.random_cifar())
    archive = formats.tar_gz(_archive_in(tmp_path), folder)
    real_open = open

    def fake_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path) == str(archive):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    refused(check("cifar10", archive), f"{archive}: cannot read (Permission denied)")


# --- downloads --------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://[::1/mnist.npz", "http://127.0.0.1:99999/mnist.npz"])
def test_malformed_mirror_url(homes, monkeypatch, url: str) -> None:
    monkeypatch.setenv("MPBENCH_MNIST_URL", url)
    refused(lambda: check_data("mnist", "real", None, True), "not a valid URL", error=DataNotFound)
    fallback = check_data("mnist", "auto", None, True)
    assert fallback.source == "synthetic" and "not a valid URL" in (fallback.warning or "")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0", "1e300", "soon"])
def test_odd_download_timeouts_fall_back_to_the_default(monkeypatch, value: str) -> None:
    monkeypatch.setenv("MPBENCH_DOWNLOAD_TIMEOUT", value)
    assert download.download_timeout() == download.DEFAULT_TIMEOUT_S
