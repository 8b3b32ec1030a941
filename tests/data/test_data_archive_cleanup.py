"""Nothing extracted from an archive whose data is refused stays in the cache.

The members of such an archive can all be plain files (so extraction succeeds and is
renamed into `<cache>/datasets/extracted/<digest>/`) while the batches inside are refused
when parsed: a pickle that would run code, a truncated batch. That extraction must go too,
or it would sit in the cache and be "reused" by the next run.
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import DataError, UnsafePickle, check_data
from mpbench.data.locations import sha256_file


class RunsCommand:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (self.command,))


def hostile_py_archive(root: Path, marker: Path) -> Path:
    """cifar-10-python.tar.gz whose six batches would each run `touch marker`."""
    folder = formats.write_cifar_py(root / "staging", formats.random_cifar())
    for name in (*formats.CIFAR_TRAIN, "test_batch"):
        batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": RunsCommand(f"touch {marker}")}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return formats.tar_gz(root / "in" / "cifar-10-python.tar.gz", folder)


def broken_bin_archive(root: Path, damage: str) -> Path:
    folder = formats.write_cifar_bin(root / "staging", formats.random_cifar())
    if damage == "truncated batch":
        batch = folder / "data_batch_2.bin"
        batch.write_bytes(batch.read_bytes()[:-7])
    elif damage == "missing batch":
        (folder / "test_batch.bin").unlink()
    elif damage == "label out of range":
        raw = bytearray((folder / "data_batch_4.bin").read_bytes())
        raw[0] = 200
        (folder / "data_batch_4.bin").write_bytes(bytes(raw))
    elif damage == "no batches":
        shutil.rmtree(folder)
        folder.mkdir()
        (folder / "readme.txt").write_text("nothing here")
    return formats.tar_gz(root / "in" / "cifar-10-binary.tar.gz", folder)


def cache_is_clean(datasets: Path) -> None:
    extracted = datasets / "extracted"
    left = (
        sorted(p.relative_to(datasets) for p in extracted.rglob("*")) if extracted.exists() else []
    )
    assert left == [], left


@pytest.mark.parametrize("via", ["check_data", "load"])
def test_six_hostile_batches_leave_nothing_behind(tmp_path: Path, homes, via: str) -> None:
    marker = tmp_path / "pwned"
    archive = hostile_py_archive(tmp_path, marker)
    with pytest.raises(UnsafePickle) as info:
        if via == "check_data":
            check_data("cifar10", "real", archive.parent, allow_download=False)
        else:
            data.load("cifar10", mode="auto", data_dir=archive.parent, allow_download=False)
    assert not marker.exists()
    cache_is_clean(homes.datasets)
    # The message names the archive and the member, not the deleted extraction.
    assert str(info.value).startswith(
        f"{archive}: cifar-10-batches-py/data_batch_1: refused to unpickle "
    ), str(info.value)
    assert str(homes.datasets) not in str(info.value)


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncated batch", r"data_batch_2.bin: 9212 bytes is not a whole number"),
        ("missing batch", r"CIFAR-10 batch test_batch.bin is missing"),
        ("label out of range", r"data_batch_4.bin: label 200 out of range"),
        ("no batches", r"cifar-10-binary.tar.gz: holds neither cifar-10-batches-bin/ nor"),
    ],
)
def test_refused_batches_leave_nothing_behind(
    tmp_path: Path, homes, damage: str, message: str
) -> None:
    archive = broken_bin_archive(tmp_path, damage)
    for _ in range(2):  # and the second attempt refuses it the same way (nothing reused)
        with pytest.raises(DataError, match=message):
            check_data("cifar10", "real", archive, allow_download=False)
        cache_is_clean(homes.datasets)


def test_hostile_extraction_left_by_an_older_run_is_removed(tmp_path: Path, homes) -> None:
    """An extraction already in the cache (as older versions left them) is read, refused,
    extracted afresh from the archive, refused again, and removed."""
    marker = tmp_path / "pwned"
    archive = hostile_py_archive(tmp_path, marker)
    stale = homes.datasets / "extracted" / sha256_file(archive)[:16]
    shutil.copytree(tmp_path / "staging", stale / "cifar-10-batches-py")
    with pytest.raises(UnsafePickle):
        check_data("cifar10", "real", archive, allow_download=False)
    assert not marker.exists()
    cache_is_clean(homes.datasets)


def test_damaged_extraction_of_a_good_archive_is_healed(tmp_path: Path, homes) -> None:
    """A batch deleted from the cached extraction by hand: extracted again, not refused."""
    split = formats.random_cifar(seed=9)
    folder = formats.write_cifar_bin(tmp_path / "staging", split)
    archive = formats.tar_gz(tmp_path / "in" / "cifar-10-binary.tar.gz", folder)
    data.load("cifar10", mode="real", data_dir=archive, allow_download=False)
    extracted = homes.datasets / "extracted" / sha256_file(archive)[:16] / folder.name
    (extracted / "data_batch_3.bin").unlink()
    (extracted / "test_batch.bin").write_bytes(b"garbage")
    check = check_data("cifar10", "real", archive, allow_download=False)
    assert (check.source, check.origin) == ("real", str(archive))
    loaded = data.load("cifar10", mode="real", data_dir=archive, allow_download=False)
    np.testing.assert_array_equal(loaded.x_test, split.x_test)
    assert (extracted / "data_batch_3.bin").is_file()


def test_a_refused_archive_does_not_block_a_good_one(tmp_path: Path, homes) -> None:
    bad = broken_bin_archive(tmp_path / "bad", "truncated batch")
    with pytest.raises(DataError):
        check_data("cifar10", "real", bad, allow_download=False)
    split = formats.random_cifar(seed=11)
    good_folder = formats.write_cifar_bin(tmp_path / "good" / "staging", split)
    good = formats.tar_gz(tmp_path / "good" / "cifar-10-binary.tar.gz", good_folder)
    assert check_data("cifar10", "real", good, allow_download=False).source == "real"
    (kept,) = (homes.datasets / "extracted").iterdir()
    assert kept.name == sha256_file(good)[:16]
