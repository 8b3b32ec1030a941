"""What ran in 16 bits (issue 56, item 2): a tiny Mixtral by name, its experts through
transformers 5's aten._grouped_mm as it is (which autocast does not cover: the name sets
experts_implementation=grouped_mm, since left out mpbench casts them, test_moe_policy.py) and
through eager experts (mm, which it does), trained in one real run under bf16. The record
says which share of the forward's matmul FLOPs ran in bfloat16 and where the rest ran; the
run warns and compare notes it in the same words; both forms count the same FLOPs (the
formula mpbench adds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import installed
from user_models import TINY_MIXTRAL

pytestmark = pytest.mark.skipif(
    not (installed("transformers") and installed("torch")), reason="needs transformers and torch"
)
MIXTRAL = TINY_MIXTRAL
GROUPED = MIXTRAL + "&experts_implementation=grouped_mm"
EAGER = MIXTRAL + "&experts_implementation=eager"
EXPERTS = "model.layers.*.mlp.experts aten._grouped_mm"


def test_a_bf16_moe_says_its_experts_ran_in_float32(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_mpbench("run", "-w", GROUPED, "-w", EAGER, "-f", "torch", "-p", "bf16",
                         "--max-steps", "3", "--warmup-steps", "1", "--repeat", "1",
                         "--device", "cpu", "--threads", "1", "--out", out,
                         timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    grouped, eager = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert grouped["workload"] == GROUPED and eager["workload"] == EAGER
    # The same model, the same FLOPs, whichever way its experts run.
    assert grouped["flops_per_step"] == eager["flops_per_step"] > 0
    assert "aten._grouped_mm by mpbench's formula" in grouped["config"]["flops_source"]
    # Under bf16 the grouped experts ran in float32: three quarters of this model's matmuls.
    narrow = grouped["precision"]
    assert narrow["matmul_share_low_precision"] == pytest.approx(0.2529, abs=1e-3)
    assert narrow["matmul_float32_places"] == {EXPERTS: pytest.approx(0.7471, abs=1e-3)}
    assert set(narrow["matmul_flops"]) == {"bfloat16", "float32"}
    assert eager["precision"]["matmul_share_low_precision"] == 1.0
    assert eager["precision"]["matmul_float32_places"] == {}
    said = f"25 % of matmul FLOPs ran in bfloat16; in float32: 75 % at {EXPERTS}"
    warnings = [line for line in result.stderr.splitlines() if said in line]
    assert len(warnings) == 1 and "experts_implementation=eager" in warnings[0]
    report = run_mpbench("compare", out, "--format", "json")
    notes = [n for n in json.loads(report.stdout)["notes"] if "of matmul FLOPs" in n]
    assert len(notes) == 1 and said in notes[0]
