"""Which dtype each op ran in, as torch's dispatcher sees it (the read-back of the language
model and of a user workload's model).

A TorchDispatchMode sits below autocast: it sees every aten op after autocast has cast its
inputs, so the floating-point dtypes of an op's inputs are the dtype it computed in. One
forward pass and its loss are traced on a couple of test sequences, after training (never
inside a timed step), under the cell's own autocast state, exactly as train_step runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mpbench.backends.torch.precision import TorchPrecision
from mpbench.backends.torch.steps import cross_entropy

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
    "linear": ("aten.addmm",),  # the projections and the MLP (with biases)
    "head": ("aten.mm",),  # the tied output projection (no bias)
    # A user model's (a CNN's): did BatchNorm run in 16-bit?
    "convolution": ("aten.convolution",),
    "batch_norm": (
        "aten._native_batch_norm_legit_no_training",
        "aten._native_batch_norm_legit",
        "aten.native_batch_norm",
        "aten.cudnn_batch_norm",
    ),
}


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, set[str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        floating = {
            str(leaf.dtype).replace("torch.", "")
            for leaf in tree_leaves((args, kwargs))
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
        }
        if floating:
            self.seen.setdefault(str(func.overloadpacket), set()).update(floating)
        return func(*args, **kwargs)


def _one(dtypes: set[str]) -> str | list[str]:
    ordered = sorted(dtypes)
    return ordered[0] if len(ordered) == 1 else ordered


@torch.no_grad()
def traced_op_dtypes(
    model: torch.nn.Module,
    precision: TorchPrecision,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, Any]:
    """{"op_dtypes": {aten op: dtype(s) of its floating inputs}, "<role>_dtype": ...} for
    one forward pass and its loss (`loss_fn`: a user workload's; None: cross-entropy). A
    user model this trace cannot run says why in `op_dtypes_unavailable`: the cell has
    trained, and a read-back is no reason to fail it."""
    was_training = model.training
    model.eval()
    recorder = _Recorder()
    try:
        with recorder:
            with precision.autocast():
                logits = model(inputs)
            (loss_fn or cross_entropy)(logits.float(), targets)
    except Exception as exc:
        if loss_fn is None:  # mpbench's own model: a failure here is a bug to see
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return {"op_dtypes_unavailable": f"the traced forward raised {type(exc).__name__}: {first}"}
    finally:
        model.train(was_training)
    seen = recorder.seen
    state: dict[str, Any] = {"op_dtypes": {op: _one(seen[op]) for op in sorted(seen)}}
    for role, ops in ROLES.items():
        found = set().union(*(seen[op] for op in ops if op in seen))
        if found:
            state[f"{role}_dtype"] = _one(found)
    state["op_dtypes_source"] = "torch dispatcher (TorchDispatchMode), one forward + loss"
    return state
