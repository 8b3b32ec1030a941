"""What the workload tests share: a name refused by the zoo, in one line naming it; and a run
refused before anything runs, one line on stderr and exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mpbench.errors import InvalidInput
from mpbench.workloads import user


def one_line(name: str, call=user.load) -> str:
    with pytest.raises(InvalidInput) as raised:
        call(name)
    said = str(raised.value)
    assert "\n" not in said and said.startswith(f"--workload {name!r}: "), said
    return said


def refusal_line(result: subprocess.CompletedProcess[str], out: Path) -> str:
    """The one line a run refused before anything ran said: exit 2, no traceback, and no
    run directory (no cell started)."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert not out.exists()
    return lines[0]
