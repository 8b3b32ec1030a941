"""torch.compile for a cell (--compile): compile once, time it, count what compiles later.

The model is compiled; the loss, the GradScaler and the optimizer stay eager, so a changing
loss scale cannot recompile it (research notes §3). Every step feeds full batches of one
shape and runs under one autocast state, the two guards that recompile on a CPU ("size
mismatch at index 0", "GLOBAL_STATE changed: autocast"). The first step compiles the
forward and backward graphs: it runs before the timed steps, on the first batch, and its
time is recorded as the compile time instead of a step time.

Counting: Dynamo bumps `torch._dynamo.utils.counters["stats"]["unique_graphs"]` for every
graph it compiles (torch/_dynamo/output_graph.py, 2.x); graphs after the first step are
recompiles. Evaluation (no_grad, eval mode) is another guard set, so the graphs it compiles
are reported apart. `TORCH_LOGS=recompiles` prints the failing guard of each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mpbench.backends.timing import StepTimer
from mpbench.results.schema import CompileStats


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class Compiler:
    def __init__(self, model: torch.nn.Module, backend: str = "inductor") -> None:
        torch._dynamo.reset()  # counters and caches of this process start from zero
        self.backend = backend
        self.module = torch.compile(model, backend=backend)
        self.compile_s: float | None = None
        self._after_first = 0
        self._after_training = 0

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
            frames_compiled=total,
            evaluation_recompiles=total - self._after_training,
        )
