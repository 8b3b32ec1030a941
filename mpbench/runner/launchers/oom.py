"""The OOM killer's evidence: the memory cgroup a process runs in and the kills the kernel
counted there. Read by the run around each cell (process.py) and by a cell around its
torchrun job (torchrun.py)."""

from __future__ import annotations

from pathlib import Path


def memory_cgroup(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> Path | None:
    """This process's memory cgroup directory (cgroup v2, or v1's memory controller), where
    the OOM killer counts its kills; None when there is none to read (not Linux, no cgroup).
    Cells run in their parent's cgroup, so the parent reads the count for them."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:  # "hierarchy-id:controllers:path"
        _, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if controllers == "":  # v2; on a hybrid system it is mounted at unified/
            candidates += [root / relative, root / "unified" / relative]
        elif "memory" in controllers.split(","):
            candidates.append(root / "memory" / relative)
    return next((path for path in candidates if oom_kill_count(path) is not None), None)


def oom_kill_count(cgroup: Path | None) -> int | None:
    """The `oom_kill` count of a memory cgroup directory: the line in memory.events (v2) or
    memory.oom_control (v1). The kernel counts a kill in the victim's cgroup before it sends
    the SIGKILL. None (no evidence) when neither file is there or readable."""
    if cgroup is None:
        return None
    for name in ("memory.events", "memory.oom_control"):
        try:
            text = (cgroup / name).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None
