"""Downloads: SHA-256 verification against a local server (file:// and 127.0.0.1 HTTP),
offline behaviour, and the URL override. Never touches the network."""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import data_formats as formats
import numpy as np
import pytest

from mpbench import data
from mpbench.data import ChecksumMismatch, DataNotFound, download


@dataclasses.dataclass
class Server:
    url: str  # base URL, ends with "/"
    root: Path
    requests: list[str]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A real HTTP server on 127.0.0.1 serving tmp_path/served, in a daemon thread."""
    root = tmp_path / "served"
    root.mkdir()
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            requests.append(self.path)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield Server(f"http://127.0.0.1:{httpd.server_address[1]}/", root, requests)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_fetch_over_http_verifies_and_keeps(server: Server, tmp_path: Path) -> None:
    served = server.root / "blob.bin"
    served.write_bytes(np.random.default_rng(0).bytes(300_000))
    dest = tmp_path / "cache" / "blob.bin"
    got = download.fetch(server.url + "blob.bin", sha(served), dest, size=300_000, timeout=5)
    assert got == dest
    assert dest.read_bytes() == served.read_bytes()
    assert leftovers(dest.parent) == ["blob.bin"]  # no .part file left
    assert server.requests == ["/blob.bin"]


def test_checksum_mismatch_deletes_the_download(server: Server, tmp_path: Path) -> None:
    (server.root / "blob.bin").write_bytes(b"tampered content")
    dest = tmp_path / "cache" / "blob.bin"
    expected = hashlib.sha256(b"genuine content").hexdigest()
    with pytest.raises(ChecksumMismatch, match=r"blob.bin: downloaded 16 bytes with SHA-256 "):
        download.fetch(server.url + "blob.bin", expected, dest, timeout=5)
    assert leftovers(dest.parent) == []


def test_download_larger_than_published_size_is_cut_off(server: Server, tmp_path: Path) -> None:
    served = server.root / "big.bin"
    served.write_bytes(b"\x00" * (3 << 20))
    dest = tmp_path / "cache" / "big.bin"
    with pytest.raises(ChecksumMismatch, match=r"published SHA-256"):
        download.fetch(server.url + "big.bin", sha(served), dest, size=1 << 20, timeout=5)
    assert leftovers(dest.parent) == []


def test_fetch_from_file_url(tmp_path: Path) -> None:
    served = tmp_path / "mnist.npz"
    formats.write_mnist_npz(served, formats.random_mnist())
    dest = tmp_path / "cache" / "mnist.npz"
    download.fetch(served.as_uri(), sha(served), dest, timeout=5)
    assert dest.read_bytes() == served.read_bytes()
    with pytest.raises(ChecksumMismatch):
        download.fetch(served.as_uri(), "0" * 64, tmp_path / "other" / "mnist.npz", timeout=5)
    assert leftovers(tmp_path / "other") == []


def test_http_error_is_a_download_failure(server: Server, tmp_path: Path) -> None:
    with pytest.raises(download.DownloadFailed, match=r"HTTP 404"):
        download.fetch(server.url + "missing.bin", "0" * 64, tmp_path / "x.bin", timeout=5)


def _serve_mnist(server: Server, monkeypatch: pytest.MonkeyPatch) -> formats.Split:
    split = formats.random_mnist(seed=9)
    served = formats.write_mnist_npz(server.root / "mnist.npz", split)
    src = dataclasses.replace(
        download.SOURCES["mnist"], url=server.url + "mnist.npz", sha256=sha(served), size=None
    )
    monkeypatch.setitem(download.SOURCES, "mnist", src)
    return split


def test_load_downloads_into_the_cache(server: Server, homes, monkeypatch) -> None:
    split = _serve_mnist(server, monkeypatch)
    notes: list[str] = []
    loaded = data.load("mnist", mode="real", warn=notes.append)
    np.testing.assert_array_equal(loaded.x_train, split.x_train)
    cached = homes.datasets / "mnist.npz"
    assert loaded.origin == str(cached)
    assert loaded.sha256 == {"mnist.npz": sha(server.root / "mnist.npz")}
    assert any("downloading" in n and "mnist.npz" in n for n in notes)
    # The second load finds the cached copy: no new request.
    data.load("mnist", mode="real")
    assert server.requests == ["/mnist.npz"]


def test_cifar_archive_download_is_extracted(server: Server, homes, monkeypatch) -> None:
    split = formats.random_cifar(seed=10)
    folder = formats.write_cifar_bin(server.root / "staging", split)
    served = formats.tar_gz(server.root / "cifar-10-binary.tar.gz", folder)
    src = dataclasses.replace(
        download.SOURCES["cifar10"], url=server.url + served.name, sha256=sha(served), size=None
    )
    monkeypatch.setitem(download.SOURCES, "cifar10", src)
    loaded = data.load("cifar10", mode="auto", warn=lambda _: None)
    assert loaded.describe()["name"] == "cifar10"
    np.testing.assert_array_equal(loaded.x_test, split.x_test)
    assert loaded.origin == str(homes.datasets / "cifar-10-binary.tar.gz")


def test_load_checksum_mismatch_is_an_error_even_in_auto(server, homes, monkeypatch) -> None:
    _serve_mnist(server, monkeypatch)
    src = dataclasses.replace(download.SOURCES["mnist"], sha256="1" * 64)
    monkeypatch.setitem(download.SOURCES, "mnist", src)
    with pytest.raises(ChecksumMismatch, match=r"the download was deleted"):
        data.load("mnist", mode="auto", warn=lambda _: None)
    assert leftovers(homes.datasets) == []


def test_url_override_from_environment(server: Server, homes, monkeypatch) -> None:
    split = _serve_mnist(server, monkeypatch)
    (server.root / "mirror").mkdir()
    (server.root / "mnist.npz").rename(server.root / "mirror" / "mnist.npz")
    src = dataclasses.replace(download.SOURCES["mnist"], url="http://127.0.0.1:1/unused")
    monkeypatch.setitem(download.SOURCES, "mnist", src)
    monkeypatch.setenv("MPBENCH_MNIST_URL", server.url + "mirror/mnist.npz")
    loaded = data.load("mnist", mode="real", warn=lambda _: None)
    np.testing.assert_array_equal(loaded.y_test, split.y_test)
    assert server.requests == ["/mirror/mnist.npz"]


@pytest.mark.timeout(60)  # a refused connection must end the attempt, not hang it
def test_offline_real_fails_with_a_clear_error(homes) -> None:
    with pytest.raises(DataNotFound) as info:
        data.load("cifar10", mode="real", warn=lambda _: None)
    message = str(info.value)
    assert "no CIFAR-10 data found in" in message
    assert str(homes.datasets) in message and str(homes.keras) in message
    assert "could not download http://127.0.0.1:" in message
    assert "\n" not in message


def test_offline_auto_falls_back_with_a_warning(homes) -> None:
    warnings: list[str] = []
    loaded = data.load(
        "mnist",
        mode="auto",
        synthetic_train_size=50,
        synthetic_test_size=20,
        warn=warnings.append,
    )
    assert loaded.describe()["name"] == "synthetic-mnist"
    assert loaded.describe()["source"] == "synthetic"
    fallback = [w for w in warnings if "synthetic" in w]
    assert len(fallback) == 1 and "\n" not in fallback[0]
    assert "using synthetic-mnist" in fallback[0] and "not MNIST accuracy" in fallback[0]


def test_no_download_when_not_allowed(server: Server, homes, monkeypatch) -> None:
    _serve_mnist(server, monkeypatch)
    with pytest.raises(DataNotFound, match=r"downloads are disabled"):
        data.load("mnist", mode="real", allow_download=False)
    assert server.requests == []


@pytest.mark.timeout(60)
def test_unresolvable_host_fails_without_connecting(tmp_path: Path) -> None:
    # .invalid is reserved (RFC 2606): resolution fails on any machine, online or not.
    with pytest.raises(download.DownloadFailed, match=r"cannot resolve mpbench.invalid"):
        download.fetch("https://mpbench.invalid/x.bin", "0" * 64, tmp_path / "x", timeout=5)
    assert not (tmp_path / "x").exists()


def test_refused_port_is_a_download_failure(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{formats.closed_port()}/x.bin"
    with pytest.raises(download.DownloadFailed, match=r"could not download"):
        download.fetch(url, "0" * 64, tmp_path / "x", timeout=5)
