"""Where mpbench keeps what it caches (datasets, measured peaks): one rule for every user."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The mpbench cache root: `$MPBENCH_CACHE`, else `$XDG_CACHE_HOME/mpbench`, else
    `~/.cache/mpbench` (the XDG default)."""
    explicit = os.environ.get("MPBENCH_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "mpbench"
