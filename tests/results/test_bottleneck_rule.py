"""The bottleneck classifier (mpbench.results.bottleneck): each class from its evidence, the
thresholds' edges, and no class guessed where evidence is missing."""

from __future__ import annotations

import pytest

from mpbench.results.bottleneck import (
    BUSY_MIN,
    CAST_REMEDY,
    CAST_SHARE_NOTE,
    COMPUTE_REMEDY,
    INPUT_REMEDY,
    INPUT_SHARE_MIN,
    LAUNCH_REMEDY,
    MEMORY_REMEDY,
    ROOF_SHARE_MIN,
    Evidence,
    classify,
)
from mpbench.workloads.spec import CIFAR10_CNN, MNIST_DENSE, step_bytes

# The H200's first run (cifar10_cnn, batch 128, float32): a 1.78 ms step; the datasheet's
# bf16 peak and HBM3e bandwidth of an H200 SXM.
H200_PEAK, H200_BANDWIDTH = 989.5, 4800.0


def gpu(**changes) -> Evidence:
    values = dict(
        source="torch.profiler CUDA kernel time over 5 steps",
        step_s=1.78e-3,
        flops_per_step=CIFAR10_CNN.flops_per_step(128),
        bytes_per_step=CIFAR10_CNN.bytes_per_step(128, 2),
        peak_tflops=H200_PEAK,
        peak_name="the datasheet bf16 peak",
        bandwidth_gbps=H200_BANDWIDTH,
        device_busy_fraction=0.9,
        device_busy_s=1.6e-3,
        busy_step_s=1.78e-3,
        input_share=0.05,
    )
    return Evidence(**{**values, **changes})


def cpu(**changes) -> Evidence:
    """A 2-thread CPU: 0.2 TFLOP/s fp32 peak, 10 GB/s: the ridge at 20 FLOP/B."""
    values = dict(
        source="process CPU time",
        step_s=0.2,
        flops_per_step=MNIST_DENSE.flops_per_step(1024, 1024),
        bytes_per_step=MNIST_DENSE.bytes_per_step(1024, 4, 1024),
        peak_tflops=0.2,
        peak_name="the measured fp32 peak",
        bandwidth_gbps=10.0,
        host_busy_fraction=0.95,
        threads=2,
        input_share=0.0,
    )
    return Evidence(**{**values, **changes})


def test_a_device_idle_most_of_the_step_is_launch_bound():
    # The H200's cifar10_cnn: GPU busy 14 % of a 1.78 ms step.
    stats = classify(gpu(device_busy_fraction=0.14, device_busy_s=0.25e-3))
    assert stats.kind == "launch-bound"
    assert stats.remedy == LAUNCH_REMEDY
    assert stats.evidence.startswith("device busy 14 % of the step (kernels 0.25 of 1.78 ms)")
    assert "of the datasheet bf16 peak" in stats.evidence
    assert stats.source == "torch.profiler CUDA kernel time over 5 steps"
    assert stats.device_busy_fraction == 0.14
    achieved = CIFAR10_CNN.flops_per_step(128) / 1.78e-3 / 1e12
    assert stats.achieved_tflops == pytest.approx(achieved)
    assert stats.ridge_point == pytest.approx(H200_PEAK * 1e12 / (H200_BANDWIDTH * 1e9))


def test_a_busy_device_above_the_ridge_point_is_compute_bound():
    evidence = gpu(bytes_per_step=1e6, flops_per_step=1e12)  # 1e6 FLOP/B
    stats = classify(evidence)
    assert stats.kind == "compute-bound" and stats.remedy == COMPUTE_REMEDY
    assert stats.arithmetic_intensity == pytest.approx(1e6)
    assert "the ridge point 206 FLOP/B" in stats.evidence and ">=" in stats.evidence


def test_a_busy_device_below_the_ridge_point_is_memory_bound():
    stats = classify(gpu())  # the CNN at bf16: about 29 FLOP/B against a ridge of 206
    assert stats.kind == "memory-bound" and stats.remedy == MEMORY_REMEDY
    assert stats.arithmetic_intensity < stats.ridge_point
    assert "device busy 90 % of the step" in stats.evidence


def test_an_input_pipeline_taking_most_of_the_step_is_input_bound():
    stats = classify(gpu(input_share=0.7, device_busy_fraction=0.2))
    assert stats.kind == "input-bound" and stats.remedy == INPUT_REMEDY
    assert stats.evidence.startswith("the input pipeline and the work between steps take 70 %")
    assert stats.input_share == 0.7


def test_the_thresholds_edges():
    assert classify(gpu(device_busy_fraction=BUSY_MIN)).kind != "launch-bound"
    assert classify(gpu(device_busy_fraction=BUSY_MIN - 0.01)).kind == "launch-bound"
    assert classify(gpu(input_share=INPUT_SHARE_MIN)).kind == "input-bound"
    assert classify(gpu(input_share=INPUT_SHARE_MIN - 0.01)).kind != "input-bound"


def test_on_a_cpu_a_step_far_below_its_roofline_is_overhead_bound():
    # units 16, batch 16: about 1.6 FLOP/B, so its roof is the memory roof, 16 GFLOP/s here.
    small = cpu(
        step_s=2e-3,
        flops_per_step=MNIST_DENSE.flops_per_step(16, 16),
        bytes_per_step=MNIST_DENSE.bytes_per_step(16, 4, 16),
        host_busy_fraction=0.5,
    )
    stats = classify(small)
    assert stats.kind == "launch-bound" and stats.remedy == LAUNCH_REMEDY
    assert stats.device_busy_fraction is None and stats.host_busy_fraction == 0.5
    assert stats.evidence.startswith("CPU busy 50 % of 2 thread(s) over the timed steps")
    assert "of the roofline's" in stats.evidence
    roof = small.roof_tflops
    assert roof == pytest.approx(small.arithmetic_intensity * 10e9 / 1e12)
    assert small.achieved_tflops / roof < ROOF_SHARE_MIN


def test_on_a_cpu_a_step_near_its_compute_roof_is_compute_bound():
    stats = classify(cpu())  # 49 GFLOP/s of 200, at 73 FLOP/B against a ridge of 20
    assert stats.kind == "compute-bound"
    assert stats.peak_tflops == 0.2 and stats.bandwidth_gbps == 10.0
    assert "24 % of the measured fp32 peak" in stats.evidence


def test_a_busy_device_without_a_bandwidth_is_not_classified():
    evidence = gpu(bandwidth_gbps=None)
    evidence.unavailable["bandwidth_gbps"] = "no measured bandwidth cached"
    stats = classify(evidence)
    assert stats.kind == "unknown" and stats.remedy is None
    assert "not classified: bandwidth_gbps (no measured bandwidth cached)" in stats.evidence
    assert stats.unavailable == {"bandwidth_gbps": "no measured bandwidth cached"}
    assert stats.ridge_point is None


def test_a_cpu_without_a_measured_peak_is_not_classified():
    stats = classify(cpu(peak_tflops=None, peak_name=None))
    assert stats.kind == "unknown"
    assert stats.unavailable["peak_tflops"] == "not measured"
    assert "peak_tflops (not measured)" in stats.evidence


def test_a_device_idle_most_of_the_step_needs_no_roofline():
    # Launch-bound rests on the busy time alone: the missing FLOPs do not hide it.
    stats = classify(gpu(device_busy_fraction=0.2, flops_per_step=None, bandwidth_gbps=None))
    assert stats.kind == "launch-bound"
    assert stats.achieved_tflops is None and stats.arithmetic_intensity is None


def test_a_contended_gpu_cell_says_so_and_a_contended_cpu_cell_is_not_classified():
    stats = classify(gpu(contended=True))
    assert stats.kind == "memory-bound"
    assert stats.evidence.endswith(
        "the machine was contended meanwhile (the record's contention says how)"
    )
    stats = classify(cpu(contended=True))
    assert stats.kind == "unknown" and "roofline_share" in stats.unavailable
    assert "not classified: other processes took the CPU" in stats.evidence


def test_a_contended_cell_is_not_called_input_bound():
    assert classify(gpu(input_share=0.7, contended=True)).kind == "memory-bound"


def test_the_bytes_a_step_moves_count_each_tensor_once_per_use():
    # 784 -> 16 -> 16 -> 10 at float32, batch 16, RMSprop (one state).
    params = 784 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10
    activations = 16 * (2 * 16 + 2 * 16 + 10)  # two ReLU layers' outputs, and the logits
    by_hand = 2 * 4 * params + 2 * 4 * params + 2 * 4 * params * 2 + 4 * 4 * activations
    by_hand += 2 * 4 * 784 * 16
    assert MNIST_DENSE.bytes_per_step(16, 4, 16) == by_hand
    assert step_bytes(params, activations, 784 * 16, 4, 1) == by_hand
    # A 16-bit policy halves the weights' and activations' bytes, not the optimizer's.
    assert MNIST_DENSE.bytes_per_step(16, 2, 16) == by_hand - 2 * 2 * params - 4 * 2 * activations


def test_a_step_that_spends_a_tenth_or_more_converting_dtypes_says_so_and_how_to_convert_less():
    stats = classify(cpu(cast_share=0.27, cast_source="profiler"))
    assert stats.kind == "compute-bound" and stats.cast_share == 0.27
    assert stats.cast_source == "profiler"
    assert "converting dtypes takes 27 % of the step" in stats.evidence
    assert stats.remedy == f"{CAST_REMEDY}; {COMPUTE_REMEDY}"
    below = classify(cpu(cast_share=CAST_SHARE_NOTE - 0.01))
    assert "converting" not in below.evidence and below.remedy == COMPUTE_REMEDY
    # An input-bound step's remedy is its input pipeline's, whatever it converts.
    fed = classify(cpu(cast_share=0.5, input_share=INPUT_SHARE_MIN))
    assert fed.kind == "input-bound" and fed.remedy == INPUT_REMEDY
    assert "converting dtypes takes 50 %" in fed.evidence
