"""Models as their libraries return them: the one tensor a cell trains on, out of whatever a
user model's forward returns (docs/workloads.md, "What the model may return").

A Hugging Face model returns a `ModelOutput` (an OrderedDict subclass), other libraries a
dict or a tuple. mpbench takes one tensor out of it with a forward hook on the model itself,
registered once when the model is built: every caller of the model — the timed steps, the
compiled module (dynamo traces the hook with the forward), a DDP wrapper, the FLOP counter,
the fp8 trace, the evaluation and the op-dtype trace — then sees a tensor, and there is one
place for the rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

DEFAULT_KEY = "logits"  # what a ModelOutput / dict is read for when the workload names none
DEFAULT_INDEX = 0  # ... and a tuple


class OutputError(TypeError):
    """A model output mpbench cannot take a tensor out of: one line saying what the model
    returned and what to return (the cell fails with it as its reason)."""


def describe(output: Any) -> str:
    """What a forward returned, in a few words: 'a CausalLMOutput with keys logits, ...'."""
    kind = type(output).__name__
    if isinstance(output, Mapping):
        keys = ", ".join(str(k) for k in output) or "none"
        return f"a {kind} with keys {keys}"
    if isinstance(output, tuple | list):
        kinds = ", ".join(type(x).__name__ for x in output[:5]) + (
            ", ..." if len(output) > 5 else ""
        )
        return f"a {kind} of {len(output)} ({kinds})"
    return f"a {kind}"


def _chosen(output: Any, wanted: str | int | None) -> str | int:
    """The key or index to read: the workload's, else a mapping's "logits", a tuple's 0."""
    if wanted is not None:
        return wanted
    return DEFAULT_KEY if isinstance(output, Mapping) else DEFAULT_INDEX


def take(output: Any, wanted: str | int | None) -> torch.Tensor:
    """The tensor of `output` the cell trains on: the output itself where it is one; a
    ModelOutput's or dict's `wanted` key (default "logits"); a tuple's `wanted` index
    (default 0). OutputError naming what came back otherwise."""
    if isinstance(output, torch.Tensor):
        return output
    hint = "return a tensor, or name the one to use with UserWorkload(output=KEY or INDEX)"
    if isinstance(output, Mapping):
        key = _chosen(output, wanted)
        found = output.get(key) if isinstance(key, str) else None
        if isinstance(found, torch.Tensor):
            return found
        raise OutputError(f"the model returned {describe(output)}: no tensor under {key!r}; {hint}")
    if isinstance(output, tuple | list):
        index = _chosen(output, wanted)
        if isinstance(index, int) and -len(output) <= index < len(output):
            found = output[index]
            if isinstance(found, torch.Tensor):
                return found
        raise OutputError(
            f"the model returned {describe(output)}: no tensor at index {index!r}; {hint}"
        )
    raise OutputError(f"the model returned {describe(output)}, not a tensor; {hint}")


@dataclass
class OutputReader:
    """The forward hook that replaces a model's output with `take(output, wanted)`, and what it
    saw the first time: the record's `config.output` ("logits of CausalLMOutput...")."""

    wanted: str | int | None
    seen: str | None = None

    def __call__(self, module: torch.nn.Module, args: Any, output: Any) -> torch.Tensor:
        tensor = take(output, self.wanted)
        if self.seen is None and not torch.compiler.is_compiling():
            self.seen = self.describe_seen(output)
        return tensor

    def describe_seen(self, output: Any) -> str:
        if isinstance(output, torch.Tensor):
            return "the tensor the forward returns"
        chosen = _chosen(output, self.wanted)
        part = repr(chosen) if isinstance(output, Mapping) else f"item {chosen}"
        return f"{part} of the {type(output).__name__} the forward returns"


def read_output(model: torch.nn.Module, wanted: str | int | None) -> OutputReader:
    """Make `model(x)` return one tensor from now on (a forward hook; the model, its module
    names and its parameters stay as they are)."""
    reader = OutputReader(wanted)
    model.register_forward_hook(reader)
    return reader
