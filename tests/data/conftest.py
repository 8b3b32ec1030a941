"""Every data test runs against private caches under tmp_path and can never reach the
network: the canonical URLs point at a closed port on 127.0.0.1."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from data_formats import closed_port

from mpbench.data import download


@dataclasses.dataclass
class Homes:
    cache: Path  # $MPBENCH_CACHE
    datasets: Path  # <cache>/datasets
    keras: Path  # $KERAS_HOME/datasets
    home: Path  # $HOME


@pytest.fixture(autouse=True)
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Homes:
    cache = tmp_path / "mpbench-cache"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("MPBENCH_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras-home"))
    monkeypatch.setenv("MPBENCH_DOWNLOAD_TIMEOUT", "5")
    for var in ("MPBENCH_MNIST_URL", "MPBENCH_CIFAR10_URL"):
        monkeypatch.delenv(var, raising=False)
    port = closed_port()
    offline = {
        name: dataclasses.replace(src, url=f"http://127.0.0.1:{port}/{src.file_name}")
        for name, src in download.SOURCES.items()
    }
    monkeypatch.setattr(download, "SOURCES", offline)
    return Homes(cache, cache / "datasets", tmp_path / "keras-home" / "datasets", home)
