"""Shared helpers for the adversarial suite: mpbench in a process of its own, as a user runs it.

Every refusal must be exactly one line on stderr starting with "mpbench: error:", exit code
2, and no traceback anywhere; every family's tests also check that nothing already measured
was lost and no cell process was left behind.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from forked import run_mpbench

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
    """Run mpbench with ARGS in a process of its own and capture everything it printed
    (forked.py: a fork of this process, as `python -m mpbench ARGS` without the start-up)."""
    return run_mpbench(args, env=env, cwd=cwd, timeout=timeout)


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
