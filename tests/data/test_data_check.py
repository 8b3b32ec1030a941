"""`check_data`: the parent's one look at the data, which must agree with what `load` gives
each cell, print nothing, and refuse bad data with one line naming the file."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import DataCheck, DataError, DataNotFound, check_data, download
from mpbench.data.synthetic import MAX_SIZE
from mpbench.errors import InvalidInput


def agrees_with_load(check: DataCheck, **kwargs: object) -> None:
    """The check describes exactly what `load` returns for the same request."""
    warnings: list[str] = []
    loaded = data.load(check.dataset, warn=warnings.append, **kwargs)  # type: ignore[arg-type]
    described = loaded.describe()
    assert check.source == described["source"]
    assert (check.train_size, check.test_size) == (
        described["train_size"],
        described["test_size"],
    )
    assert check.origin == described["origin"]
    warnings = [w for w in warnings if not w.startswith("downloading ")]  # notify's line
    assert warnings == ([check.warning] if check.warning else [])


# --- synthetic -------------------------------------------------------------------------


@pytest.mark.parametrize("dataset, sizes", [("mnist", (60000, 10000)), ("cifar10", (50000, 10000))])
def test_synthetic_default_sizes_without_generating(
    dataset: str, sizes: tuple[int, int], homes, monkeypatch, capsys
) -> None:
    def no_generation(*args: object, **kwargs: object) -> None:
        raise AssertionError("check_data must not generate the stand-in")

    monkeypatch.setattr(data.synthetic, "generate", no_generation)
    check = check_data(dataset, "synthetic", None, allow_download=True)
    assert check == DataCheck(dataset, "synthetic", *sizes, None, None)
    assert capsys.readouterr() == ("", "")
    assert not homes.cache.exists()  # nothing located, downloaded or created


def test_synthetic_sizes_and_agreement_with_load(tmp_path: Path) -> None:
    # A hostile file in the data dir is never read in synthetic mode.
    (tmp_path / "mnist.npz").write_bytes(b"not an npz")
    kwargs = dict(mode="synthetic", data_dir=tmp_path, allow_download=False, seed=3)
    sizes = dict(synthetic_train_size=40, synthetic_test_size=12)
    check = check_data("mnist", **kwargs, **sizes)  # type: ignore[arg-type]
    assert check == DataCheck("mnist", "synthetic", 40, 12, None, None)
    agrees_with_load(check, **kwargs, **sizes)


@pytest.mark.parametrize("mode", ["synthetic", "auto", "real"])
@pytest.mark.parametrize(
    "sizes, message",
    [
        ({"synthetic_train_size": 0}, r"synthetic train size must be a positive integer, got 0"),
        ({"synthetic_test_size": -5}, r"synthetic test size must be a positive integer, got -5"),
        ({"synthetic_train_size": True}, r"synthetic train size must be a positive integer"),
        ({"synthetic_train_size": 2.5}, r"synthetic train size must be a positive integer"),
        ({"synthetic_train_size": "10"}, r"synthetic train size must be a positive integer"),
        (
            {"synthetic_test_size": MAX_SIZE + 1},
            rf"synthetic test size must be at most {MAX_SIZE}, got {MAX_SIZE + 1}",
        ),
    ],
)
def test_invalid_synthetic_size_is_one_line_in_every_mode(
    mode: str, sizes: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as info:
        check_data("cifar10", mode, None, allow_download=False, **sizes)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)
    with pytest.raises(InvalidInput, match=message):  # load() makes the same check
        data.load("cifar10", mode=mode, allow_download=False, **sizes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args, message",
    [
        (("imagenet", "real"), r"unknown dataset 'imagenet'; valid choices: mnist, cifar10"),
        (("mnist", "fake"), r"unknown data mode 'fake'; valid choices: auto, real, synthetic"),
    ],
)
def test_unknown_dataset_or_mode(args: tuple[str, str], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_data(*args, None, allow_download=False)


@pytest.mark.parametrize("seed", [1.5, "3", True, None])
def test_seed_must_be_an_integer(seed: object) -> None:
    with pytest.raises(InvalidInput, match=r"seed must be an integer"):
        check_data("mnist", "synthetic", None, False, seed=seed)  # type: ignore[arg-type]


# --- auto / real without data ------------------------------------------------------------


def test_auto_offline_falls_back_and_carries_the_warning(homes, capsys) -> None:
    kwargs = dict(mode="auto", data_dir=None, allow_download=True)
    sizes = dict(synthetic_train_size=30, synthetic_test_size=10)
    check = check_data("mnist", **kwargs, **sizes)  # type: ignore[arg-type]
    assert (check.source, check.train_size, check.test_size, check.origin) == (
        "synthetic",
        30,
        10,
        None,
    )
    assert check.warning is not None and "\n" not in check.warning
    assert "no MNIST data found in" in check.warning
    assert "could not download http://127.0.0.1:" in check.warning
    assert "using synthetic-mnist" in check.warning and "not MNIST accuracy" in check.warning
    assert capsys.readouterr() == ("", "")  # the caller decides how to show it
    agrees_with_load(check, **kwargs, **sizes)


def test_auto_with_downloads_disabled_says_so(homes) -> None:
    check = check_data("cifar10", "auto", None, allow_download=False)
    assert check.source == "synthetic"
    assert check.warning is not None and "downloads are disabled" in check.warning


@pytest.mark.parametrize("allow_download", [False, True])
def test_real_without_data_names_the_places_searched(
    tmp_path: Path, homes, allow_download: bool
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataNotFound) as info:
        check_data("cifar10", "real", empty, allow_download)
    message = str(info.value)
    assert "\n" not in message
    assert f"no CIFAR-10 data found in {empty}, {homes.datasets}, {homes.keras}" in message
    problem = "could not download" if allow_download else "downloads are disabled"
    assert problem in message


def test_missing_data_dir_is_invalid_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"data dir .*nope.* does not exist"):
        check_data("mnist", "auto", tmp_path / "nope", allow_download=False)


# --- real copies ---------------------------------------------------------------------------


def _real_copy(kind: str, root: Path) -> tuple[str, Path, Path, tuple[int, int]]:
    """(dataset, data_dir to pass, expected origin, (train, test))."""
    if kind == "npz":
        path = formats.write_mnist_npz(root / "mnist.npz", formats.random_mnist(train=9, test=4))
        return "mnist", root, path, (9, 4)
    if kind in ("idx", "idx-gz"):
        folder = formats.write_mnist_idx(root, formats.random_mnist(), gz=kind == "idx-gz")
        return "mnist", root, folder, (12, 5)
    split = formats.random_cifar(per_batch=2, test=3)
    if kind == "cifar-bin":
        return "cifar10", root, formats.write_cifar_bin(root, split), (10, 3)
    if kind == "cifar-py":
        return "cifar10", root, formats.write_cifar_py(root, split), (10, 3)
    folder = formats.write_cifar_bin(root.parent / "staging", split)
    archive = formats.tar_gz(root / "cifar-10-binary.tar.gz", folder)
    return "cifar10", root, archive, (10, 3)


@pytest.mark.parametrize("mode", ["real", "auto"])
@pytest.mark.parametrize("kind", ["npz", "idx", "idx-gz", "cifar-bin", "cifar-py", "archive"])
def test_real_copy_is_read_and_described(tmp_path: Path, kind: str, mode: str, capsys) -> None:
    dataset, data_dir, origin, sizes = _real_copy(kind, tmp_path / "in")
    check = check_data(dataset, mode, data_dir, allow_download=False)
    assert check == DataCheck(dataset, "real", *sizes, str(origin), None)
    assert capsys.readouterr() == ("", "")
    agrees_with_load(check, mode=mode, data_dir=data_dir, allow_download=False)


def test_archive_checked_in_the_parent_is_reused_by_the_cells(tmp_path: Path, homes) -> None:
    _, data_dir, archive, _ = _real_copy("archive", tmp_path / "in")
    check_data("cifar10", "real", data_dir, allow_download=False)
    extracted = homes.datasets / "extracted"
    (folder,) = extracted.iterdir()
    batch = folder / "cifar-10-batches-bin" / "data_batch_1.bin"
    inode = batch.stat().st_ino
    loaded = data.load("cifar10", mode="real", data_dir=data_dir, allow_download=False)
    assert loaded.origin == str(archive)
    assert batch.stat().st_ino == inode  # not extracted a second time


def test_a_corrupt_copy_is_refused_in_every_mode_but_synthetic(tmp_path: Path) -> None:
    folder = formats.write_mnist_idx(tmp_path, formats.random_mnist())
    path = folder / "t10k-labels-idx1-ubyte"
    path.write_bytes(path.read_bytes()[:-1])
    for mode in ("real", "auto"):
        with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte: truncated") as info:
            check_data("mnist", mode, tmp_path, allow_download=False)
        assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert check_data("mnist", "synthetic", tmp_path, allow_download=False).source == "synthetic"


# --- downloads -----------------------------------------------------------------------------


def _serve_file(monkeypatch: pytest.MonkeyPatch, dataset: str, served: Path) -> None:
    digest = hashlib.sha256(served.read_bytes()).hexdigest()
    src = dataclasses.replace(
        download.SOURCES[dataset], url=served.as_uri(), sha256=digest, size=None
    )
    monkeypatch.setitem(download.SOURCES, dataset, src)


@pytest.mark.parametrize("mode", ["real", "auto"])
def test_download_lands_in_the_cache_for_the_cells(
    tmp_path: Path, homes, monkeypatch, capsys, mode: str
) -> None:
    split = formats.random_mnist(seed=4, train=7, test=3)
    _serve_file(monkeypatch, "mnist", formats.write_mnist_npz(tmp_path / "served.npz", split))
    notes: list[str] = []
    check = check_data("mnist", mode, None, allow_download=True, notify=notes.append)
    cached = homes.datasets / "mnist.npz"
    assert check == DataCheck("mnist", "real", 7, 3, str(cached), None)
    assert len(notes) == 1 and "downloading" in notes[0]
    assert capsys.readouterr() == ("", "")
    # A cell that may not download finds the same file in the cache.
    loaded = data.load("mnist", mode="real", allow_download=False)
    assert loaded.origin == str(cached)
    np.testing.assert_array_equal(loaded.x_train, split.x_train)


def test_download_of_a_cifar_archive_is_checked_whole(tmp_path: Path, homes, monkeypatch) -> None:
    folder = formats.write_cifar_bin(tmp_path / "staging", formats.random_cifar(per_batch=1))
    served = formats.tar_gz(tmp_path / "served" / "cifar-10-binary.tar.gz", folder)
    _serve_file(monkeypatch, "cifar10", served)
    check = check_data("cifar10", "auto", None, allow_download=True)
    assert (check.source, check.train_size, check.test_size) == ("real", 5, 4)
    assert check.origin == str(homes.datasets / "cifar-10-binary.tar.gz")
    assert len(list((homes.datasets / "extracted").iterdir())) == 1


def test_download_that_cannot_be_written_falls_back_in_auto(tmp_path: Path, homes) -> None:
    homes.cache.mkdir(parents=True)
    homes.datasets.write_text("a file where the datasets folder should be")
    check = check_data("mnist", "auto", None, allow_download=True)
    assert check.source == "synthetic"
    assert check.warning is not None and f"cannot write into {homes.datasets}" in check.warning
    with pytest.raises(DataNotFound, match=r"cannot write into"):
        check_data("mnist", "real", None, allow_download=True)
