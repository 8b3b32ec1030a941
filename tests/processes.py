"""Finding a test's processes: every process a test starts carries MPBENCH_MARK=<mark> in its
environment (inherited by cells, their lifeline watchers and grandchildren), so "nothing was
left behind" is a scan for that mark."""

from __future__ import annotations

import psutil


def marked(mark: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose environment has MPBENCH_MARK=mark."""
    found = []
    for process in psutil.process_iter():
        try:
            live = process.status() != psutil.STATUS_ZOMBIE
            if live and process.environ().get("MPBENCH_MARK") == mark:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
