"""Nothing in a data file is ever executed, and no archive writes outside its folder."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import tarfile
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import UnsafeArchive, UnsafePickle, safe_pickle
from mpbench.data.archive import extract_safely


class RunsCommand:
    """Unpickling this calls os.system(command): the classic pickle payload."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (self.command,))


class CallsFunction:
    def __init__(self, func, *args) -> None:  # type: ignore[no-untyped-def]
        self.func, self.args = func, args

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (self.func, self.args)


def malicious_batch(marker: Path, protocol: int) -> bytes:
    """A CIFAR-looking batch whose labels entry would create `marker` when unpickled."""
    return pickle.dumps(
        {
            b"data": np.zeros((2, 3072), np.uint8),
            b"labels": RunsCommand(f"touch {marker}"),
            b"batch_label": b"training batch 1 of 5",
        },
        protocol=protocol,
    )


def test_the_payload_is_real(tmp_path: Path) -> None:
    """Control: an ordinary unpickler (in a child process) does run the command."""
    marker = tmp_path / "pwned"
    code = "import pickle,sys; pickle.loads(sys.stdin.buffer.read(), encoding='bytes')"
    subprocess.run(
        [sys.executable, "-c", code], input=malicious_batch(marker, 2), check=False, timeout=60
    )
    assert marker.exists()


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_pickle_that_runs_a_command_is_refused(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    split = formats.random_cifar()
    folder = formats.write_cifar_py(tmp_path / "in", split)
    (folder / "data_batch_1").write_bytes(malicious_batch(marker, protocol))
    with pytest.raises(UnsafePickle, match=r"data_batch_1: refused to unpickle (posix|os)\.system"):
        data.load("cifar10", mode="real", data_dir=tmp_path / "in", allow_download=False)
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload, refused",
    [
        (CallsFunction(eval, "1+1"), r"builtins\.eval"),
        (CallsFunction(subprocess.Popen, ["true"]), r"subprocess\.Popen"),
        (CallsFunction(getattr, "", "join"), r"builtins\.getattr"),
        (CallsFunction(np.load, "x.npy"), r"numpy\.load"),
        (CallsFunction(__import__, "os"), r"builtins\.__import__"),
    ],
)
def test_other_globals_are_refused(payload: object, refused: str) -> None:
    raw = pickle.dumps({b"labels": payload}, protocol=2, fix_imports=False)
    with pytest.raises(UnsafePickle, match=f"batch: refused to unpickle {refused}"):
        safe_pickle.loads(raw, "batch")


def test_codecs_encode_only_for_latin1() -> None:
    """`_codecs.encode` is allowed because protocol 2 spells bytes with it; any other codec
    (e.g. the zlib or base64 bytes codecs) is refused."""
    import _codecs

    raw = pickle.dumps(CallsFunction(_codecs.encode, "eJwLyc8rycxLBwAO0gP+", "base64"), 2)
    with pytest.raises(UnsafePickle, match=r"_codecs.encode with encoding 'base64'"):
        safe_pickle.loads(raw, "batch")
    assert safe_pickle.loads(pickle.dumps(b"\x00\xff", protocol=2), "batch") == b"\x00\xff"


def test_persistent_ids_are_refused() -> None:
    buffer = io.BytesIO()

    class WithPersistentId(pickle.Pickler):
        def persistent_id(self, obj):  # type: ignore[no-untyped-def]
            return "external" if obj == "secret" else None

    WithPersistentId(buffer, protocol=2).dump(["secret"])
    with pytest.raises(UnsafePickle, match=r"refused to unpickle a persistent id"):
        safe_pickle.loads(buffer.getvalue(), "batch")


def test_plain_data_is_admitted() -> None:
    value = {b"a": [1, 2.5, "x", b"y", (None, True)], "s": {1, 2}, "f": frozenset({3})}
    for protocol in (0, 2, 4, 5):
        assert safe_pickle.loads(pickle.dumps(value, protocol=protocol), "ok") == value


# --- archives ----------------------------------------------------------------------------


def _add_file(tar: tarfile.TarFile, name: str, content: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(content)
    tar.addfile(info, io.BytesIO(content))


def _unsafe_archive(path: Path, kind: str, outside: Path) -> Path:
    """A genuine-looking binary archive with one hostile member."""
    split = formats.random_cifar()
    folder = formats.write_cifar_bin(path.parent / "staging", split)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
        if kind == "dotdot":
            _add_file(tar, f"cifar-10-batches-bin/../../{outside.name}", b"escaped")
        elif kind == "absolute":
            _add_file(tar, str(outside), b"escaped")
        elif kind in ("symlink", "hardlink"):
            info = tarfile.TarInfo("cifar-10-batches-bin/link")
            info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
            info.linkname = str(outside)
            tar.addfile(info)
            # then a write through the link, as a real exploit would do
            _add_file(tar, "cifar-10-batches-bin/link", b"escaped")
        elif kind == "device":
            info = tarfile.TarInfo("cifar-10-batches-bin/null")
            info.type = tarfile.CHRTYPE
            info.devmajor, info.devminor = 1, 3
            tar.addfile(info)
        elif kind == "fifo":
            info = tarfile.TarInfo("cifar-10-batches-bin/pipe")
            info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    return path


@pytest.mark.parametrize(
    "kind, message",
    [
        ("dotdot", "climbs out of the folder with '..'"),
        ("absolute", "has an absolute path"),
        ("symlink", "is a link"),
        ("hardlink", "is a link"),
        ("device", "is a device or special file"),
        ("fifo", "is a device or special file"),
    ],
)
def test_unsafe_archive_is_refused(tmp_path: Path, homes, kind: str, message: str) -> None:
    outside = tmp_path / "outside.txt"
    archive = _unsafe_archive(tmp_path / "in" / "cifar-10-binary.tar.gz", kind, outside)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(UnsafeArchive, match=message):
        data.load("cifar10", mode="real", data_dir=archive.parent, allow_download=False)
    assert not outside.exists()
    # Nothing was left behind: no partial extraction in the cache, no stray file anywhere.
    extracted = homes.datasets / "extracted"
    assert not extracted.exists() or list(extracted.iterdir()) == []
    cache_folders = {homes.cache, homes.datasets, extracted}
    after = sorted(p for p in tmp_path.rglob("*") if p not in cache_folders)
    assert after == before


def test_extract_safely_refuses_before_writing_the_escape(tmp_path: Path) -> None:
    outside = tmp_path / "escape.txt"
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        _add_file(tar, "ok/file.bin", b"fine")
        _add_file(tar, "../escape.txt", b"escaped")
    with pytest.raises(UnsafeArchive):
        extract_safely(archive, tmp_path / "target" / "x")
    assert not outside.exists()
    assert not (tmp_path / "target" / "x").exists()
    assert list((tmp_path / "target").iterdir()) == []


def test_extracted_files_are_plain_and_private_mode_bits_dropped(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("dir/tool")
        info.size = 2
        info.mode = 0o4777  # setuid + world-writable in the archive
        tar.addfile(info, io.BytesIO(b"hi"))
    target = extract_safely(archive, tmp_path / "out")
    extracted = target / "dir" / "tool"
    assert extracted.read_bytes() == b"hi"
    assert extracted.stat().st_mode & 0o7777 == 0o644 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
