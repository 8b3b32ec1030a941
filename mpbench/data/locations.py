"""Where datasets live on disk: the mpbench cache and the Keras cache.

Both are read from the environment at call time (not import time), so a test or a user can
point them elsewhere with `MPBENCH_CACHE`, `XDG_CACHE_HOME`, `HOME` or `KERAS_HOME`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mpbench.cache import cache_dir


def datasets_dir() -> Path:
    """Where mpbench keeps (and downloads) dataset files: `<cache>/datasets`."""
    return cache_dir() / "datasets"


def keras_datasets_dir() -> Path:
    """Keras' own download cache: `$KERAS_HOME/datasets`, else `~/.keras/datasets`."""
    keras_home = os.environ.get("KERAS_HOME")
    base = Path(keras_home).expanduser() if keras_home else Path.home() / ".keras"
    return base / "datasets"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()
