"""Turn a cell's outcome into a CellRecord: statistics, throughput, FLOPs, MFU."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any

from mpbench.backends.base import BusyEvidence, CellSpec, Measurements
from mpbench.machine import machine_name
from mpbench.policies import DeviceTraits, resolve
from mpbench.results import (
    AccuracyStats,
    CellRecord,
    CompileStats,
    ContentionStats,
    DeviceInfo,
    DistributedStats,
    DivergenceInfo,
    EnergyStats,
    Fp8Stats,
    StartupStats,
    Status,
    StepTimeStats,
    TelemetryStats,
)
from mpbench.results.bottleneck import Evidence, classify
from mpbench.results.scaling import straggler_ratio
from mpbench.results.validate import build
from mpbench.runner.launchers.helper import describe_workload
from mpbench.runner.launchers.process import Outcome


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _peak_tflops(device: DeviceInfo, policy_name: str) -> float | None:
    """The datasheet peak for the policy's dtype on this GPU; None where unknown (CPUs)."""
    if device.kind != "cuda":
        return None
    from mpbench.detect.peaks import peak_tflops

    return peak_tflops(device.name, resolve(policy_name).peak_key)


def build_record(
    spec: CellSpec,
    outcome: Outcome,
    traits: DeviceTraits,
    fingerprint: str,
    framework_version: str | None,
    measured_peaks: dict[str, float] | None = None,
    side_file: str | None = None,
    measured_bandwidth_gbps: float | None = None,
) -> CellRecord:
    """`measured_peaks`: the device's measured matmul peak TFLOP/s per policy peak key
    ("fp32", "bf16", ...), from `detect --measure`'s cache; None when not measured.
    `side_file`: where the runner wrote the cell's telemetry series (run-relative).
    `measured_bandwidth_gbps`: the device's measured memory bandwidth, from the same cache."""
    workload = describe_workload(spec.workload)
    measurements = outcome.measurements
    config = spec.config()
    config.update(device=spec.device, data_dir=spec.data_dir)
    machine = machine_name()
    if machine is not None:  # a named machine (mpbench/machine.py): never pooled with others
        config.update(machine=machine)
    if workload.kind == "user":
        # The workload owns its optimizer; its FLOPs are what the cell was given or measured.
        config.update(workload_source=workload.source)
        extra = measurements.extra_config if measurements is not None else {}
        flops = extra.get("flops_per_micro_batch")
    else:
        flops = workload.flops_per_step(spec.batch_size, spec.units, **spec.sizes)
        config.update(
            optimizer=workload.optimizer.name,
            learning_rate=workload.optimizer.learning_rate,
            **workload.optimizer.params,
        )
    if flops is not None:
        # A timed step is one optimizer step: `accumulate` micro-batches' worth of work, on
        # each of the world's replicas.
        flops *= spec.accumulate * spec.world_size
    record = CellRecord(
        run_id=spec.run_id,
        cell_id=spec.cell_id,
        timestamp=now_iso(),
        framework=spec.framework,
        framework_version=framework_version,
        workload=spec.workload,
        policy=spec.policy,
        repeat=spec.repeat,
        device=DeviceInfo(kind=spec.device.partition(":")[0], name=traits.name),
        status=Status(outcome.status),
        reason=outcome.reason,
        config=config,
        flops_per_step=flops,
        hardware_fingerprint=fingerprint,
        wall_s=round(outcome.wall_s, 3),
    )
    if outcome.launcher is not None:
        seconds = None if outcome.startup_s is None else round(outcome.startup_s, 3)
        record.startup = StartupStats(outcome.launcher, seconds, outcome.rerun)
    if measurements is not None:
        _fill_measurements(record, measurements, measured_peaks or {})
    divergence = outcome.divergence or (measurements.divergence if measurements else None)
    _fill_telemetry(record, cell_telemetry(outcome), divergence, side_file)
    # After the world size divided MFU, and with the cell's contention read: it says why.
    _check_measured_peak(record)
    if measurements is not None and record.step_time and record.step_time.median_s:
        evidence = bottleneck_evidence(record, spec, workload, measurements.busy)
        evidence.bandwidth_gbps = measured_bandwidth_gbps
        if measured_bandwidth_gbps is None:
            evidence.unavailable["bandwidth_gbps"] = (
                "no measured bandwidth cached for this device: run `mpbench detect --measure`"
            )
        record.bottleneck = classify(evidence)
    return record


def bottleneck_evidence(
    record: CellRecord, spec: CellSpec, workload: Any, busy: BusyEvidence | None
) -> Evidence:
    """What the bottleneck is classified from (mpbench.results.bottleneck): the cell's busy
    figures, and per device the step's FLOPs and bytes against the policy's peak (measured
    where cached, else the datasheet's) and the end-to-end window against the timed step."""
    unavailable = dict(busy.unavailable) if busy else {"busy": "the cell measured no busy time"}
    world = spec.world_size
    evidence = Evidence(
        source=busy.source if busy else "none",
        step_s=record.step_time.median_s if record.step_time else None,
        flops_per_step=None if record.flops_per_step is None else record.flops_per_step / world,
        device_busy_fraction=busy.device_busy_fraction if busy else None,
        device_busy_s=busy.device_busy_s if busy else None,
        busy_step_s=busy.busy_step_s if busy else None,
        host_busy_fraction=busy.host_busy_fraction if busy else None,
        threads=busy.threads if busy and record.device.kind == "cpu" else None,
        cast_share=busy.cast_share if busy else None,
        cast_source=busy.cast_source if busy else None,
        contended=bool(record.contention and record.contention.contended),
        unavailable=unavailable,
    )
    if record.flops_per_step is None:
        unavailable["flops_per_step"] = "the workload's FLOPs are unknown"
    policy = resolve(record.policy)
    if workload.kind == "user":
        unavailable["bytes_per_step"] = "a user workload: its layers are not in a spec"
    else:
        # The width a step's weights and activations are counted at (workloads.spec.step_bytes).
        width = policy.compute_bytes
        per_micro = workload.bytes_per_step(spec.batch_size, width, spec.units, **spec.sizes)
        evidence.bytes_per_step = per_micro * spec.accumulate
    measured = record.measured_peak_tflops
    evidence.peak_tflops = measured or record.peak_tflops
    if evidence.peak_tflops:
        kind = "measured" if measured else "datasheet"
        evidence.peak_name = f"the {kind} {policy.peak_key} peak"
    else:
        unavailable["peak_tflops"] = (
            "an emulated fp8 cell: no peak bounds it"
            if record.fp8 is not None and record.fp8.mode == "emulated"
            else f"no measured {policy.peak_key} peak cached and no datasheet peak for "
            f"{record.device.name}: run `mpbench detect --measure`"
        )
    # The window's mean step against the timed steps' mean: both then hold the same slow
    # steps (a preemption, a page fault), which the median would leave out of one side only.
    window, mean = record.end_to_end, record.step_time.mean_s if record.step_time else None
    if window is not None and window.steps and mean:
        evidence.input_share = max(0.0, 1.0 - mean / (window.seconds / window.steps))
    else:
        unavailable["input_share"] = "no end-to-end window"
    return evidence


def cell_telemetry(outcome: Outcome) -> dict[str, Any] | None:
    """The CellTelemetry report a cell sent, finished or stopped by a divergence signal."""
    measurements = outcome.measurements
    return outcome.telemetry or (measurements.telemetry if measurements else None)


def _fill_telemetry(
    record: CellRecord,
    telemetry: dict[str, Any] | None,
    divergence: dict[str, Any] | None,
    side_file: str | None,
) -> None:
    if divergence is not None:
        record.divergence = DivergenceInfo(
            divergence["signal"], divergence["step"], divergence.get("values", {})
        )
    if telemetry is None:
        return
    summary = {k: v for k, v in telemetry["summary"].items() if k in _TELEMETRY_FIELDS}
    record.telemetry = TelemetryStats(side_file=side_file, **summary)
    if telemetry.get("energy") is not None:
        record.energy = EnergyStats(**telemetry["energy"])
    if telemetry.get("contention") is not None:
        record.contention = ContentionStats(**telemetry["contention"])


_TELEMETRY_FIELDS = {f.name for f in dataclasses.fields(TelemetryStats)} - {"side_file"}


def _fill_measurements(
    record: CellRecord, measured: Measurements, measured_peaks: dict[str, float]
) -> None:
    warmup = measured.warmup_steps
    stats = StepTimeStats.from_samples(measured.step_times_s[warmup:], warmup)
    micro = measured.micro_batches_per_step or 1
    if micro > 1:
        stats.micro_batches_per_step = micro
        stats.micro_batch_median_s = stats.median_s / micro if stats.median_s else None
    record.framework_version = measured.framework_version
    record.device = measured.device
    record.precision = measured.precision
    record.config.update(measured.extra_config)
    record.data = measured.data
    record.step_time = stats
    record.memory = measured.memory
    record.accuracy = AccuracyStats(
        measured.test_accuracy, measured.test_loss, measured.epoch_losses
    )
    record.loss_scale = measured.loss_scale
    record.params = measured.params
    record.params_non_trainable = measured.params_non_trainable
    record.end_to_end = measured.end_to_end
    record.stopped = measured.stopped  # a cell that could not pay: its rule and ratio
    record.threads = measured.threads
    record.compile = CompileStats(**measured.compile) if measured.compile else None
    record.fp8 = build(Fp8Stats, measured.fp8) if measured.fp8 else None  # its prediction too
    # An emulated fp8 cell runs no fp8 GEMM: no peak bounds it, so it gets no MFU.
    emulated = record.fp8 is not None and record.fp8.mode == "emulated"
    if stats.median_s:
        record.throughput_samples_per_s = measured.samples_per_step / stats.median_s
    if stats.median_s and not emulated:
        record.peak_tflops = _peak_tflops(record.device, record.policy)
        record.measured_peak_tflops = measured_peaks.get(resolve(record.policy).peak_key)
        if record.flops_per_step is not None:  # None: a user workload's that could not be counted
            record.achieved_tflops = record.flops_per_step / stats.median_s / 1e12
            if record.peak_tflops:
                record.mfu = record.achieved_tflops / record.peak_tflops
            if record.measured_peak_tflops:
                record.mfu_measured = record.achieved_tflops / record.measured_peak_tflops
    if measured.distributed:
        record.distributed = _distributed(measured.distributed, record)


# A cell cannot beat the device's measured matmul peak by more than the measurement's own
# noise: above this, the peak is no bound for the cell's step.
MFU_MEASURED_LIMIT = 1.05
# Why a step can beat the measured peak on a quiet machine: the peak was timed on another
# path than the step's (detect --measure times one square matmul, nn.Linear's under autocast;
# the step runs its own kernels at its own shapes). On an AVX2-only CPU a peak timed as
# torch.mm on bf16 tensors was 1/5.5 of what the bf16 step reached through autocast, and
# blaming "a busy machine" there sent users to re-measure on a machine that was quiet.
METHOD_MISMATCH = (
    "the measured peak was timed on another path than the step's (detect --measure times one "
    "square matmul; this step runs its own kernels at its own shapes)"
)


def _check_measured_peak(record: CellRecord) -> None:
    """An impossible MFU against the measured peak voids that figure, with the reason: a
    method mismatch where the cell's contention record says the machine was quiet; else
    that, or a peak measured low on a busy machine."""
    if record.mfu_measured is None or record.mfu_measured <= MFU_MEASURED_LIMIT:
        return
    beaten = (
        f"{record.mfu_measured:.0%} of the peak `detect --measure` cached "
        f"({record.measured_peak_tflops:.3g} TFLOP/s)"
    )
    contention = record.contention
    if contention is not None and not contention.contended:
        why = (
            f"{METHOD_MISMATCH}, so it bounds nothing here: a method mismatch, not a busy "
            "machine (this cell ran on a quiet machine); the peak stays cached, since "
            "measuring it again would give the same"
        )
    else:
        state = (
            f"this cell's machine was busy: {'; '.join(contention.why)}"
            if contention is not None
            else "whether the machine was quiet is not known"
        )
        why = (
            f"either {METHOD_MISMATCH}, or the peak was measured low on a busy machine "
            f"({state}): the peak is dropped from the cache; re-run `mpbench detect "
            "--measure` on a quiet machine"
        )
    record.implausible["mfu_measured"] = f"{beaten}: {why}"
    record.mfu_measured = None


def _distributed(figures: dict[str, Any], record: CellRecord) -> DistributedStats:
    """The backend's figures plus those derived from the job's step time: throughput per
    replica, the all-reduce's share of a step, the straggler ratio. MFU stays against one
    device's peak, so it is divided by the world size too."""
    stats = DistributedStats(**figures)
    world = stats.world_size
    if record.throughput_samples_per_s:
        stats.per_device_samples_per_s = record.throughput_samples_per_s / world
    median = record.step_time.median_s if record.step_time else None
    if stats.allreduce_s_per_step is not None and median:
        stats.allreduce_share = stats.allreduce_s_per_step / median
    stats.straggler_ratio = straggler_ratio(stats.rank_step_median_s)
    for name in ("mfu", "mfu_measured"):
        if getattr(record, name) is not None:
            setattr(record, name, getattr(record, name) / world)
    return stats
