"""Asking git, for `mpbench run` (the commit it measured, recorded in environment.json) and
`mpbench store` / `history` (mpbench/results/commits.py): one way to call it."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str | None:
    """git's answer, or None where there is no git, no repository or no such object."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.strip()
    return out if done.returncode == 0 and out else None
