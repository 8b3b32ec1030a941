"""The bottleneck of real torch cells on this CPU: a tiny mnist_dense cell is overhead
(launch)-bound, a wide one compute-bound, each with its evidence in the record. The peak and
the bandwidth they are set against are measured here, by `detect --measure`'s child."""

from __future__ import annotations

import functools
import json
import re

import pytest
from builders import cell_spec

pytest.importorskip("torch")

from mpbench.backends.torch import backend as torch_backend
from mpbench.detect.measure import run_measure_child
from mpbench.policies import DeviceTraits
from mpbench.results import load_record
from mpbench.runner.launchers.process import Outcome
from mpbench.runner.records import build_record

CPU = DeviceTraits("cpu", "this CPU")


@functools.cache
def measured() -> tuple[float, float]:
    """This CPU's fp32 matmul peak (TFLOP/s), on small sizes, and its triad bandwidth (GB/s)
    at detect's default array size."""
    result = run_measure_child("cpu", sizes=(256, 512), dtypes=("fp32",), budget_s=0.3)
    assert result["ok"], result
    return result["dtypes"]["fp32"]["best_tflops"], result["bandwidth"]["best_gbps"]


def cell_record(units: int, batch: int, steps: int):
    spec = cell_spec(
        units=units,
        batch_size=batch,
        max_steps=steps,
        warmup_steps=2,
        synthetic_train_size=batch * steps,
        synthetic_test_size=batch,
    )
    measurements = torch_backend.run_cell(spec, lambda step, total: None, lambda text: None)
    peak, bandwidth = measured()
    outcome = Outcome("ok", measurements=measurements)
    record = build_record(
        spec, outcome, CPU, "fingerprint", "torch", {"fp32": peak}, None, bandwidth
    )
    assert load_record(json.loads(json.dumps(record.to_dict()))) == record
    return record


def test_a_tiny_cell_is_overhead_bound_and_a_wide_one_compute_bound():
    tiny_record, wide_record = cell_record(16, 16, 40), cell_record(1024, 1024, 8)
    tiny, wide = tiny_record.bottleneck, wide_record.bottleneck
    # Other processes taking the cores (a test suite beside this one) lower a CPU cell's
    # share of its roofline: such a cell is left unclassified, with the reason, never guessed.
    quiet = []
    for cell, kind in ((tiny_record, "launch-bound"), (wide_record, "compute-bound")):
        contended = cell.contention is not None and cell.contention.contended
        assert cell.bottleneck.kind == ("unknown" if contended else kind), cell.bottleneck
        if contended:
            assert "roofline_share" in cell.bottleneck.unavailable
        quiet.append(not contended)
    for stats in (tiny, wide):
        assert stats.source == "process CPU time"
        assert stats.device_busy_fraction is None
        assert "device_busy_fraction" in stats.unavailable
        assert 0 < stats.host_busy_fraction <= 1.5  # mpbench's samplers add a little
        assert stats.evidence.startswith("CPU busy ")
        # The threads the cell's framework ran with (its pool, as the process was given it).
        assert re.search(r"CPU busy \d+ % of \d+ thread\(s\)", stats.evidence), stats.evidence
        assert stats.peak_tflops and stats.bandwidth_gbps and stats.input_share is not None
        assert stats.ridge_point == pytest.approx(
            stats.peak_tflops * 1e12 / (stats.bandwidth_gbps * 1e9)
        )
    if quiet[0]:
        assert "of the roofline's" in tiny.evidence and tiny.remedy.startswith("a larger batch")
    if quiet[1]:
        assert wide.arithmetic_intensity > wide.ridge_point
        assert wide.remedy.startswith("already compute-bound")
    # The wide cell does 10^4 times the tiny one's FLOPs a step: it reaches far more of the peak.
    assert wide.achieved_tflops > 10 * tiny.achieved_tflops


def test_a_cpu_cell_without_a_cached_peak_says_so():
    spec = cell_spec()
    measurements = torch_backend.run_cell(spec, lambda step, total: None, lambda text: None)
    # Without its end-to-end window: on a loaded machine the window's slower steps can read
    # as an input share above a half (input-bound), which needs no peak; this test is about
    # the classes that do.
    measurements.end_to_end = None
    record = build_record(spec, Outcome("ok", measurements=measurements), CPU, "f", "torch")
    stats = record.bottleneck
    assert stats.kind == "unknown" and stats.remedy is None
    assert "detect --measure" in stats.unavailable["peak_tflops"]
    assert "detect --measure" in stats.unavailable["bandwidth_gbps"]
    assert stats.evidence.startswith("CPU busy ") and "not classified: " in stats.evidence


def test_a_16_bit_cpu_cell_records_the_share_of_its_step_spent_converting_dtypes():
    """A bf16 step converts its input batch and weights to bf16 and its gradients back
    (aten::_to_copy), measured under torch.profiler's CPU activity; a float32 step converts
    nothing and is not profiled. The evidence line names the share from 10 % up."""
    sizes = dict(units=64, batch_size=512, max_steps=8, warmup_steps=2)
    sizes.update(synthetic_train_size=512 * 8, synthetic_test_size=512)
    for policy in ("mixed_bfloat16", "float32"):
        spec = cell_spec(policy=policy, **sizes)
        measurements = torch_backend.run_cell(spec, lambda step, total: None, lambda text: None)
        record = build_record(spec, Outcome("ok", measurements=measurements), CPU, "f", "torch")
        assert load_record(json.loads(json.dumps(record.to_dict()))) == record
        stats = record.bottleneck
        if policy == "float32":
            assert stats.cast_share is None and stats.cast_source is None
            assert "converting dtypes" not in stats.evidence
            continue
        assert 0 < stats.cast_share <= 1, stats
        source = "torch.autograd.profiler CPU time of aten::_to_copy over 5 steps"
        assert stats.cast_source == source
        named = "converting dtypes takes" in stats.evidence
        assert named == (stats.cast_share >= 0.1), stats.evidence
