"""The recipe options through a real `mpbench run` of both frameworks (tiny sizes)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from builders import run_options
from cli import run_mpbench
from frameworks import needs_tensorflow, needs_torch

pytestmark = [pytest.mark.slow, needs_torch, needs_tensorflow]

TINY = run_options(timeout=None)


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / "run"
    result = run_mpbench("run", *TINY, "--out", str(out), *args, fork=False)
    lines = (out / "results.jsonl").read_text().splitlines() if out.exists() else []
    return result, [json.loads(line) for line in lines]


def test_a_static_scale_too_large_ends_both_frameworks_diverged_without_nan(tmp_path):
    result, records = _run(tmp_path, "-f", "all", "-p", "fp16", "--loss-scale", "1e30")
    assert {r["framework"] for r in records} == {"torch", "tensorflow"}, result.stderr
    for record in records:
        assert record["status"] == "diverged"
        assert "skipped for non-finite gradients" in record["reason"]
        scale = record["loss_scale"]
        assert scale["mode"] == "static" and scale["final_scale"] == pytest.approx(1e30, 1e-6)
        assert scale["skipped_steps"] == scale["counted_steps"] > 0
        assert record["config"]["loss_scale"] == 1e30
        loss = record["accuracy"]["test_loss"]
        assert loss == loss and loss < 100  # finite: no NaN weights were applied


def test_accumulation_with_a_static_loss_scale_trains_ok_and_compares_in_both_frameworks(
    tmp_path,
):
    """The static-scale fp16 cell is a row against the float32 cell of its framework, and
    compare pairs the two. (Several values of an axis: tests/runner/test_recipe_config.py.)"""
    result, records = _run(
        tmp_path,
        *("-f", "all", "-p", "fp32", "-p", "fp16", "--loss-scale", "1024"),
        *("--accumulate", "2"),
    )
    ids = sorted(r["cell_id"] for r in records)
    assert ids == sorted(
        f"{f}/mnist_dense/{p}@acc2/r0"
        for f in ("torch", "tensorflow")
        for p in ("float32", "mixed_float16@ls1024")
    ), result.stderr
    units = {}
    for record in records:
        assert record["status"] == "ok", record["reason"]
        config = record["config"]
        assert (config["batch_size"], config["accumulate"], config["effective_batch_size"]) == (
            64,
            2,
            128,
        )
        steps = record["step_time"]
        assert steps["micro_batches_per_step"] == 2
        assert steps["micro_batch_median_s"] == pytest.approx(steps["median_s"] / 2)
        assert record["throughput_samples_per_s"] == pytest.approx(128 / steps["median_s"])
        if "@ls1024" in record["cell_id"]:
            assert record["loss_scale"]["mode"] == "static"
            assert record["loss_scale"]["final_scale"] == 1024.0
            units[record["framework"]] = record["loss_scale"]["skip_unit"]
    assert units == {"torch": "optimizer step (all 2 micro-batches)", "tensorflow": "micro-batch"}

    # Both frameworks in one run: the same model, one summary with their rows side by side.
    by_cell = {(r["framework"], r["policy"]): r for r in records}
    assert by_cell["torch", "float32"]["params"] == by_cell["tensorflow", "float32"]["params"]
    tf_fp16 = by_cell["tensorflow", "mixed_float16"]["precision"]
    assert tf_fp16["dtype_policy"] == "mixed_float16" and tf_fp16["tf32_enabled"] is False
    assert by_cell["tensorflow", "float32"]["precision"]["compute_dtype"] == "float32"
    assert all(r["end_to_end"]["samples_per_s"] > 0 for r in records)
    assert all(r["memory"]["training_source"] == "process anonymous RSS sampled" for r in records)
    summary = result.stdout[result.stdout.index("mnist_dense on cpu") :]
    table = summary[: summary.index("Results:")]
    rows = [  # table rows: "torch fp32 ...", "tf fp16 ..." (verdict lines say "tf fp16: ...")
        line.split()[0]
        for line in table.splitlines()
        if line.lstrip().startswith(("torch ", "tf ")) and ": " not in line
    ]
    assert sorted(rows) == ["tf", "tf", "torch", "torch"], table

    compared = run_mpbench(
        "compare", str(tmp_path / "run"), "--format", "json", timeout=120, fork=False
    )
    cells = json.loads(compared.stdout)["cells"]
    static = [c for c in cells if c["variant"] == "[accumulate=2] [loss scale 1024]"]
    assert {c["framework"] for c in static} == {"torch", "tensorflow"}, compared.stderr
    for cell in static:
        assert cell["policy"] == "mixed_float16" and cell["config"]["accumulate"] == 2
        assert cell["speedup_vs_float32"]["value"] > 0
