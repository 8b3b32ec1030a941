"""What ran in 16 bits (issue 56): a 16-bit or fp8 cell's matmul FLOPs by the dtype they ran
in, read from the record's `precision` (the torch op trace fills `matmul_flops`,
`matmul_share_low_precision` and `matmul_float32_places`: backends/torch/op_dtypes.py).

A cell labelled bf16 whose experts ran in float32 (a transformers MoE's `aten._grouped_mm`,
which autocast does not cover) mostly compares float32 with float32. The run warns and
compare notes it, in the same words (this module is the one rule for both).
"""

from __future__ import annotations

from typing import Any

# Below this share of its matmul FLOPs in 16 bits (or fp8) a cell's label overstates it.
WARN_BELOW = 0.9
# What is known of why an op ran wide, and what routes it through a covered op.
WHY = {
    "aten._grouped_mm": (
        "autocast does not cover aten._grouped_mm (a transformers MoE's experts); an hf: "
        "model runs them in the policy's dtype unless its name sets "
        "experts_implementation=grouped_mm, and experts_implementation=eager routes them "
        "through mm"
    ),
}


def low_precision_note(cell: str, precision: dict[str, Any]) -> str | None:
    """`CELL: 25 % of matmul FLOPs ran in bfloat16; in float32: 75 % at
    model.layers.*.mlp.experts aten._grouped_mm (why)`, or None: not traced, or at least
    WARN_BELOW of them ran below float32."""
    share = precision.get("matmul_share_low_precision")
    if not isinstance(share, (int, float)) or share >= WARN_BELOW:
        return None
    places = precision.get("matmul_float32_places") or {}
    wide = [f"{fraction * 100:.0f} % at {place}" for place, fraction in list(places.items())[:3]]
    narrow = [d for d in precision.get("matmul_flops") or {} if d != "float32"]
    text = f"{cell}: {share * 100:.0f} % of matmul FLOPs ran in {' or '.join(narrow) or '16 bits'}"
    if wide:
        text += f"; in float32: {', '.join(wide)}"
    reasons = [why for op, why in WHY.items() if any(op in place for place in places)]
    return text + (f" ({'; '.join(reasons)})" if reasons else "")
