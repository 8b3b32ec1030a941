"""A mixture of experts in the precision claimed (issue 56, item 5): an hf: MoE's experts run
in the cell's policy by default (zoo/hf_experts.py). transformers' grouped_mm experts call
aten._grouped_mm, which autocast does not cover; mpbench casts its operands in 16-bit cells,
so a bf16 cell runs all its matmul FLOPs in bfloat16 on the float32 cell's kernels, and the
record says what was chosen and why. test_moe_precision.py keeps the float32 experts of a
name that sets experts_implementation=grouped_mm itself (the user's value wins)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import installed
from user_models import TINY_MIXTRAL

pytestmark = pytest.mark.skipif(
    not (installed("transformers") and installed("torch")), reason="needs transformers and torch"
)
MIXTRAL = TINY_MIXTRAL
CAST = (
    "autocast does not cover aten._grouped_mm: mpbench casts its operands to bfloat16 as "
    "autocast casts mm's (an autocast rule in this cell), so the experts run in bfloat16 on the "
    "float32 cell's kernels"
)


def test_a_bf16_moe_runs_its_experts_in_bf16_and_says_how(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_mpbench("run", "-w", MIXTRAL, "-f", "torch", "-p", "fp32", "-p", "bf16",
                         "--max-steps", "3", "--warmup-steps", "1", "--repeat", "1",
                         "--device", "cpu", "--threads", "1", "--out", out,
                         timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    fp32, bf16 = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert (fp32["policy"], bf16["policy"]) == ("float32", "mixed_bfloat16")
    assert fp32["status"] == bf16["status"] == "ok"
    # Every matmul FLOP of the bf16 cell ran in bfloat16, the experts' grouped GEMMs too.
    assert bf16["precision"]["matmul_share_low_precision"] == 1.0
    assert bf16["precision"]["matmul_float32_places"] == {}
    assert bf16["precision"]["op_dtypes"]["aten._grouped_mm"] == "bfloat16"
    assert "of matmul FLOPs ran in" not in result.stderr  # no warning: nothing ran wide
    # The choice, per cell, in the record's config.
    assert fp32["config"]["chosen_for_policy"] == {
        "experts_implementation": "grouped_mm",
        "experts_implementation_why": "transformers' default, as it is: float32 is a float32 "
        "policy (no autocast)",
    }
    assert bf16["config"]["chosen_for_policy"] == {
        "experts_implementation": "grouped_mm",
        "experts_implementation_why": CAST,
    }
    # The same model and kernels: the same FLOPs, counted with mpbench's grouped_mm formula.
    assert fp32["flops_per_step"] == bf16["flops_per_step"] > 0
    assert "aten._grouped_mm by mpbench's formula" in bf16["config"]["flops_source"]
    # What was chosen per policy is no part of the cell's identity: bf16 still has its
    # float32 twin to be compared with.
    report = json.loads(run_mpbench("compare", out, "--format", "json").stdout)
    cells = {cell["policy"]: cell for cell in report["cells"]}
    assert cells["mixed_bfloat16"]["speedup_vs_float32"]["value"] > 0


def test_the_autocast_rule_computes_what_eager_experts_compute() -> None:
    """In a process of its own (the rule is process-wide, as in a cell): one bf16 step of a
    tiny Mixtral through grouped_mm with mpbench's rule gives eager experts' logits bit for
    bit; without it, grouped_mm runs in float32 and differs. And the hook's choice for each
    policy, the user's key, a device without a float16 grouped kernel, a model without experts."""
    child = Path(__file__).with_name("moe_rule_child.py")
    ran = subprocess.run([sys.executable, child], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    found = json.loads(ran.stdout.strip().splitlines()[-1])
    assert found["without_rule"]["grouped_mm"] == ["torch.float32"]
    assert found["without_rule"]["logits_vs_eager"] > 1e-3
    ruled = found["with_rule"]
    assert ruled["grouped_mm"] == ["torch.bfloat16"]
    assert ruled["logits_vs_eager"] == 0.0
    assert ruled["grad_vs_eager"] <= 1e-6 * ruled["grad_scale"]
    chosen = found["choices"]
    assert {p: c["experts_implementation"] for p, c in chosen.items() if p != "fp16_built"} == {
        "float32": "grouped_mm",
        "tf32": "grouped_mm",
        "mixed_bfloat16": "grouped_mm",
        "float8": "grouped_mm",  # bf16 autocast under its fp8 Linear layers
        "given": "grouped_mm",
        "fp16_without_kernel": "eager",
    }
    assert chosen["mixed_bfloat16"]["experts_implementation_why"] == CAST
    assert chosen["float8"]["experts_implementation_why"] == CAST
    assert chosen["given"]["experts_implementation_why"] == (
        "the workload's experts_implementation=grouped_mm (the user's value wins): autocast "
        "does not cover aten._grouped_mm, so under mixed_bfloat16 the experts run in float32, "
        "not bfloat16; leave experts_implementation out and mpbench runs them in bfloat16"
    )
    assert chosen["fp16_without_kernel"]["experts_implementation_why"] == (
        "this device's aten._grouped_mm does not run float16: eager experts run through mm, "
        "which autocast covers, in float16"
    )
    assert chosen["fp16_built"] == "eager"  # switched on the built model, for that cell
    assert found["no_experts"] is None
