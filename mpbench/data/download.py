"""Fetch the canonical dataset files into the mpbench cache, verifying the published SHA-256.

Offline machines must fail fast: host names are resolved with a short deadline before
connecting (unless a proxy does that), and every socket operation has a timeout.
"""

from __future__ import annotations

import hashlib
import http.client
import math
import os
import socket
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mpbench.data.errors import ChecksumMismatch
from mpbench.data.locations import datasets_dir

DEFAULT_TIMEOUT_S = 20.0
MAX_TIMEOUT_S = 24 * 3600.0
DNS_TIMEOUT_S = 5.0
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Source:
    """One canonical file and the SHA-256 its publisher states for it."""

    dataset: str
    url: str
    sha256: str
    file_name: str  # name in the mpbench cache
    size: int | None  # bytes, when published; a larger download is cut off
    url_env: str  # environment variable that overrides the URL (a mirror)
    digest_from: str  # where the SHA-256 is published


SOURCES: dict[str, Source] = {
    "mnist": Source(
        dataset="mnist",
        url="https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz",
        sha256="731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1",
        file_name="mnist.npz",
        size=11490434,
        url_env="MPBENCH_MNIST_URL",
        digest_from="keras.datasets.mnist.load_data (file_hash)",
    ),
    # The binary archive: reading it never involves a pickle.
    "cifar10": Source(
        dataset="cifar10",
        url="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
        sha256="c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
        file_name="cifar-10-binary.tar.gz",
        size=170052171,
        url_env="MPBENCH_CIFAR10_URL",
        digest_from="tensorflow_datasets url_checksums/cifar10.txt",
    ),
}


class DownloadFailed(Exception):
    """The file could not be fetched (offline, refused, HTTP error). Not a user error by
    itself: `load` decides between falling back and reporting DataNotFound."""


def source(dataset: str) -> Source:
    """The canonical source, with the URL replaced by `$MPBENCH_<DATASET>_URL` if set."""
    src = SOURCES[dataset]
    mirror = os.environ.get(src.url_env)
    return replace(src, url=mirror) if mirror else src


def download_timeout() -> float:
    """`$MPBENCH_DOWNLOAD_TIMEOUT` seconds; the default where it is not a positive finite
    number (sockets refuse NaN, negative or infinite timeouts with odd errors)."""
    try:
        value = float(os.environ.get("MPBENCH_DOWNLOAD_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S else DEFAULT_TIMEOUT_S


def fetch_dataset(dataset: str, notify: Callable[[str], None] | None = None) -> Path:
    """Download `dataset`'s canonical file into the mpbench cache; returns its path."""
    src = source(dataset)
    return fetch(src.url, src.sha256, datasets_dir() / src.file_name, src.size, notify=notify)


def fetch(
    url: str,
    sha256: str,
    dest: Path,
    size: int | None = None,
    timeout: float | None = None,
    notify: Callable[[str], None] | None = None,
) -> Path:
    """Download `url` to `dest` via a temporary file in the same folder; only a file whose
    SHA-256 equals `sha256` is moved into place. A mismatch deletes it and raises.
    `notify` hears one line once the host resolves (offline, it stays silent)."""
    timeout = download_timeout() if timeout is None else timeout
    _resolve_quickly(url, min(timeout, DNS_TIMEOUT_S))
    if notify is not None:
        notify(f"downloading {url} into {dest}; it must match SHA-256 {sha256[:16]}…")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    except OSError as exc:
        raise DownloadFailed(f"cannot write into {dest.parent} ({exc})") from exc
    tmp = Path(tmp_name)
    try:
        digest, received = _stream(url, fd, timeout, size)
        if received == 0 or digest != sha256.lower() or (size is not None and received != size):
            raise ChecksumMismatch(
                f"{url}: downloaded {received} bytes with SHA-256 {digest}, but the "
                f"published SHA-256 is {sha256}; the download was deleted"
            )
        try:
            os.replace(tmp, dest)
        except OSError as exc:  # e.g. a folder already sits under the file's name
            raise DownloadFailed(f"cannot move the download to {dest} ({exc})") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _stream(url: str, fd: int, timeout: float, size: int | None) -> tuple[str, int]:
    digest = hashlib.sha256()
    received = 0
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            while chunk := resp.read(_CHUNK):
                received += len(chunk)
                if size is not None and received > size:
                    break  # longer than published: cannot match, stop reading
                digest.update(chunk)
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        raise DownloadFailed(f"could not download {url}: HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise DownloadFailed(f"could not download {url}: {exc.reason}") from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:
        # timeouts, resets, an unknown URL scheme, a body cut short (IncompleteRead)
        raise DownloadFailed(f"could not download {url}: {exc}") from exc
    return digest.hexdigest(), received


def _resolve_quickly(url: str, deadline: float) -> None:
    """Resolve the host in a helper thread so a missing DNS server costs seconds, not the
    resolver's own minutes-long retry schedule. Skipped where a proxy resolves names."""
    try:  # a mirror URL comes from the environment: "http://[::1", "http://h:99999/"
        parts = urllib.parse.urlsplit(url)
        port = parts.port or 443
    except ValueError as exc:
        raise DownloadFailed(f"could not download {url}: not a valid URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    if urllib.request.getproxies().get(parts.scheme):
        return
    outcome: dict[str, BaseException | None] = {}

    def resolve() -> None:
        try:
            socket.getaddrinfo(parts.hostname, port)
            outcome["error"] = None
        except (OSError, ValueError) as exc:  # ValueError: a host name idna cannot encode
            outcome["error"] = exc

    worker = threading.Thread(target=resolve, name="mpbench-dns", daemon=True)
    worker.start()
    worker.join(deadline)
    if "error" not in outcome:
        raise DownloadFailed(
            f"could not download {url}: resolving {parts.hostname} took over {deadline:g} s "
            "(offline?)"
        )
    if outcome["error"] is not None:
        raise DownloadFailed(
            f"could not download {url}: cannot resolve {parts.hostname} ({outcome['error']})"
        )
