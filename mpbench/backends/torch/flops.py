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
from torch.utils.flop_counter import FlopCounterMode

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


@dataclass
class Count:
    """What one counted run did: its total and each module's (a module's figure includes its
    submodules', as FlopCounterMode keeps them), by the module's qualified name."""

    total: float
    by_module: dict[str, float] = field(default_factory=dict)


def counted(model: torch.nn.Module, run: Callable[[], object]) -> Count:
    """The FLOPs `run()` does, with attention on the math path; `model` names the modules
    (FlopCounterMode calls the root by its class name and the rest `Root.qualified.name`)."""
    with math_attention(), FlopCounterMode(display=False) as counter:
        run()
    root = type(model).__name__
    by_module: dict[str, float] = {}
    for name, ops in counter.get_flop_counts().items():
        if name == root or name.startswith(root + "."):
            by_module[name[len(root) + 1 :]] = float(sum(ops.values()))
    return Count(float(counter.get_total_flops()), by_module)
