"""The `load` contract: look-up order, modes, the description, bad input."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import DataError, locations
from mpbench.errors import InvalidInput
from mpbench.results.schema import DataInfo


def test_look_up_order_data_dir_then_mpbench_cache_then_keras(tmp_path: Path, homes) -> None:
    in_dir, in_cache, in_keras = (formats.random_mnist(seed=s) for s in (1, 2, 3))
    formats.write_mnist_npz(homes.keras / "mnist.npz", in_keras)
    load = dict(mode="real", allow_download=False)

    assert data.load("mnist", **load).origin == str(homes.keras / "mnist.npz")
    formats.write_mnist_idx(homes.datasets, in_cache, gz=True)
    loaded = data.load("mnist", **load)
    assert loaded.origin == str(homes.datasets)
    np.testing.assert_array_equal(loaded.x_train, in_cache.x_train)
    formats.write_mnist_npz(tmp_path / "mine" / "mnist.npz", in_dir)
    loaded = data.load("mnist", data_dir=tmp_path / "mine", **load)
    np.testing.assert_array_equal(loaded.x_train, in_dir.x_train)
    # A data dir without the dataset falls through to the caches.
    (tmp_path / "empty").mkdir()
    assert data.load("mnist", data_dir=tmp_path / "empty", **load).origin == str(homes.datasets)


def test_npz_preferred_over_idx_in_one_place(homes) -> None:
    npz, idx = formats.random_mnist(seed=1), formats.random_mnist(seed=2)
    formats.write_mnist_idx(homes.datasets, idx)
    formats.write_mnist_npz(homes.datasets / "mnist.npz", npz)
    loaded = data.load("mnist", mode="real", allow_download=False)
    np.testing.assert_array_equal(loaded.x_test, npz.x_test)


def test_cache_locations_follow_the_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("MPBENCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert locations.cache_dir() == tmp_path / "xdg" / "mpbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert locations.cache_dir() == tmp_path / "h" / ".cache" / "mpbench"
    monkeypatch.delenv("KERAS_HOME")
    assert locations.keras_datasets_dir() == tmp_path / "h" / ".keras" / "datasets"
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "k"))
    assert locations.keras_datasets_dir() == tmp_path / "k" / "datasets"
    monkeypatch.setenv("MPBENCH_CACHE", str(tmp_path / "explicit"))
    assert locations.datasets_dir() == tmp_path / "explicit" / "datasets"


def test_describe_has_exactly_the_data_info_fields(tmp_path: Path) -> None:
    formats.write_mnist_npz(tmp_path / "mnist.npz", formats.random_mnist())
    real = data.load("mnist", mode="real", data_dir=tmp_path, allow_download=False)
    fake = data.load("cifar10", mode="synthetic", synthetic_train_size=20, synthetic_test_size=10)
    fields = {f.name for f in dataclasses.fields(DataInfo)}
    for loaded in (real, fake):
        assert set(loaded.describe()) == fields
        DataInfo(**loaded.describe())
    assert fake.describe() == {
        "name": "synthetic-cifar10",
        "source": "synthetic",
        "origin": None,
        "sha256": None,
        "train_size": 20,
        "test_size": 10,
    }


def test_synthetic_mode_never_reads_real_data(tmp_path: Path) -> None:
    formats.write_mnist_npz(tmp_path / "mnist.npz", formats.random_mnist())
    loaded = data.load(
        "mnist", mode="synthetic", data_dir=tmp_path, synthetic_train_size=30,
        synthetic_test_size=10,
    )  # fmt: skip
    assert loaded.describe()["name"] == "synthetic-mnist"
    assert loaded.x_train.shape == (30, 28, 28)


def test_malformed_real_data_is_an_error_not_a_fallback(tmp_path: Path) -> None:
    (tmp_path / "mnist.npz").write_bytes(b"PK\x03\x04 definitely not a zip")
    warnings: list[str] = []
    with pytest.raises(DataError, match=r"mnist.npz: not a valid .npz file"):
        data.load("mnist", mode="auto", data_dir=tmp_path, warn=warnings.append)
    assert warnings == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dataset": "imagenet"}, r"unknown dataset 'imagenet'; valid choices: mnist, cifar10"),
        ({"dataset": "mnist", "mode": "fake"}, r"unknown data mode 'fake'; valid choices: auto"),
        ({"dataset": "mnist", "data_dir": "/nonexistent/mpbench"}, r"data dir .* does not exist"),
        (
            {"dataset": "mnist", "mode": "synthetic", "synthetic_train_size": 0},
            r"synthetic train size must be a positive integer, got 0",
        ),
    ],
)
def test_bad_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        data.load(**kwargs)  # type: ignore[arg-type]


def test_errors_are_invalid_input() -> None:
    for error in (
        data.DataError,
        data.UnsafePickle,
        data.UnsafeArchive,
        data.ChecksumMismatch,
        data.DataNotFound,
    ):
        assert issubclass(error, InvalidInput)
