"""Which layers of a torch model go fp8, from the model itself (docs/policies.md, "fp8").

One traced forward at the cell's micro-batch, before conversion, gives every figure: each
layer's real input (M = the product of its leading dimensions: batch × tokens for a sequence
model, whatever the model), each module's forward FLOPs as torch's counter scores them
(attention on the math path), and the whole forward's. Every module that owns a matmul weight
and is not converted is listed with its own reason, in the workload's terms.

transformers' `Conv1D` (GPT-2's eight projections: x·W + b with W stored (in, out)) is no
nn.Linear, so torchao would pass it by; in an fp8 cell mpbench swaps each for an nn.Linear
holding the same weights transposed, before the trace, and says so in the record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from mpbench.backends.torch.flops import MATMUL_OPS, SOURCE, counted
from mpbench.backends.torch.inputs import Inputs, call, device_of
from mpbench.fp8_rules import LayerPlan, LinearLayer, plan_layers
from mpbench.workloads.inputs import samples

CONV_REASON = "convolution: torchao converts nn.Linear only"
NOT_LINEAR = "not nn.Linear ({kind}): torchao converts nn.Linear only"
NOT_CALLED = "not called in the traced forward: no GEMM of the step to convert"
# nn.MultiheadAttention's out_proj: its parent multiplies by its weight itself
# (F.multi_head_attention_forward), so the module, and a float8 swap of it, is never called.
FUNCTIONAL = (
    "its weight is multiplied by {parent} directly, not through the module: torchao's swap "
    "of the module would never run, so its GEMM stays in bfloat16"
)
EMBEDDING = "embedding: a table lookup, no GEMM"
# The built-in language model's head is F.linear on the token embedding's weight.
TIED_FUNCTIONAL_HEAD = (
    "embedding: a table lookup, no GEMM; the head tied to its weight (F.linear on it) is no "
    "nn.Linear either, so its GEMM stays in bfloat16"
)
SHAPES_SOURCE = (
    "each layer's input in one traced forward at the micro-batch "
    "(M = the product of its leading dimensions)"
)
SHARE_SOURCE = f"forward FLOPs per module from one traced forward ({SOURCE})"
SWAPPED = "transformers Conv1D swapped for nn.Linear (the same weights, transposed)"
_CONVOLUTIONS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def owns_matmul_weight(module: torch.nn.Module) -> bool:
    """A module with a weight of its own that is a matrix (or more): a Linear, a
    convolution, an embedding, transformers' Conv1D, MultiheadAttention's in-projection..."""
    return any(p.dim() >= 2 for p in module.parameters(recurse=False))


def is_hf_conv1d(module: torch.nn.Module) -> bool:
    """transformers.pytorch_utils.Conv1D, known by name: transformers is never imported here."""
    kind = type(module)
    return kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers.")


@dataclass
class ForwardTrace:
    """One forward at `batch` samples: each module's input rows per call (Linear-like layers)
    and forward FLOPs, and the whole forward's FLOPs."""

    batch: int
    rows: dict[str, list[int]] = field(default_factory=dict)  # layer -> M of each call
    flops: dict[str, float] = field(default_factory=dict)  # module -> forward FLOPs
    total_flops: float = 0.0
    # The storages of every tensor a matmul-class op took (flops.MATMUL_OPS): which weights
    # fed a GEMM, whichever module or function multiplied by them.
    multiplied: set[int] = field(default_factory=set)

    def feeds_a_matmul(self, module: torch.nn.Module) -> bool:
        """Whether one of the module's own matrix weights went into a matmul of the trace."""
        return any(
            p.dim() >= 2 and p.untyped_storage().data_ptr() in self.multiplied
            for p in module.parameters(recurse=False)
        )


class _Multiplied(TorchDispatchMode):
    """Records the storage of every tensor operand of a matmul-class op. The trace runs in
    float32, without autocast, so a weight reaches its GEMM as itself or as a view of it
    (a transpose), which shares its storage."""

    def __init__(self, into: set[int]) -> None:
        super().__init__()
        self.into = into

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in MATMUL_OPS:
            for leaf in tree_leaves((args, kwargs)):
                if isinstance(leaf, torch.Tensor):
                    self.into.add(leaf.untyped_storage().data_ptr())
        return func(*args, **kwargs)


def trace_forward(model: torch.nn.Module, sample: Inputs) -> ForwardTrace:
    """Run the model once on `sample` (a tensor, or a dict of them by keyword: inputs.call)
    without gradients, recording what the trace needs. The model's RNG use (dropout) is
    undone: the cell's seeded generator is left where it was."""
    trace = ForwardTrace(batch=samples(sample))
    names = {id(m): name for name, m in model.named_modules() if owns_matmul_weight(m)}
    handles = []

    def record(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and first.dim() >= 1:
            rows = math.prod(first.shape[:-1]) if first.dim() > 1 else 1
            trace.rows.setdefault(names[id(module)], []).append(int(rows))

    for module in model.modules():
        if id(module) in names:
            handles.append(module.register_forward_pre_hook(record))
    device = device_of(sample)
    devices = [device.index or 0] if device.type == "cuda" else []
    try:
        multiplied = _Multiplied(trace.multiplied)
        with torch.no_grad(), torch.random.fork_rng(devices=devices), multiplied:
            count = counted(model, lambda: call(model, sample))
    finally:
        for handle in handles:
            handle.remove()
    trace.flops = count.by_module
    trace.total_flops = count.total
    return trace


def _tied_to(model: torch.nn.Module, name: str, module: torch.nn.Module) -> list[str]:
    """The other modules holding this module's weight (a tied head)."""
    weight = getattr(module, "weight", None)
    return [
        other
        for other, m in model.named_modules()
        if other != name and weight is not None and getattr(m, "weight", None) is weight
    ]


def _embedding_reason(model: torch.nn.Module, name: str, module: torch.nn.Module) -> str:
    tied = _tied_to(model, name, module)
    if tied:
        return f"{EMBEDDING} (its weight is tied to {', '.join(tied)})"
    # mpbench's own language model multiplies by its token table in F.linear (models.py).
    functional = getattr(model, "functional_head_of", None) == name
    return TIED_FUNCTIONAL_HEAD if functional else EMBEDDING


def layer_plan(model: torch.nn.Module, trace: ForwardTrace) -> LayerPlan:
    """Every nn.Linear the trace saw, as its GEMM (M from its first call); every other module
    owning a matmul weight listed with why it stays in bf16, in the model's own terms."""
    linears, other = [], {}
    for name, module in model.named_modules():
        if not owns_matmul_weight(module):
            continue
        if isinstance(module, torch.nn.Linear):
            calls = trace.rows.get(name)
            if not calls and trace.feeds_a_matmul(module):
                other[name] = FUNCTIONAL.format(
                    kind=type(module).__name__, parent=_parent(model, name)
                )
                continue
            if not calls:
                other[name] = NOT_CALLED
                continue
            rows = calls[0] / trace.batch
            rows_per_sample = int(rows) if rows == int(rows) else rows
            linears.append(
                LinearLayer(
                    name, module.in_features, module.out_features, rows_per_sample, len(calls)
                )
            )
        elif isinstance(module, _CONVOLUTIONS):
            other[name] = CONV_REASON
        elif isinstance(module, torch.nn.Embedding):
            other[name] = _embedding_reason(model, name, module)
        elif trace.feeds_a_matmul(module):
            other[name] = NOT_LINEAR.format(kind=type(module).__name__)
        # else: its matrices (ViT's position embeddings, a class token) feed no matmul: it
        # has no GEMM to convert, and is no layer fp8 passed by
    return plan_layers(linears, other)


def _parent(model: torch.nn.Module, name: str) -> str:
    """`its parent, self_attn (MultiheadAttention)`, or the model itself."""
    parent_name = name.rpartition(".")[0]
    parent = model.get_submodule(parent_name) if parent_name else model
    return f"its parent {parent_name or 'the model'} ({type(parent).__name__})"


def traced_share(trace: ForwardTrace, layers: list[str]) -> float | None:
    """The share of the traced forward's matmul FLOPs (the step's too: a GEMM's backward costs
    twice its forward) that `layers` run, as the counter scored each module: fp8_rules.record's
    `traced_share`, where fp8_rules.flop_share counts the plan's shapes instead."""
    if not trace.total_flops:
        return None
    converted = sum(trace.flops.get(name, 0.0) for name in layers)
    return min(1.0, converted / trace.total_flops)


def swap_hf_conv1d(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, str]:
    """Swap every transformers Conv1D for an nn.Linear computing the same (weight transposed,
    bias kept), in place; an optimizer built already is re-pointed at the new parameters
    (before its first step it holds no state for them; RuntimeError if it does). Returns the
    record's `swapped_layers`."""
    swapped: dict[str, str] = {}
    moved: dict[int, torch.nn.Parameter] = {}
    for name, module in list(model.named_modules()):
        if not is_hf_conv1d(module):
            continue
        weight, bias = module.weight, getattr(module, "bias", None)
        in_features, out_features = weight.shape  # Conv1D keeps W as (in, out)
        linear = torch.nn.Linear(
            in_features,
            out_features,
            bias=bias is not None,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            linear.weight.copy_(weight.t())
            if bias is not None:
                linear.bias.copy_(bias)
        linear.weight.requires_grad_(weight.requires_grad)
        moved[id(weight)] = linear.weight
        if bias is not None:
            moved[id(bias)] = linear.bias
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, linear)
        swapped[name] = SWAPPED
    if optimizer is not None and moved:
        _repoint(optimizer, moved)
    return swapped


def _repoint(optimizer: torch.optim.Optimizer, moved: dict[int, torch.nn.Parameter]) -> None:
    stale = [p for p in optimizer.state if id(p) in moved]
    if stale:
        raise RuntimeError(
            "float8: the optimizer already holds state for transformers Conv1D weights that "
            "fp8 swaps for nn.Linear; build it without stepping it"
        )
    for group in optimizer.param_groups:
        group["params"] = [moved.get(id(p), p) for p in group["params"]]
