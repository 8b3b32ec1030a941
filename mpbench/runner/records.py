"""Turn a cell's outcome into a CellRecord: statistics, throughput, FLOPs, MFU."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from mpbench.backends.base import CellSpec
from mpbench.policies import DeviceTraits, resolve
from mpbench.results import (
    AccuracyStats,
    CellRecord,
    DataInfo,
    DeviceInfo,
    LossScaleStats,
    MemoryStats,
    Status,
    StepTimeStats,
)
from mpbench.runner.execute import Outcome
from mpbench.workloads import get_workload


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
) -> CellRecord:
    workload = get_workload(spec.workload)
    flops = workload.flops_per_step(spec.batch_size, spec.units)
    config = spec.config()
    config.update(
        device=spec.device,
        data_dir=spec.data_dir,
        optimizer=workload.optimizer.name,
        learning_rate=workload.optimizer.learning_rate,
        **workload.optimizer.params,
    )
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
    if outcome.measurements is not None:
        _fill_measurements(record, outcome.measurements)
    return record


def _fill_measurements(record: CellRecord, raw: dict[str, Any]) -> None:
    warmup = raw["warmup_steps"]
    stats = StepTimeStats.from_samples(raw["step_times_s"][warmup:], warmup)
    record.framework_version = raw["framework_version"]
    record.device = DeviceInfo(**raw["device"])
    record.precision = raw["precision"]
    record.config.update(raw.get("extra_config", {}))
    record.data = DataInfo(**raw["data"]) if raw.get("data") else None
    record.step_time = stats
    record.memory = MemoryStats(**raw["memory"])
    record.accuracy = AccuracyStats(raw["test_accuracy"], raw["test_loss"], raw["epoch_losses"])
    record.loss_scale = LossScaleStats(**raw["loss_scale"]) if raw.get("loss_scale") else None
    record.params = raw["params"]
    if stats.median_s:
        record.throughput_samples_per_s = raw["samples_per_step"] / stats.median_s
        record.achieved_tflops = record.flops_per_step / stats.median_s / 1e12
        record.peak_tflops = _peak_tflops(record.device, record.policy)
        if record.peak_tflops:
            record.mfu = record.achieved_tflops / record.peak_tflops
