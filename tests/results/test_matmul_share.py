"""The one rule for "what ran in 16 bits" (results/matmul_share.py): which cells are said to
have run their matmuls largely in float32, and in which words."""

from __future__ import annotations

from mpbench.results.matmul_share import WARN_BELOW, low_precision_note

MOE = {
    "matmul_flops": {"bfloat16": 2.0e6, "float32": 6.0e6},
    "matmul_share_low_precision": 0.25,
    "matmul_float32_places": {"model.layers.*.mlp.experts aten._grouped_mm": 0.75},
}


def test_a_cell_whose_experts_ran_wide_is_named_with_where_and_why() -> None:
    note = low_precision_note("torch/hf:mixtral/mixed_bfloat16", MOE)
    assert note == (
        "torch/hf:mixtral/mixed_bfloat16: 25 % of matmul FLOPs ran in bfloat16; in float32: "
        "75 % at model.layers.*.mlp.experts aten._grouped_mm (autocast does not cover "
        "aten._grouped_mm (a transformers MoE's experts); an hf: model runs them in the "
        "policy's dtype unless its name sets experts_implementation=grouped_mm, and "
        "experts_implementation=eager routes them through mm)"
    )


def test_a_cell_at_the_threshold_or_untraced_says_nothing() -> None:
    assert low_precision_note("c", {**MOE, "matmul_share_low_precision": WARN_BELOW}) is None
    assert low_precision_note("c", {"op_dtypes": {"aten.mm": "bfloat16"}}) is None
    assert low_precision_note("c", {}) is None


def test_an_fp8_cell_names_both_narrow_dtypes_and_no_reason_it_does_not_know() -> None:
    fp8 = {
        "matmul_flops": {"bfloat16": 1.0, "float8_e4m3fn": 3.0, "float32": 6.0},
        "matmul_share_low_precision": 0.4,
        "matmul_float32_places": {"head aten.mm": 0.6},
    }
    note = low_precision_note("c", fp8)
    assert note == (
        "c: 40 % of matmul FLOPs ran in bfloat16 or float8_e4m3fn; in float32: 60 % at head aten.mm"
    )
