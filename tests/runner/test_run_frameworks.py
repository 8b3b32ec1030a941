"""Both frameworks through one `mpbench run`: one summary, rows side by side."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(f) for f in ("torch", "tensorflow")),
    reason="needs both torch and tensorflow",
)

TINY = """
[run]
data = "synthetic"
warmup_steps = 3
[workloads.mnist_dense]
batch_size = 256
epochs = 2
max_steps = 24
units = 64
synthetic_train_size = 4096
synthetic_test_size = 1024
"""


def test_framework_all_trains_both_and_prints_one_summary(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mpbench",
            "run",
            "--config",
            str(config),
            "--framework",
            "all",
            "--workload",
            "mnist_dense",
            "--policy",
            "fp32",
            "--policy",
            "bf16",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    cells = {(r["framework"], r["policy"]): r for r in records}
    assert set(cells) == {
        (f, p) for f in ("torch", "tensorflow") for p in ("float32", "mixed_bfloat16")
    }
    assert all(r["status"] == "ok" for r in records)
    tf_bf16 = cells["tensorflow", "mixed_bfloat16"]["precision"]
    assert tf_bf16["dtype_policy"] == "mixed_bfloat16" and tf_bf16["tf32_enabled"] is False
    assert cells["tensorflow", "float32"]["precision"]["compute_dtype"] == "float32"
    # Same model in both frameworks.
    assert cells["torch", "float32"]["params"] == cells["tensorflow", "float32"]["params"]

    # One summary table for the workload, torch and TensorFlow rows in it together.
    summary = result.stdout[result.stdout.index("mnist_dense on cpu") :]
    table = summary[: summary.index("Results:")]
    rows = [  # table rows: "torch fp32 ...", "tf bf16 ..." (verdict lines say "tf bf16: ...")
        line
        for line in table.splitlines()
        if line.lstrip().startswith(("torch ", "tf ")) and ": " not in line
    ]
    assert len(rows) == 4
    # Both frameworks measured end-to-end throughput beside the synced steps.
    assert all(r["end_to_end"]["samples_per_s"] > 0 for r in records)
    assert all(r["memory"]["training_source"] == "process RSS sampled" for r in records)
    assert sum(r.lstrip().startswith("torch") for r in rows) == 2
    assert sum(r.lstrip().startswith("tf") for r in rows) == 2
