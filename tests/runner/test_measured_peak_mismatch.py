"""A cell that beats the matmul peak `detect --measure` cached voids its MFU against it, and says
why from the cell's own contention record: on a quiet machine the peak was timed on another
path than the step's (a method mismatch), never "measured low, likely on a busy machine"
(issue 41: on an AVX2-only CPU the bf16 peak was timed as torch.mm on bf16 tensors, a fifth of
what the bf16 step reached through autocast, and a quiet machine was blamed)."""

from __future__ import annotations

from builders import cell_spec

from mpbench.backends.base import Measurements
from mpbench.policies import DeviceTraits
from mpbench.results.schema import DeviceInfo
from mpbench.runner.launchers.process import Outcome
from mpbench.runner.records import MFU_MEASURED_LIMIT, build_record

CPU = DeviceTraits("cpu", "a test CPU")
PEAK = 1e-6  # TFLOP/s: far below what the cell below reaches


def contention(contended: bool) -> dict:
    return {
        "wall_s": 1.0,
        "cpus": 2,
        "busy_cores": 2.9 if contended else 2.0,
        "own_cores": 2.0,
        "other_cores": 0.9 if contended else 0.0,
        "contended": contended,
        "why": ["other processes used 0.90 of 2 cores"] if contended else [],
    }


def bf16_record(contended: bool | None):
    """A torch bf16 cell whose step reached far more than PEAK, with that contention (None:
    the cell could not tell)."""
    telemetry = None
    if contended is not None:
        summary = dict(
            numerics_points=3, numerics_stride=1, steps=3, skipped_steps=0, nonfinite_steps=0
        )
        telemetry = {"summary": summary, "contention": contention(contended)}
    measurements = Measurements(
        framework_version="torch 2.13.0",
        device=DeviceInfo(kind="cpu", name="a test CPU"),
        precision={"compute_dtype": "bfloat16"},
        step_times_s=[0.002, 0.001, 0.001, 0.001],
        warmup_steps=1,
        samples_per_step=64,
        epoch_losses=[2.0],
        test_accuracy=0.5,
        test_loss=1.0,
        params=1000,
        telemetry=telemetry,
    )
    spec = cell_spec(policy="mixed_bfloat16", max_steps=3)
    outcome = Outcome("ok", measurements=measurements)
    return build_record(spec, outcome, CPU, "fingerprint", "torch", {"bf16": PEAK})


def test_a_quiet_cell_above_the_peak_is_a_method_mismatch():
    record = bf16_record(contended=False)
    assert record.achieved_tflops / PEAK > MFU_MEASURED_LIMIT and record.mfu_measured is None
    why = record.implausible["mfu_measured"]
    assert "the measured peak was timed on another path than the step's" in why
    assert "a method mismatch, not a busy machine" in why
    assert "measured low" not in why and "re-run" not in why  # nothing to re-measure


def test_a_busy_cell_above_the_peak_names_both_causes():
    why = bf16_record(contended=True).implausible["mfu_measured"]
    assert "either the measured peak was timed on another path than the step's" in why
    assert "or the peak was measured low on a busy machine" in why
    assert "this cell's machine was busy: other processes used 0.90 of 2 cores" in why
    assert "re-run `mpbench detect --measure` on a quiet machine" in why


def test_a_cell_that_could_not_tell_does_not_blame_the_machine():
    why = bf16_record(contended=None).implausible["mfu_measured"]
    assert "another path than the step's" in why
    assert "whether the machine was quiet is not known" in why
