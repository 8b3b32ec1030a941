"""Cells beside a CPU hog (issue 22): the test starts two busy processes of its own, runs real
torch cells beside them, stops them, and checks that every cell is marked contended with the
reason and that no verdict recommends or warns: it asks for a quiet machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import needs_torch

# What `mpbench run` and `compare` import as they start, imported once here: each command
# forked from this process (tests/cli.py) then starts without them (about 1 s a command,
# more beside the two busy processes).
import mpbench.compare
import mpbench.compare.options
import mpbench.detect
import mpbench.runner.loop
import mpbench.runner.signals  # noqa: F401

# its cells import torch, in their own processes; two busy processes beside a cell, on every
# core the machine has
pytestmark = [needs_torch, pytest.mark.all_cores]

HOG = "while True: pass"
CELLS = [
    *("-f", "torch", "-w", "mnist_dense", "-p", "fp32", "-p", "bf16", "--repeat", "1"),
    *("--device", "cpu", "--data", "synthetic", "--units", "64", "--batch-size", "128"),
    *("--max-steps", "30"),
    # The early stop's ratio rule off: beside two busy processes a bf16 cell's steps can all
    # read 10x float32's and stop it, and these tests are of contended cells that finished
    # (tests/builders.py's tiny runs turn it off alike).
    *("--stop-slower-than", "off"),
]


@pytest.mark.torch
@pytest.mark.slow
def test_cells_beside_two_busy_processes_are_contended_and_get_no_verdict(tmp_path: Path) -> None:
    out = tmp_path / "run"
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    try:
        run = run_mpbench("run", *CELLS, "--out", str(out))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert run.returncode == 0, run.stdout + run.stderr
    # run warns at the start that the machine is already busy
    assert "the machine is busy" in " ".join(run.stdout.split() + run.stderr.split())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        contention = record["contention"]
        assert contention["contended"], contention
        assert contention["other_cores"] > 0.5
        assert any("other processes used" in why for why in contention["why"])
    compare = run_mpbench("compare", str(out), "--format", "json", timeout=120)
    assert compare.returncode == 0, compare.stderr
    cells = json.loads(compare.stdout)["cells"]
    assert all(c["contended_repeats"] == 1 for c in cells)
    verdicts = [c["verdict"] for c in cells if c.get("verdict")]
    assert verdicts, cells
    for verdict in verdicts:
        assert verdict["advice"] == "re-measure on a quiet machine", verdict
    text = run_mpbench("compare", str(out), timeout=120, env={"COLUMNS": "200"}).stdout
    assert "recommended here" not in text and "→ avoid" not in text
    assert "contended" in text
    # a speed-up gate on these cells is inconclusive, so --require-conclusive fails it
    gate = run_mpbench(
        "compare",
        str(out),
        "--min-speedup",
        "bf16=0.01",
        "--require-conclusive",
        timeout=120,
    )
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "re-measure on a quiet machine" in " ".join(gate.stdout.split())
