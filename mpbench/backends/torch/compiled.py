"""torch.compile for a cell (--compile): compile once, time it, count what compiles later.

The model is compiled; the loss, the GradScaler and the optimizer stay eager, so a changing
loss scale cannot recompile it (research notes §3). Every step feeds full batches of one
shape and runs under one autocast state, the two guards that recompile on a CPU ("size
mismatch at index 0", "GLOBAL_STATE changed: autocast"). The first step compiles the
forward and backward graphs: it runs before the timed steps, on the first batch, and its
time is recorded as the compile time instead of a step time. What it trained is then
undone (`undone`), so a compiled cell trains the same steps as its eager twin.

Counting: Dynamo bumps `torch._dynamo.utils.counters["stats"]["unique_graphs"]` for every
graph it compiles (torch/_dynamo/output_graph.py, 2.x); graphs after the first step are
recompiles. Evaluation (no_grad, eval mode) is another guard set, so the graphs it compiles
are reported apart. `TORCH_LOGS=recompiles` prints the failing guard of each.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mpbench.backends.timing import StepTimer
from mpbench.results.schema import CompileStats


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@contextlib.contextmanager
def undone(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any | None = None
) -> Iterator[None]:
    """Whatever trains inside is undone on leaving: the weights and buffers, the optimizer's
    state and the loss scaler's (scale, growth tracker) get back the values they had, and
    the gradients are freed, as before a first step.

    For the compiling step. Undoing it, rather than counting it as a training step, keeps
    the compiled cell's trained steps, its numbering and its data order those of the eager
    cell it is compared with (both train exactly the timed steps and the window's), and
    leaves it at the eager cell's starting point (no gradients, no optimizer state) where
    its training memory is measured from. The weights are copied back in place, so the
    compiled graphs keep the parameters they were traced with."""
    weights = {name: t.detach().to("cpu", copy=True) for name, t in model.state_dict().items()}
    # On the host, so the copy adds nothing to the device's memory peak; load_state_dict
    # moves each state tensor back to its parameter's device.
    state = _on_host(optimizer.state_dict())
    scaling = copy.deepcopy(scaler.state_dict()) if scaler is not None else None
    yield
    with torch.no_grad():
        model.load_state_dict(weights)
    optimizer.load_state_dict(state)
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.load_state_dict(scaling)


def _on_host(value: Any) -> Any:
    """A deep copy with every tensor copied to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: _on_host(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_on_host(item) for item in value)
    return copy.deepcopy(value)


class Compiler:
    def __init__(self, model: torch.nn.Module, backend: str = "inductor") -> None:
        # reset() empties Dynamo's caches, so this model compiles afresh, but not its
        # counters (torch/_dynamo/__init__.py): they are read as differences from here.
        torch._dynamo.reset()
        self._before = _graphs()
        self.backend = backend
        self.module = torch.compile(model, backend=backend)
        self.compile_s: float | None = None
        self._after_first = self._before
        self._after_training = self._before

    def compile_step(self, step: Callable[[], Any], sync: Callable[[], None]) -> None:
        """Run the first (compiling) training step and time it."""
        timer = StepTimer(sync)
        timer.start()
        step()
        self.compile_s = timer.stop()
        self._after_first = _graphs()

    def training_done(self) -> None:
        self._after_training = _graphs()

    def stats(self) -> CompileStats:
        assert self.compile_s is not None, "compile_step() first"
        total = _graphs()
        return CompileStats(
            backend=self.backend,
            compile_s=self.compile_s,
            recompiles=self._after_training - self._after_first,
            frames_compiled=total - self._before,
            evaluation_recompiles=total - self._after_training,
        )
