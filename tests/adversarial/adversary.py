"""Shared helpers for the adversarial suite: mpbench as a real subprocess, as a user runs it.

Every refusal must be exactly one line on stderr starting with "mpbench: error:", exit code
2, and no traceback anywhere; every family's tests also check that nothing already measured
was lost and no cell process was left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# A tiny, fast matrix: synthetic data, 64-unit dense model, a handful of steps.
TINY_TOML = """
[run]
data = "synthetic"
warmup_steps = 2
timeout = 120

[workloads.mnist_dense]
batch_size = 64
epochs = 1
max_steps = 8
units = 32
synthetic_train_size = 1024
synthetic_test_size = 256

[workloads.cifar10_cnn]
batch_size = 32
epochs = 1
max_steps = 4
synthetic_train_size = 256
synthetic_test_size = 64
"""


def mpbench(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m mpbench ARGS` and capture everything it printed."""
    return subprocess.run(
        [sys.executable, "-m", "mpbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


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
