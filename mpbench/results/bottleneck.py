"""What limited a cell's step, from evidence the cell measured: the one classifier
(docs/measurement.md, "What limits a step").

The classes are Horace He's three regimes ("Making Deep Learning Go Brrrr From First
Principles": compute, memory, overhead) plus the input pipeline:

1. input-bound: the input pipeline and the work between steps take most of the end-to-end
   step (`input_share` >= INPUT_SHARE_MIN; not on a contended cell, whose neighbours slowed
   its window and its steps unevenly);
2. launch-bound (overhead): the device sits idle waiting on the host for most of the step
   (`device_busy_fraction` < BUSY_MIN); where the device-busy time is not measured (a CPU,
   whose cores are the device and the host at once), when the step reaches less than
   ROOF_SHARE_MIN of its roofline, min(peak, intensity x bandwidth): neither the math nor the
   bytes explain where its time went;
3. compute-bound when the step's FLOPs per byte reach the ridge point (the policy's peak over
   the measured bandwidth), memory-bound below it.

Evidence that is missing is never guessed: the class is "unknown", the evidence line says what
is missing, and `unavailable` says why, each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpbench.results.schema import BottleneckStats

# A device busy less than half the step waits on the host more than it computes: the launch-
# bound signature of HTA's idle-time breakdown ("waiting for the host"), and the rule the
# research notes derive from it (G/T < ~0.5). NVIDIA's CUDA-graph guidance names < 80 %
# utilisation a symptom; half is the point where the host, not the device, holds most of it.
BUSY_MIN = 0.5
# The input pipeline's share of the end-to-end step at which it, not the step, is the job's
# limit: "most of the end-to-end step".
INPUT_SHARE_MIN = 0.5
# Below a tenth of its roofline a step spends most of its time neither on math nor on moving
# its tensors. Measured on a 2-core CPU (docs/measurement.md, "What limits a step"): the
# 16-unit batch-16 mnist_dense cell reaches 0.2-3 % of its roofline, the 2048-unit
# batch-2048 one 28 % (its backward, bias and ReLU kernels run below the GEMM peak). The byte
# count is a lower bound (each tensor once), so the memory roof is optimistic and a
# memory-bound step reads low against it: a tenth leaves it a factor of ten.
ROOF_SHARE_MIN = 0.1

CONTENDED = (
    "other processes took the CPU during the timed steps: the step's share of its roofline "
    "would measure them"
)
LAUNCH_REMEDY = "a larger batch, --compile (CUDA graphs on a GPU), fewer small kernels"
MEMORY_REMEDY = (
    "fewer bytes per FLOP: a 16-bit policy (half the activation bytes), a larger batch "
    "(weights reused across more samples), --compile (fused elementwise ops)"
)
COMPUTE_REMEDY = (
    "already compute-bound: only a faster matmul dtype (bf16, fp8 where the hardware has "
    "it) or fewer FLOPs shortens the step"
)
# A 16-bit step on a CPU that spends this share or more converting dtypes is said to: the
# casts, not the matmuls, then hold back its speed-up (docs/policies.md, "CPUs": 15-20 % of a
# bf16 mnist_dense step at 64 units on an AMX Xeon, where bf16 gained 1.56x, not 2x).
CAST_SHARE_NOTE = 0.1
CAST_REMEDY = (
    "fewer dtype conversions: --compile (Inductor fuses the casts into their neighbours), "
    "a wider model (the casts grow with the width, the matmuls with its square), inputs "
    "kept in the 16-bit dtype"
)
INPUT_REMEDY = (
    "feed from memory on the device or prefetch (DataLoader workers with pin_memory, "
    "tf.data prefetch); a larger batch spreads the per-step cost"
)


@dataclass
class Evidence:
    """What the classifier reads: the cell's measurements and the record's figures."""

    source: str  # what measured the device-busy time (BottleneckStats.source)
    step_s: float | None = None  # the timed step (median)
    flops_per_step: float | None = None
    bytes_per_step: float | None = None
    peak_tflops: float | None = None  # the policy's peak: measured where cached, else datasheet
    peak_name: str | None = None  # "the measured bf16 peak", "the datasheet bf16 peak"
    bandwidth_gbps: float | None = None
    device_busy_fraction: float | None = None
    device_busy_s: float | None = None  # kernel time per profiled step
    busy_step_s: float | None = None  # wall time per profiled step
    host_busy_fraction: float | None = None
    threads: int | None = None
    input_share: float | None = None
    cast_share: float | None = None  # the step's share spent converting dtypes (a CPU)
    cast_source: str | None = None  # what measured it
    contended: bool = False  # the timed steps ran contended (results/contention.py's rule)
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def achieved_tflops(self) -> float | None:
        if self.flops_per_step is None or not self.step_s:
            return None
        return self.flops_per_step / self.step_s / 1e12

    @property
    def arithmetic_intensity(self) -> float | None:
        if self.flops_per_step is None or not self.bytes_per_step:
            return None
        return self.flops_per_step / self.bytes_per_step

    @property
    def ridge_point(self) -> float | None:
        if not self.peak_tflops or not self.bandwidth_gbps:
            return None
        return self.peak_tflops * 1e12 / (self.bandwidth_gbps * 1e9)

    @property
    def roof_tflops(self) -> float | None:
        """The roofline at this step's intensity: min(peak, intensity x bandwidth)."""
        intensity = self.arithmetic_intensity
        if intensity is None or not self.peak_tflops or not self.bandwidth_gbps:
            return None
        return min(self.peak_tflops, intensity * self.bandwidth_gbps * 1e9 / 1e12)


def classify(evidence: Evidence) -> BottleneckStats:
    """The bottleneck of one cell, with its evidence line and the change that would help."""
    e = evidence
    unavailable = dict(e.unavailable)
    stats = BottleneckStats(
        kind="unknown",
        evidence="",
        remedy=None,
        source=e.source,
        device_busy_fraction=e.device_busy_fraction,
        host_busy_fraction=e.host_busy_fraction,
        achieved_tflops=e.achieved_tflops,
        peak_tflops=e.peak_tflops,
        bytes_per_step=e.bytes_per_step,
        arithmetic_intensity=e.arithmetic_intensity,
        ridge_point=e.ridge_point,
        bandwidth_gbps=e.bandwidth_gbps,
        input_share=e.input_share,
        cast_share=e.cast_share,
        cast_source=e.cast_source,
        unavailable=unavailable,
    )
    parts = [text for text in (_busy_text(e), _peak_text(e), _cast_text(e)) if text]
    # A contended cell's window and steps were slowed unevenly by its neighbours: the share
    # then measures them, not the input pipeline.
    if e.input_share is not None and e.input_share >= INPUT_SHARE_MIN and not e.contended:
        share = (
            f"the input pipeline and the work between steps take {_pct(e.input_share)} of "
            "the end-to-end step"
        )
        return _decided(stats, "input-bound", [share, *parts], INPUT_REMEDY, e)
    if e.device_busy_fraction is not None and e.device_busy_fraction < BUSY_MIN:
        return _decided(stats, "launch-bound", parts, LAUNCH_REMEDY, e)
    roof, intensity, ridge = e.roof_tflops, e.arithmetic_intensity, e.ridge_point
    achieved = e.achieved_tflops
    if roof is None or intensity is None or ridge is None or achieved is None:
        missing = _missing(e, unavailable)
        stats.evidence = _line(e, [*parts, f"not classified: {missing}"])
        return stats
    if e.device_busy_fraction is None and e.contended:
        # The roofline share is all a CPU has, and neighbours taking its cores lower it.
        unavailable["roofline_share"] = CONTENDED
        stats.evidence = _line(e, [*parts, f"not classified: {CONTENDED}"])
        return stats
    if e.device_busy_fraction is None and achieved / roof < ROOF_SHARE_MIN:
        reach = (
            f"{_flops(achieved)} is {_pct(achieved / roof)} of the roofline's "
            f"{_flops(roof)} at {intensity:.3g} FLOP/B"
        )
        return _decided(stats, "launch-bound", [*parts, reach], LAUNCH_REMEDY, e)
    side = ">=" if intensity >= ridge else "<"
    ratio = f"{intensity:.3g} FLOP/B {side} the ridge point {ridge:.3g} FLOP/B"
    if intensity >= ridge:
        return _decided(stats, "compute-bound", [*parts, ratio], COMPUTE_REMEDY, e)
    return _decided(stats, "memory-bound", [*parts, ratio], MEMORY_REMEDY, e)


def _decided(
    stats: BottleneckStats, kind: str, parts: list[str], remedy: str, e: Evidence
) -> BottleneckStats:
    if _cast_text(e) and kind != "input-bound":
        remedy = f"{CAST_REMEDY}; {remedy}"
    stats.kind, stats.remedy = kind, remedy
    stats.evidence = _line(e, parts)
    return stats


def _line(e: Evidence, parts: list[str]) -> str:
    if e.contended and e.device_busy_fraction is not None:
        parts = [*parts, "the machine was contended meanwhile (the record's contention says how)"]
    return "; ".join(parts)


def _busy_text(e: Evidence) -> str | None:
    if e.device_busy_fraction is not None:
        text = f"device busy {_pct(e.device_busy_fraction)} of the step"
        if e.device_busy_s is not None and e.busy_step_s is not None:
            text += f" (kernels {e.device_busy_s * 1e3:.3g} of {e.busy_step_s * 1e3:.3g} ms)"
        return text
    if e.host_busy_fraction is not None:
        threads = f" of {e.threads} thread(s)" if e.threads else ""
        return f"CPU busy {_pct(e.host_busy_fraction)}{threads} over the timed steps"
    return None


def _cast_text(e: Evidence) -> str | None:
    if e.cast_share is None or e.cast_share < CAST_SHARE_NOTE:
        return None
    return f"converting dtypes takes {_pct(e.cast_share)} of the step"


def _peak_text(e: Evidence) -> str | None:
    achieved = e.achieved_tflops
    if achieved is None or not e.peak_tflops:
        return None
    return f"{_pct(achieved / e.peak_tflops)} of {e.peak_name or 'the peak'}"


def _pct(fraction: float) -> str:
    """A share as people read it: whole percents, two significant digits below 10 %."""
    percent = 100 * fraction
    return f"{percent:.0f} %" if percent >= 10 else f"{percent:.2g} %"


def _flops(tflops: float) -> str:
    if tflops >= 1:
        return f"{tflops:.3g} TFLOP/s"
    return f"{tflops * 1e3:.3g} GFLOP/s"


def _missing(e: Evidence, unavailable: dict[str, str]) -> str:
    """What the roofline lacks, each also in `unavailable` with its reason."""
    needed = {
        "flops_per_step": e.flops_per_step is None,
        "step_time": not e.step_s,
        "bytes_per_step": e.bytes_per_step is None,
        "peak_tflops": not e.peak_tflops,
        "bandwidth_gbps": not e.bandwidth_gbps,
    }
    missing = [name for name, lacking in needed.items() if lacking]
    for name in missing:
        unavailable.setdefault(name, "not measured")
    return ", ".join(f"{name} ({unavailable[name]})" for name in missing)
