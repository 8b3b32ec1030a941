"""What `ps`, `top` and psutil call mpbench's processes: the cell sets its name whether it
was forked or started new (cell.py), the fork server its own (zygote.py), a warm
server its own (warm.py)."""

from __future__ import annotations

import ctypes
import sys

PR_SET_NAME = 15  # <linux/prctl.h>
# What `ps` and `top` call a cell and a server (the kernel keeps 15 bytes of a name).
CELL_NAME = "mpbench-cell"
SERVER_NAME = "mpbench-forksrv"
WARM_SERVER_NAME = "mpbench-warmsrv"  # a warm server (warm.py), which forks SERVER_NAMEs
WATCHER_NAME = "mpbench-watcher"  # a cell's lifeline watcher (cell.py)


def set_process_name(name: str) -> None:
    """The name `ps`, `top` and psutil's name() show (15 bytes at most): every fork of a
    server would otherwise show the server's command line."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
