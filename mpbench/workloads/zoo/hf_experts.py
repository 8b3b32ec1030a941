"""How a transformers mixture-of-experts model's experts run in each torch cell, chosen for
the cell's policy (issue 56, item 5).

transformers 5 runs the experts of `hf:mixtral`, `hf:qwen2_moe`, ... through
`aten._grouped_mm` (experts_implementation "grouped_mm", its default), which torch's
autocast does not cover: under a bf16, fp16 or fp8 policy they ran in float32, most of such
a model's matmul FLOPs (a tiny Mixtral: 75 %), while the record said bf16.

What mpbench does, per cell (the workload is built once per cell, in its process):
- float32 and tf32: transformers' default, grouped_mm, as it is.
- a 16-bit policy (and fp8's bf16): grouped_mm still, with an autocast rule for it, in this
  cell's process only: its operands cast to the policy's dtype, as autocast casts mm's. The
  16-bit cell then runs the float32 cell's kernels in 16 bits, so their ratio is the
  precision's alone (eager experts are another code path: a Python loop of one mm per
  expert), and it is the path 16-bit MoE training takes where the weights are 16-bit. On
  this CPU it computes what eager experts compute under autocast, bit for bit (the test).
- where this device's grouped_mm cannot run that dtype (the rule is tried on the device
  once), eager experts: mm, which autocast covers.
- a workload that names `experts_implementation` keeps it: the user's value wins, and where
  it leaves the experts in float32 under a 16-bit policy the record says so (and the run
  warns: results/matmul_share.py).
The choice and why are the record's `config.chosen_for_policy`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

KEY = "experts_implementation"
GROUPED, EAGER = "grouped_mm", "eager"
# The grouped GEMMs transformers' grouped_mm experts call: torch's, and transformers' own
# fallback where torch's cannot run (under torch.compile with float32 weights, older GPUs).
_GROUPED_OPS = ("aten::_grouped_mm", "transformers::grouped_mm_fallback")
_RULES: set[tuple[str, str]] = set()  # (device type, dtype) with the autocast rule here


def for_policy(given: Any) -> Callable[[Any, Any], dict[str, Any] | None]:
    """The torch_policy hook of an hf: workload whose query gave `given` as
    experts_implementation (None: not given)."""

    def choose(model: Any, policy: Any) -> dict[str, Any] | None:
        if not _has_experts(model):
            return None
        return _choice(model, policy.compute_dtype, policy.name, given)

    return choose


def _choice(model: Any, dtype: str, policy: str, given: Any) -> dict[str, Any]:
    current = model.config._experts_implementation
    if given is not None:
        return _record(current, _given_why(current, dtype, policy))
    if dtype == "float32":
        return _record(
            current, f"transformers' default, as it is: {policy} is a float32 policy (no autocast)"
        )
    if current != GROUPED:  # transformers chose another (eager where grouped_mm cannot run)
        return _record(current, f"transformers' choice for this model, under {policy}")
    if autocast_grouped_mm(next(model.parameters()).device.type, dtype):
        return _record(
            GROUPED,
            f"autocast does not cover aten._grouped_mm: mpbench casts its operands to {dtype} "
            "as autocast casts mm's (an autocast rule in this cell), so the experts run in "
            f"{dtype} on the float32 cell's kernels",
        )
    model.set_experts_implementation(EAGER)
    return _record(
        EAGER,
        f"this device's aten._grouped_mm does not run {dtype}: eager experts run through mm, "
        f"which autocast covers, in {dtype}",
    )


def _given_why(current: str, dtype: str, policy: str) -> str:
    said = f"the workload's {KEY}={current} (the user's value wins)"
    if current == GROUPED and dtype != "float32":
        return (
            f"{said}: autocast does not cover aten._grouped_mm, so under {policy} the experts "
            f"run in float32, not {dtype}; leave {KEY} out and mpbench runs them in {dtype}"
        )
    return said


def _record(implementation: str, why: str) -> dict[str, Any]:
    return {KEY: implementation, f"{KEY}_why": why}


def _has_experts(model: Any) -> bool:
    """Whether transformers routes some module of the model through its experts interface
    (`@use_experts_implementation` gives those modules `_is_expert_parallel`)."""
    return any(hasattr(module, "_is_expert_parallel") for module in model.modules())


def autocast_grouped_mm(device_type: str, dtype: str) -> bool:
    """Registers, once per process, autocast rules that cast the grouped GEMMs' floating
    operands to `dtype` on `device_type`; False where this device's aten._grouped_mm does
    not run `dtype` (tried on a tiny problem) or the rule cannot be registered."""
    if (device_type, dtype) in _RULES:
        return True
    import torch

    torch_dtype = getattr(torch, dtype)
    try:
        _try_grouped_mm(torch, device_type, torch_dtype)
        for op in _GROUPED_OPS:
            if _op_exists(torch, op):
                torch.library.register_autocast(op, device_type, torch_dtype)
    except Exception:
        return False
    _RULES.add((device_type, dtype))
    return True


def _try_grouped_mm(torch: Any, device_type: str, dtype: Any) -> None:
    """aten._grouped_mm of two groups of 8×8 in `dtype` on the device: raises where it has no
    kernel for it (CUDA's has bfloat16 only on some GPUs)."""
    a = torch.ones(16, 8, dtype=dtype, device=device_type)
    b = torch.ones(2, 8, 8, dtype=dtype, device=device_type)
    offs = torch.tensor([8, 16], dtype=torch.int32, device=device_type)
    torch._grouped_mm(a, b, offs=offs)


def _op_exists(torch: Any, qualified: str) -> bool:
    namespace, _, name = qualified.partition("::")
    try:
        getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False
    return True
