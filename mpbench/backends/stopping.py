"""A cell that cannot pay stops early (docs/measurement.md, "A cell that cannot pay stops early").

After its warm-up and a few timed steps, a cell whose step is more than `stop_slower_than`
times its float32 twin's (the same cell under float32, measured earlier in the run), or whose
projected time passes its timeout, stops there: its record keeps the timed steps it ran, the
ratio and the projection (results.schema.StopStats), and claims no accuracy. Both frameworks'
timed loops ask one StopCheck; between its decisions a step pays one comparison
(`step >= check.next_step`), outside the timed interval.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from mpbench.backends.base import CellSpec, StepPlan, WindowPlan
from mpbench.results.schema import StopStats

# The ratio rule waits for this many timed steps: one step can be an outlier (a page fault,
# a late allocation), the median of three is not.
MIN_TIMED_STEPS = 3
# A test batch is a forward pass: about a third of a training step (3 × forward, workloads).
EVALUATION_SHARE = 1 / 3
NEVER = sys.maxsize  # the next step of a check that has nothing to decide
SLOWER, TIMEOUT = "slower than float32", "past the timeout"


class StopCheck:
    """Decides, at timed steps 1, 3, 6, 12, ... (doubling), whether the cell stops: the
    timeout rule from the first timed step on, the ratio rule from MIN_TIMED_STEPS on.

    `started`: the clock (time.monotonic) when the cell began, for the time it has taken so
    far; `after_steps`: the steps a finished cell trains after the timed ones, in timed steps'
    worth (the end-to-end window and the evaluation)."""

    def __init__(
        self,
        spec: CellSpec,
        plan: StepPlan,
        after_steps: float,
        started: float,
    ) -> None:
        # A data-parallel cell's ranks would all have to agree to stop: the rule is off there.
        alone = spec.world_size == 1
        self.limit = spec.stop_slower_than  # None: off (the timeout rule stays)
        self.float32_step_s = spec.float32_step_s if alone else None
        self.timeout_s = spec.timeout if alone else None
        self.plan, self.after_steps, self.started = plan, after_steps, started
        first = 1 if self.timeout_s is not None else MIN_TIMED_STEPS
        comparing = self.float32_step_s is not None and self.limit is not None
        judging = self.timeout_s is not None or comparing
        # What the loops compare each step's number (1-based, warm-up included) against.
        self.next_step = plan.warmup_steps + first if judging else NEVER

    @classmethod
    def for_cell(
        cls,
        spec: CellSpec,
        plan: StepPlan,
        window: WindowPlan,
        test_samples: int,
        batch_size: int,
        progress: Any,
    ) -> StopCheck:
        """The check of a cell that, finished, trains `window` after its timed steps and then
        evaluates `test_samples` in batches of `batch_size`; its clock from the cell
        process's start (launchers/cell.py's events say when), or from now."""
        batches = -(-test_samples // batch_size)
        after = window.total_steps + batches * EVALUATION_SHARE
        started = getattr(progress, "started", None)
        return cls(spec, plan, after, started if started is not None else time.monotonic())

    def decide(self, step_times_s: list[float]) -> StopStats | None:
        """After step `len(step_times_s)` (warm-up included): the cell's StopStats where it
        stops here, else None, with the next step to decide at."""
        warmup = self.plan.warmup_steps
        timed = step_times_s[warmup:]
        ran = len(timed)
        self.next_step = warmup + max(MIN_TIMED_STEPS, 2 * ran)
        step_s = statistics.median(timed)
        left = self.plan.total_steps - warmup - ran + self.after_steps
        projected = time.monotonic() - self.started + left * step_s
        ratio = step_s / self.float32_step_s if self.float32_step_s else None
        # Decided on the fastest step, said with the median: a neighbour that takes the cores
        # for a while slows some steps, not every one, so a policy stops only when even its
        # best step is past the limit (beside a test suite, a contended bf16 cell's median
        # was past the limit where many of its steps were not).
        slower = (
            self.float32_step_s is not None
            and self.limit is not None
            and ran >= MIN_TIMED_STEPS
            and min(timed) / self.float32_step_s > self.limit
        )
        late = self.timeout_s is not None and projected > self.timeout_s
        if not (slower or late):
            return None
        return StopStats(
            rule=SLOWER if slower else TIMEOUT,
            steps=ran,
            planned_steps=self.plan.total_steps - warmup,
            step_s=step_s,
            projected_s=projected,
            timeout_s=self.timeout_s,
            slower_than_float32=ratio,
            float32_step_s=self.float32_step_s,
            limit=self.limit,
        )


def stopped_reason(stopped: StopStats) -> str:
    """The record's reason: 'stopped: 180× slower than float32 after 3 steps; would have
    taken 8 min' (or '... would have passed its 900 s timeout')."""
    after = f"after {stopped.steps} step{'s' if stopped.steps != 1 else ''}"
    late = stopped.timeout_s is not None and stopped.projected_s > stopped.timeout_s
    if stopped.rule == SLOWER:
        assert stopped.slower_than_float32 is not None
        head = f"stopped: {ratio(stopped.slower_than_float32)} slower than float32 {after}"
        if late:
            return f"{head}; would have passed its {stopped.timeout_s:g} s timeout"
        return f"{head}; would have taken {duration(stopped.projected_s)}"
    text = (
        f"stopped: would have passed its {stopped.timeout_s:g} s timeout {after} (about "
        f"{duration(stopped.projected_s)} at {duration(stopped.step_s)} a step)"
    )
    if stopped.slower_than_float32 is not None:
        text += f"; {ratio(stopped.slower_than_float32)} float32's step"
    return text


def ratio(value: float) -> str:
    """227×, 12×, 3.2×."""
    return f"{value:.0f}×" if value >= 10 else f"{value:.2g}×"


def duration(seconds: float) -> str:
    """1.2 ms, 850 ms, 45 s, 15 min, 2.5 h."""
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
