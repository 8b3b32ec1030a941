"""Which dtype each op ran in, as torch's dispatcher sees it (the read-back of the language
model and of a user workload's model).

A TorchDispatchMode sits below autocast: it sees every aten op after autocast has cast its
inputs, so the floating-point dtypes of an op's inputs are the dtype it computed in. One
forward pass and its loss are traced on a couple of test sequences, after training (never
inside a timed step), under the cell's own autocast state, exactly as train_step runs them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.module_tracker import ModuleTracker

from mpbench.backends.torch.flops import MATMUL_FORMULAS
from mpbench.backends.torch.inputs import Inputs, call
from mpbench.backends.torch.precision import TorchPrecision
from mpbench.backends.torch.steps import cross_entropy
from mpbench.errors import first_line

# The ops each role of the model shows up as (CPU and CUDA kernels alike); an op absent
# from a trace leaves its role out of the record rather than guessing.
ROLES = {
    "layer_norm": ("aten.native_layer_norm",),
    # The output softmax: the loss's log-softmax. Attention's own softmax runs inside the
    # fused attention op below, whose internal arithmetic torch does not report.
    "softmax": ("aten._log_softmax", "aten._softmax"),
    "loss": ("aten.nll_loss_forward", "aten.nll_loss2d_forward"),
    "attention": (
        "aten._scaled_dot_product_flash_attention_for_cpu",
        "aten._scaled_dot_product_flash_attention",
        "aten._scaled_dot_product_efficient_attention",
        "aten._scaled_dot_product_cudnn_attention",
        "aten._scaled_dot_product_attention_math",
    ),
    # linear_dtype and head_dtype come from the matmuls in the order they ran (_roles_of_matmuls)
    # A user model's (a CNN's): did BatchNorm run in 16-bit?
    "convolution": ("aten.convolution",),
    "batch_norm": (
        "aten._native_batch_norm_legit_no_training",
        "aten._native_batch_norm_legit",
        "aten.native_batch_norm",
        "aten.cudnn_batch_norm",
    ),
}


# The ops a projection runs as, with or without a bias, in 16 bits, fp8 or grouped (MoE
# experts), whichever module calls them (nn.MultiheadAttention calls its out_proj
# functionally): the forward's last one is the output head, the others are linear_dtype.
PROJECTIONS = {
    "aten.mm",
    "aten.addmm",
    "aten._scaled_mm",
    "aten._grouped_mm",
    "aten._scaled_grouped_mm",
}

LOW_PRECISION = {"bfloat16", "float16"}  # and every float8 dtype (_low)


def _low(dtype: str) -> bool:
    return dtype in LOW_PRECISION or dtype.startswith("float8")


@dataclass
class MatmulFlops:
    """The forward's matmul FLOPs, by the dtype they ran in and by where they ran:
    (module path with layer numbers as *, op) -> dtype -> FLOPs."""

    by_place: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)

    def add(self, place: tuple[str, str], dtype: str, flops: float) -> None:
        into = self.by_place.setdefault(place, {})
        into[dtype] = into.get(dtype, 0.0) + flops

    def total(self) -> float:
        return sum(sum(d.values()) for d in self.by_place.values())

    def by_dtype(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for dtypes in self.by_place.values():
            for dtype, flops in dtypes.items():
                out[dtype] = out.get(dtype, 0.0) + flops
        return out

    def record(self) -> dict[str, Any]:
        """The record's fields: FLOPs by dtype, the share below float32, and where the rest
        ran (`module op`: share of all matmul FLOPs), largest first."""
        total = self.total()
        if total <= 0:
            return {}
        low = sum(f for d, f in self.by_dtype().items() if _low(d))
        wide = {
            f"{module} {op}": sum(f for d, f in dtypes.items() if not _low(d)) / total
            for (module, op), dtypes in self.by_place.items()
        }
        return {
            "matmul_flops": dict(sorted(self.by_dtype().items())),
            "matmul_share_low_precision": low / total,
            "matmul_float32_places": dict(
                sorted(((k, round(v, 4)) for k, v in wide.items() if v > 0), key=lambda kv: -kv[1])
            ),
        }


_LAYER_NUMBER = re.compile(r"\.\d+(?=\.|$)")


def _place(tracker: ModuleTracker) -> str:
    """The innermost module running, layer numbers as * (model.layers.*.mlp.experts): one
    row for the same module in every layer. The root's class name is left out."""
    inner = max(tracker.parents, key=lambda name: name.count("."), default="Global")
    _, _, path = inner.partition(".")
    return _LAYER_NUMBER.sub(".*", path) or "(the model itself)"


class _Recorder(TorchDispatchMode):
    def __init__(self, tracker: ModuleTracker) -> None:
        super().__init__()
        self.seen: dict[str, set[str]] = {}
        self.tracker = tracker
        self.matmuls = MatmulFlops()
        self.projections: list[str] = []  # each projection's dtype, in the order they ran

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        floating = [
            str(leaf.dtype).replace("torch.", "")
            for leaf in tree_leaves((args, kwargs))
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
        ]
        if floating:
            self.seen.setdefault(str(func.overloadpacket), set()).update(floating)
        out = func(*args, **kwargs)
        formula = MATMUL_FORMULAS.get(func.overloadpacket)
        if formula is not None and floating:
            # The dtype of its first floating operand: autocast casts them all alike, and
            # an fp8 GEMM's scales (float32) come after its operands.
            place = (_place(self.tracker), str(func.overloadpacket))
            self.matmuls.add(place, floating[0], float(formula(*args, **kwargs, out_val=out)))
        if floating and str(func.overloadpacket) in PROJECTIONS:
            self.projections.append(floating[0])
        return out

    def projection_roles(self) -> dict[str, str | list[str]]:
        """head_dtype: the last projection of the forward (the classifier or LM head: the
        loss computes no matmul); linear_dtype: every other one. From what ran, whatever the
        model's names or biases (a llama's projections have no bias, a phi's head has one)."""
        if not self.projections:
            return {}
        *linear, head = self.projections
        roles: dict[str, str | list[str]] = {"head_dtype": head}
        if linear:
            roles["linear_dtype"] = _one(set(linear))
        return roles


def _one(dtypes: set[str]) -> str | list[str]:
    ordered = sorted(dtypes)
    return ordered[0] if len(ordered) == 1 else ordered


def traced_op_dtypes(
    model: torch.nn.Module,
    precision: TorchPrecision,
    inputs: Inputs,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, Any]:
    """{"op_dtypes": {aten op: dtype(s) of its floating inputs}, "<role>_dtype": ...} for
    one forward pass and its loss (`loss_fn`: a user workload's; None: cross-entropy). A
    user model this trace cannot run says why in `op_dtypes_unavailable`: the cell has
    trained, and a read-back is no reason to fail it."""
    was_training = model.training
    model.eval()
    tracker = ModuleTracker()
    recorder = _Recorder(tracker)
    try:
        # With gradients on, as in a training step: nn.MultiheadAttention takes its fused
        # inference kernel (_native_multi_head_attention, projections hidden inside) only
        # when they are off. Eval mode keeps BatchNorm's running statistics as they are.
        with torch.enable_grad(), tracker, recorder:
            with precision.autocast():
                logits = call(model, inputs)
            (loss_fn or cross_entropy)(logits.float(), targets)
    except Exception as exc:
        if loss_fn is None:  # mpbench's own model: a failure here is a bug to see
            raise
        said = f"the traced forward raised {type(exc).__name__}: {first_line(exc)}"
        return {"op_dtypes_unavailable": said}
    finally:
        model.train(was_training)
    seen = recorder.seen
    state: dict[str, Any] = {"op_dtypes": {op: _one(seen[op]) for op in sorted(seen)}}
    for role, ops in ROLES.items():
        found = set().union(*(seen[op] for op in ops if op in seen))
        if found:
            state[f"{role}_dtype"] = _one(found)
    state.update(recorder.projection_roles())
    state["op_dtypes_source"] = "torch dispatcher (TorchDispatchMode), one forward + loss"
    if precision.autocast_dtype is not None:  # a 16-bit (or fp8) cell: what ran below fp32
        state.update(recorder.matmuls.record())
    return state
