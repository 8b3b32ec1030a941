"""A cell that cannot pay stops early (docs/measurement.md; backends/stopping.py): tiny real
cells, in-process, each given a float32 reference step far below its own (a tenth of a
microsecond: no CPU trains a step that fast) or a timeout its plan cannot meet, so that what
is tested is the rule, not this CPU's speed."""

from __future__ import annotations

import os

import pytest
from builders import cell_spec
from frameworks import needs_tensorflow, needs_torch

from mpbench.backends.base import Measurements
from mpbench.backends.stopping import MIN_TIMED_STEPS, SLOWER, TIMEOUT

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

WARMUP = 2
TINY_STEP_S = 1e-7  # the float32 twin's step handed to the cell: every real step is slower


def run(framework: str, policy: str = "mixed_bfloat16", **changes: object) -> Measurements:
    spec = cell_spec(**{"framework": framework, "policy": policy, "max_steps": 12, **changes})
    if framework == "torch":
        from mpbench.backends.torch.backend import run_cell
    else:
        from mpbench.backends.tensorflow.backend import run_cell
    return run_cell(spec, lambda step, total: None, lambda message: None)


def assert_stopped_by_ratio(cell: Measurements) -> None:
    """Stopped after the warm-up and MIN_TIMED_STEPS timed steps, their times kept, with the
    ratio; nothing trained or evaluated after them."""
    assert cell.status == "stopped"
    stopped = cell.stopped
    assert stopped is not None and stopped.rule == SLOWER
    assert stopped.steps == MIN_TIMED_STEPS and stopped.planned_steps == 12 - WARMUP
    assert len(cell.step_times_s) == WARMUP + MIN_TIMED_STEPS  # warm-up excluded as usual
    assert stopped.slower_than_float32 == pytest.approx(stopped.step_s / TINY_STEP_S)
    assert stopped.float32_step_s == TINY_STEP_S and stopped.limit == 10.0
    assert cell.reason.startswith("stopped: ")
    assert f"slower than float32 after {MIN_TIMED_STEPS} steps; would have taken" in cell.reason
    assert cell.test_accuracy is None and cell.test_loss is None and cell.end_to_end is None


@needs_torch
def test_a_torch_cell_far_slower_than_float32_stops_with_the_ratio():
    assert_stopped_by_ratio(run("torch", float32_step_s=TINY_STEP_S))


@needs_tensorflow
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_a_keras_cell_far_slower_than_float32_stops_with_the_ratio(loop):
    cell = run("tensorflow", float32_step_s=TINY_STEP_S, loop=loop)
    assert_stopped_by_ratio(cell)
    assert len(cell.epoch_losses) == 1  # the epoch it stopped in


@needs_torch
def test_off_runs_on_however_slow():
    cell = run("torch", float32_step_s=TINY_STEP_S, stop_slower_than=None)
    assert cell.status == "ok" and cell.stopped is None
    assert len(cell.step_times_s) == 12 and cell.test_accuracy is not None


@needs_torch
def test_a_cell_whose_plan_passes_its_timeout_stops_after_its_first_timed_step():
    # 16 steps an epoch for 10,000 epochs: no CPU trains 160,000 steps in 2 s.
    cell = run("torch", policy="float32", epochs=10_000, max_steps=None, timeout=2.0)
    assert cell.status == "stopped"
    assert cell.stopped is not None and cell.stopped.rule == TIMEOUT
    assert cell.stopped.steps == 1 and cell.stopped.projected_s > 2.0
    assert cell.stopped.slower_than_float32 is None  # float32 is the reference itself
    assert cell.reason.startswith("stopped: would have passed its 2 s timeout after 1 step")
    assert len(cell.step_times_s) == WARMUP + 1 and cell.test_accuracy is None
