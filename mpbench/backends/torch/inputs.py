"""A model's input in a torch cell: one tensor, or a dict of tensors by the model's keyword
arguments (a user workload's dict x: workloads/inputs.py). Every caller of the model (the
steps, evaluation, the FLOP count, the op-dtype trace, fp8's trace, the check before the
first cell) calls it through `call`, so that one rule says how x reaches the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mpbench.workloads.inputs import arrays, first, named

# A tensor, or a dict of tensors by keyword, each with the samples as its first axis.
Inputs = torch.Tensor | dict[str, torch.Tensor]


def call(model: Callable[..., Any], x: Inputs) -> Any:
    """`model(**x)` for a dict x (an encoder-decoder's input_ids and decoder_input_ids),
    `model(x)` for one tensor."""
    return model(**x) if named(x) else model(x)


def device_of(x: Inputs) -> torch.device:
    return first(x).device


def nbytes(x: Inputs) -> int:
    return sum(t.element_size() * t.nelement() for t in arrays(x))
