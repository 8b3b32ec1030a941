"""The early stop's rule (backends/stopping.py) on given step times: decided on the cell's
fastest timed step, so that a neighbour slowing some of its steps does not stop it, and said
with its median."""

from __future__ import annotations

import time

from builders import cell_spec

from mpbench.backends.base import StepPlan
from mpbench.backends.stopping import SLOWER, StopCheck

PLAN = StepPlan(steps_per_epoch=100, epochs=1, total_steps=100, warmup_steps=2)


def check(**spec) -> StopCheck:
    values = dict(float32_step_s=0.010, stop_slower_than=10.0, timeout=None)
    return StopCheck(cell_spec(**{**values, **spec}), PLAN, 0.0, time.monotonic())


def test_a_cell_whose_fastest_step_is_within_the_limit_runs_on_however_slow_its_median():
    # Two of three timed steps 30x float32's (a neighbour took the cores), one at float32's.
    assert check().decide([1.0, 1.0, 0.010, 0.300, 0.300]) is None


def test_a_cell_whose_every_step_is_past_the_limit_stops_and_says_its_median_ratio():
    stopped = check().decide([1.0, 1.0, 0.200, 0.300, 0.300])
    assert stopped is not None and stopped.rule == SLOWER
    assert stopped.slower_than_float32 == 30.0  # the median's ratio, not the fastest step's
    assert stopped.steps == 3 and stopped.step_s == 0.300


def test_the_limit_off_leaves_the_ratio_rule_out():
    assert check(stop_slower_than=None).decide([1.0, 1.0, 0.3, 0.3, 0.3]) is None
