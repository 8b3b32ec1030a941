"""Model FLOPs as torch's FlopCounterMode counts them, with attention on the math path.

FlopCounterMode has no formula for the fused CPU attention kernel
(`aten._scaled_dot_product_flash_attention_for_cpu`) and scores it 0, so a transformer counted
on its default path falls short by exactly its attention (GPT-2 at T = 64: -7 %; at T = 2048
the missing term dominates). Under the math backend the same attention runs as bmm, softmax
and bmm, which the counter does count: these are model FLOPs, the figure MFU is defined on.
Every count mpbench takes of a torch model goes through `counted` (one rule).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode, flop_registry

SOURCE = "torch FlopCounterMode, attention on the math path"


@contextlib.contextmanager
def math_attention() -> Iterator[None]:
    """scaled_dot_product_attention on its math backend (torch >= 2.3's sdpa_kernel; the
    older torch.backends.cuda.sdp_kernel flags before that)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # torch 2.2
        with torch.backends.cuda.sdp_kernel(
            enable_flash=False, enable_math=True, enable_mem_efficient=False
        ):
            yield
        return
    with sdpa_kernel(SDPBackend.MATH):
        yield


def grouped_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """aten._grouped_mm: the groups' matmuls, which FlopCounterMode (torch 2.13) scores 0.
    transformers 5 runs mixture-of-experts layers through it, so a count without it misses
    the experts (a tiny Mixtral: 0.34 of its FLOPs, issue 56). Its four forms, by the
    operands' ranks (torch/_meta_registrations.py `_meta_grouped_mm_common`; the groups split
    the dimension that `offs` indexes, so each row or column is multiplied once):
    2-D × 3-D (tokens sorted by expert, one weight per group): (M, K) × (G, K, N) → (M, N);
    2-D × 2-D (the weight gradient, groups along K): (M, K) × (K, N) → (G, M, N);
    3-D × 2-D: (G, M, K) × (K, N) → (M, N); 3-D × 3-D (batched): (G, M, K) × (G, K, N)."""
    if len(a_shape) == 2 and len(b_shape) == 3:
        return 2 * a_shape[0] * a_shape[1] * b_shape[2]
    if len(a_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    if len(b_shape) == 2:
        return 2 * a_shape[1] * a_shape[2] * b_shape[1]
    return 2 * a_shape[0] * a_shape[1] * a_shape[2] * b_shape[2]


_TORCH_CONV_BACKWARD = flop_counter.conv_backward_flop.__wrapped__  # its formula on shapes


def conv_backward_flop(grad_out_shape, x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    """aten.convolution_backward as torch's formula counts it, with the weight gradient of a
    grouped convolution divided by its groups. torch 2.13 scores that gradient as one
    convolution across all input channels: `groups` times its work (a depthwise convolution
    of C channels, C times), which made a tiny EfficientNetB0 count about 13 times its FLOPs;
    its forward and input gradient count the real work (the weight holds C_in / groups)."""
    bias, stride, padding, dilation, transposed, output_padding, groups, mask = args[:8]
    common = (bias, stride, padding, dilation, transposed, output_padding, groups)
    flops = _TORCH_CONV_BACKWARD(
        grad_out_shape, x_shape, w_shape, *common, [mask[0], False, False], out_shape=out_shape
    )
    if mask[1]:
        weight = _TORCH_CONV_BACKWARD(
            grad_out_shape, x_shape, w_shape, *common, [False, True, False], out_shape=out_shape
        )
        flops += weight // groups
    return flops


# Ops FlopCounterMode scores 0 or miscounts, counted by mpbench's own formula: op -> formula.
# Only ops the installed torch has (the scaled form is float8's, on GPUs with it).
ADDED_FORMULAS = {
    **{
        op: grouped_mm_flop
        for name in ("_grouped_mm", "_scaled_grouped_mm")
        if (op := getattr(torch.ops.aten, name, None)) is not None
    },
    torch.ops.aten.convolution_backward: conv_backward_flop,
}


# Every op whose FLOPs are a matmul's (or a convolution's, or attention's), with its formula
# on the op's own arguments: the counter's, and mpbench's where it adds or replaces one.
MATMUL_FORMULAS = {
    **flop_registry,
    **{op: flop_counter.shape_wrapper(formula) for op, formula in ADDED_FORMULAS.items()},
}
MATMUL_OPS = frozenset(MATMUL_FORMULAS)


@dataclass
class Count:
    """What one counted run did: its total and each module's (a module's figure includes its
    submodules', as FlopCounterMode keeps them), by the module's qualified name; `added`: the
    ops counted by mpbench's formulas (ADDED_FORMULAS) that ran."""

    total: float
    by_module: dict[str, float] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        """Where the count comes from, naming the formulas mpbench added that counted."""
        if not self.added:
            return SOURCE
        return f"{SOURCE}; {', '.join(self.added)} by mpbench's formula"


def counted(model: torch.nn.Module, run: Callable[[], object]) -> Count:
    """The FLOPs `run()` does, with attention on the math path; `model` names the modules
    (FlopCounterMode calls the root by its class name and the rest `Root.qualified.name`)."""
    with math_attention(), FlopCounterMode(display=False, custom_mapping=ADDED_FORMULAS) as counter:
        run()
    root = type(model).__name__
    by_module: dict[str, float] = {}
    counts = counter.get_flop_counts()
    for name, ops in counts.items():
        if name == root or name.startswith(root + "."):
            by_module[name[len(root) + 1 :]] = float(sum(ops.values()))
    ran = {str(op) for op in counts.get("Global", {})}
    added = [f"aten.{op.__name__}" for op in ADDED_FORMULAS if str(op) in ran]
    return Count(float(counter.get_total_flops()), by_module, added)
