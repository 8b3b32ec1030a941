"""Shared helpers for the adversarial suite, which runs mpbench as a user does (cli.py).

Every refusal must be exactly one line on stderr starting with "mpbench: error:", exit code
2, and no traceback anywhere; every family's tests also check that nothing already measured
was lost and no cell process was left behind.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def assert_refused(result: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit 2, exactly one error line on stderr ("mpbench: error: ..."), no traceback;
    returns it. Warnings a run printed before it failed (stderr is where warnings go: a busy
    machine, a data fall-back) may precede it, one line each."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == 2, output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("warning: ") for line in lines[:-1]), result.stderr
    line = lines[-1]
    assert line.startswith("mpbench: error: "), line
    for fragment in fragments:
        assert fragment in line, line
    return line


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
