"""Machine-readable renderers: JSON, CSV (one row per cell) and github-action-benchmark."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from mpbench.compare import fmt
from mpbench.compare.cells import (
    CellKey,
    CellSummary,
    PolicyGroup,
    is_training_memory,
    row_policy,
)
from mpbench.compare.estimate import Estimate
from mpbench.compare.gates import BaselineMatch
from mpbench.compare.report import Report
from mpbench.compare.rows import config_text
from mpbench.compare.scaling import ScalingRow, all_scaling_rows
from mpbench.policies import BASELINE

COMPARE_SCHEMA = "mpbench-compare/2"


def estimate_json(value: Estimate | None, scale: float = 1.0) -> dict[str, Any] | None:
    """`{"value": v, "interval": {"low", "high", "kind", "n"} or null}`; kind is "repeats" or
    "within-run only"; null when there is a single value and no interval."""
    if value is None:
        return None
    interval = None
    if value.has_interval:
        interval = {
            "low": value.low * scale,
            "high": value.high * scale,
            "kind": value.kind,
            "n": value.n,
        }
    return {"value": value.value * scale, "interval": interval}


def _cells(report: Report) -> list[tuple[PolicyGroup, str, CellSummary]]:
    return [
        (group, policy, cell)
        for section in report.sections
        for group in section.groups
        for policy, cell in group.cells.items()
    ]


def _verdict_json(group: PolicyGroup, policy: str) -> dict[str, Any] | None:
    """The table's verdict line as data; None for float32, the reference itself."""
    from mpbench.compare.verdict import policy_verdict

    if policy == BASELINE:
        return None
    verdict = policy_verdict(group, policy)
    return {"advice": verdict.advice, "evidence": verdict.evidence, "why": verdict.why}


def _cell_json(report: Report, group: PolicyGroup, policy: str, cell: CellSummary) -> dict:
    key = group.key
    ms = 1000.0
    return {
        "cell": report.labeler.cell(CellKey(key, policy)),
        "group": report.labeler.group(key),  # the table's and the plot's name of the group
        "framework": key.framework,
        "workload": key.workload,
        "policy": row_policy(policy),
        # "[accumulate=2]", "@512", "[loss scale 1024]", "(fallback)": results.variant
        "variant": report.labeler.variant(CellKey(key, policy)),
        "device": key.device,
        "hardware_fingerprint": key.fingerprint,
        "config": key.config_dict(),
        "status": cell.status,
        "reason": cell.reason,
        "repeats": cell.repeats,
        "runs": sorted({r.run_id for r in cell.records}),
        "step_time_ms": estimate_json(cell.step_time_s, ms),
        "step_time_p10_ms": cell.p10_s * ms if cell.p10_s is not None else None,
        "step_time_p90_ms": cell.p90_s * ms if cell.p90_s is not None else None,
        "speedup_vs_float32": estimate_json(group.speedup(policy)),
        "end_to_end_speedup_vs_float32": estimate_json(group.end_to_end_speedup(policy)),
        "end_to_end_samples_per_s": estimate_json(cell.end_to_end),
        "end_to_end_input_pipeline": cell.end_to_end_pipeline,
        "throughput_samples_per_s": cell.throughput,
        "memory_bytes": estimate_json(cell.memory_bytes),
        "memory_kind": cell.memory_kind,
        "training_memory": is_training_memory(cell.memory_kind),
        "dataset_device_bytes": cell.dataset_device_bytes,
        "memory_vs_float32": estimate_json(group.memory_ratio(policy)),
        "test_accuracy": estimate_json(cell.accuracy),
        "accuracy_delta_pp_vs_float32": estimate_json(group.accuracy_delta_pp(policy)),
        "loss_scale": cell.loss_scale,
        "loss_scale_skipped_steps": cell.skipped_steps,
        "achieved_tflops": cell.achieved_tflops,
        "mfu": cell.mfu,
        "mfu_measured": cell.mfu_measured,
        "measured_peak_tflops": cell.measured_peak_tflops,
        **_telemetry_json(cell),
        "verdict": _verdict_json(group, policy),
        # issue 22: repeats that ran beside other work, and figures no device can produce
        "contended_repeats": cell.contended_repeats,
        "contended_why": cell.contended_why,
        "implausible": cell.implausible + cell.voided,
        "drifting": bool(cell.drift),
        "drift": [
            {
                "run_id": d.run_id,
                "repeat": d.repeat,
                "first_half_median_ms": d.first_half_s * ms,
                "second_half_median_ms": d.second_half_s * ms,
            }
            for d in cell.drift
        ],
    }


def _telemetry_json(cell: CellSummary) -> dict[str, Any]:
    """Utilisation, power and energy (v4 records; null where not measured, and for energy the
    reason the records give, so that a missing value is explained)."""
    energy = cell.energy_per_sample_j
    return {
        "mean_cpu_util_pct": cell.cpu_util_pct,
        "mean_gpu_util_pct": cell.gpu_util_pct,
        "mean_power_w": cell.power_w,
        "energy_per_sample_mj": energy * 1000 if energy is not None else None,
        "energy_source": cell.energy_source,
        "energy_reason": cell.energy_reason if energy is None else None,
    }


_TELEMETRY_COLUMNS = [
    "mean_cpu_util_pct",
    "mean_gpu_util_pct",
    "mean_power_w",
    "energy_per_sample_mj",
    "energy_source",
    "energy_reason",
]


def _baseline_json(match: BaselineMatch) -> dict[str, Any]:
    return {
        "cell": match.label,
        "baseline_status": match.baseline.status,
        "status": match.candidate.status,
        "step_time_ratio": estimate_json(match.step_change()),
        "memory_ratio": estimate_json(match.memory_change()),
        "accuracy_change_pp": estimate_json(match.accuracy_change_pp()),
        "baseline_step_time_ms": estimate_json(match.baseline.step_time_s, 1000.0),
        "baseline_memory_bytes": estimate_json(match.baseline.memory_bytes),
        "baseline_memory_kind": match.baseline.memory_kind,
        "baseline_test_accuracy": estimate_json(match.baseline.accuracy),
    }


def _scaling_json(report: Report, row: ScalingRow) -> dict[str, Any]:
    """A row of the scaling table (scaling.py); throughputs are global (every replica)."""
    key, layout, cell = row.group.key, row.layout, row.cell
    ms = 1000.0
    return {
        "cell": report.labeler.cell(row.key),
        "group": report.labeler.group(key),
        "framework": key.framework,
        "workload": key.workload,
        "policy": row_policy(row.row),
        "variant": report.labeler.variant(row.key),
        "device": key.device,
        "hardware_fingerprint": key.fingerprint,
        "config": key.single().config_dict(),  # without the data-parallel entries below
        "world_size": layout.world_size,
        "nnodes": layout.nnodes,
        "nproc_per_node": layout.nproc_per_node,
        "grad_comm": layout.grad_comm if layout.parallel else None,
        "devices": row.devices,
        "launcher": row.launcher,
        "backend": row.backend,
        "status": cell.status,
        "reason": cell.reason,
        "repeats": cell.repeats,
        "throughput_samples_per_s": row.throughput,
        "per_device_samples_per_s": row.per_device,
        "scaling_efficiency": estimate_json(row.efficiency),
        "scaling_reference": (
            report.labeler.cell(row.reference_key) if row.reference_key is not None else None
        ),
        "unpaired_repeats": [{"run_id": run, "repeat": repeat} for run, repeat in row.unpaired],
        "allreduce_ms_per_step": row.allreduce_s * ms if row.allreduce_s is not None else None,
        "allreduce_overlap_ms_per_step": (
            row.allreduce_overlap_s * ms if row.allreduce_overlap_s is not None else None
        ),
        "allreduce_share": row.allreduce_share,
        "straggler_ratio": row.straggler_ratio,
        "unavailable": dict(row.unavailable),
        "note": row.note,
    }


def render_json(report: Report) -> str:
    options = report.options
    data = {
        "schema": COMPARE_SCHEMA,
        "runs": report.runs,
        "baseline_runs": report.baseline_runs,
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "thresholds": {
            "max_slowdown": options.max_slowdown,
            "max_memory_increase": options.max_memory_increase,
            "max_accuracy_drop_pp": options.max_accuracy_drop_pp,
            "min_speedup": options.min_speedup,
            "min_scaling_efficiency": options.min_scaling_efficiency,
            "max_accuracy_delta_pp": options.max_accuracy_delta_pp,
            "require_conclusive": options.require_conclusive,
        },
        "cells": [_cell_json(report, g, p, c) for g, p, c in _cells(report)],
        "baseline": [_baseline_json(m) for m in report.matches],
        "scaling": [_scaling_json(report, row) for row in all_scaling_rows(report.sections)],
        "gates": [
            {
                "gate": r.gate,
                "cell": r.cell,
                "passed": r.passed,
                "inconclusive": r.inconclusive,
                "value": r.value,
                "limit": r.limit,
                "estimate": estimate_json(r.estimate),
                "message": r.message,
            }
            for r in report.results
        ],
        "notes": report.notes,
        # run_id -> why a `mpbench run --repeat auto` stopped (its run.json's `adaptive`)
        "adaptive_repeats": report.adaptive_repeats,
    }
    found: list[str] = []
    data = finite_only(data, "", found)
    if found:
        data["notes"].append(f"not a finite number, written as null: {', '.join(found)}")
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def finite_only(value: Any, path: str, found: list[str]) -> Any:
    """`value` with every NaN or infinity replaced by None, and where each was put in `found`.

    Records are finite (results/validate.py), but a quotient of extreme step times or memory
    can still overflow; JSON has no such numbers, and a consumer must not read one as zero."""
    if isinstance(value, float) and not math.isfinite(value):
        found.append(path)
        return None
    if isinstance(value, dict):
        return {k: finite_only(v, f"{path}.{k}" if path else k, found) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_only(v, f"{path}[{_item_name(v, i)}]", found) for i, v in enumerate(value)]
    return value


def _item_name(item: Any, index: int) -> str:
    """A cell or gate by its label, anything else by its index."""
    return str(item["cell"]) if isinstance(item, dict) and "cell" in item else str(index)


def _flat(name: str, estimate: dict[str, Any] | None, value_column: str | None = None) -> dict:
    """An estimate as CSV columns: the value, `<name>_low`, `<name>_high`, `<name>_interval`
    (the interval's kind: "repeats", "within-run only", or empty when there is none)."""
    estimate = estimate or {}
    interval = estimate.get("interval") or {}
    return {
        value_column or name: estimate.get("value"),
        f"{name}_low": interval.get("low"),
        f"{name}_high": interval.get("high"),
        f"{name}_interval": interval.get("kind"),
    }


def _flat_columns(name: str, value_column: str | None = None) -> list[str]:
    return list(_flat(name, None, value_column))


_CSV_COLUMNS = [
    "cell",
    "group",
    "framework",
    "workload",
    "policy",
    "variant",
    "device",
    "hardware_fingerprint",
    "config",
    "status",
    "reason",
    "repeats",
    *_flat_columns("step_time_ms", "step_time_median_ms"),
    "step_time_p10_ms",
    "step_time_p90_ms",
    *_flat_columns("speedup_vs_float32"),
    *_flat_columns("end_to_end_speedup_vs_float32"),
    "end_to_end_samples_per_s",
    "end_to_end_input_pipeline",
    "throughput_samples_per_s",
    "memory_bytes",
    "memory_kind",
    "dataset_device_bytes",
    *_flat_columns("memory_vs_float32"),
    "test_accuracy",
    *_flat_columns("accuracy_delta_pp_vs_float32"),
    "loss_scale",
    "loss_scale_skipped_steps",
    "achieved_tflops",
    "mfu",
    "mfu_measured",
    *_TELEMETRY_COLUMNS,
    "drifting",
    "failed_gates",
    "inconclusive_gates",
]
# With data-parallel cells (the scaling table); empty for a cell of a config that never ran
# data-parallel.
_CSV_SCALING_COLUMNS = [
    "world_size",
    "grad_comm",
    "devices",
    "per_device_samples_per_s",
    *_flat_columns("scaling_efficiency"),
    "allreduce_share",
    "straggler_ratio",
]
_CSV_BASELINE_COLUMNS = [
    "baseline_status",
    "baseline_step_time_median_ms",
    *_flat_columns("step_time_change_pct"),
    "baseline_memory_bytes",
    *_flat_columns("memory_change_pct"),
    "baseline_test_accuracy",
    *_flat_columns("accuracy_change_pp"),
]


def _percent(ratio: Estimate | None) -> dict[str, Any] | None:
    """A ratio as a change in percent, for the CSV (JSON keeps the ratio)."""
    return estimate_json(ratio.shifted(-1).scaled(100) if ratio else None)


def render_csv(report: Report) -> str:
    """One row per cell; scaling columns when a cell ran data-parallel, baseline columns when
    a baseline was given. Empty = not measured."""
    scaling = {row.key: row for row in all_scaling_rows(report.sections)}
    columns = _CSV_COLUMNS + (_CSV_SCALING_COLUMNS if scaling else [])
    columns += _CSV_BASELINE_COLUMNS if report.baseline_runs else []
    matches = {m.label: m for m in report.matches}
    failed: dict[str, list[str]] = {}
    for result in report.failures:
        failed.setdefault(result.cell, []).append(result.gate)
    unsure: dict[str, list[str]] = {}
    for result in report.inconclusive:
        unsure.setdefault(result.cell, []).append(result.gate)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for group, policy, cell in _cells(report):
        data = _cell_json(report, group, policy, cell)
        row = {
            **{k: data[k] for k in ("cell", "group", "framework", "workload", "policy", "variant")},
            "device": data["device"],
            "hardware_fingerprint": data["hardware_fingerprint"],
            "config": json.dumps(data["config"], sort_keys=True),
            "status": cell.status,
            "reason": cell.reason,
            "repeats": cell.repeats,
            **_flat("step_time_ms", data["step_time_ms"], "step_time_median_ms"),
            "step_time_p10_ms": data["step_time_p10_ms"],
            "step_time_p90_ms": data["step_time_p90_ms"],
            **_flat("speedup_vs_float32", data["speedup_vs_float32"]),
            **_flat("end_to_end_speedup_vs_float32", data["end_to_end_speedup_vs_float32"]),
            "end_to_end_samples_per_s": _value(data["end_to_end_samples_per_s"]),
            "end_to_end_input_pipeline": cell.end_to_end_pipeline,
            "throughput_samples_per_s": cell.throughput,
            "memory_bytes": _value(data["memory_bytes"]),
            "memory_kind": cell.memory_kind,
            "dataset_device_bytes": cell.dataset_device_bytes,
            **_flat("memory_vs_float32", data["memory_vs_float32"]),
            "test_accuracy": _value(data["test_accuracy"]),
            **_flat("accuracy_delta_pp_vs_float32", data["accuracy_delta_pp_vs_float32"]),
            "loss_scale": cell.loss_scale,
            "loss_scale_skipped_steps": cell.skipped_steps,
            "achieved_tflops": cell.achieved_tflops,
            "mfu": cell.mfu,
            "mfu_measured": cell.mfu_measured,
            **{name: data[name] for name in _TELEMETRY_COLUMNS},
            "drifting": data["drifting"],
            "failed_gates": ";".join(failed.get(data["cell"], [])),
            "inconclusive_gates": ";".join(unsure.get(data["cell"], [])),
        }
        row_scaling = scaling.get(CellKey(group.key, policy))
        if row_scaling is not None:
            scaled = _scaling_json(report, row_scaling)
            row.update(
                {name: scaled[name] for name in ("world_size", "grad_comm", "devices")},
                per_device_samples_per_s=scaled["per_device_samples_per_s"],
                **_flat("scaling_efficiency", scaled["scaling_efficiency"]),
                allreduce_share=scaled["allreduce_share"],
                straggler_ratio=scaled["straggler_ratio"],
            )
        match = matches.get(data["cell"])
        if match is not None:
            base = match.baseline
            row.update(
                baseline_status=base.status,
                baseline_step_time_median_ms=(
                    base.step_time_s.value * 1000 if base.step_time_s else None
                ),
                **_flat("step_time_change_pct", _percent(match.step_change())),
                baseline_memory_bytes=base.memory_bytes.value if base.memory_bytes else None,
                **_flat("memory_change_pct", _percent(match.memory_change())),
                baseline_test_accuracy=base.accuracy.value if base.accuracy else None,
                **_flat("accuracy_change_pp", estimate_json(match.accuracy_change_pp())),
            )
        writer.writerow(finite_only(row, "", []))  # empty, as for a value not measured
    return out.getvalue()


def _value(estimate: dict[str, Any] | None) -> float | None:
    return estimate["value"] if estimate else None


def render_benchmark_action(report: Report) -> str:
    """github-action-benchmark `customSmallerIsBetter`: every value is better when smaller.

    Step time (ms), step time relative to float32 (the ratio survives noisy runners), memory
    (MiB, one series per kind: training memory is never charted with process peaks) and test
    error (%, = 100 - accuracy) for every cell that finished.
    """
    entries: list[dict[str, Any]] = []
    for group, policy, cell in _cells(report):
        if not cell.ok:
            continue
        label = report.labeler.cell(CellKey(group.key, policy))
        context = f"{group.key.device}; {config_text(group)}; repeats {cell.repeats}"
        step = cell.step_time_s
        if step is not None:
            entry: dict[str, Any] = {
                "name": f"{label}: step time",
                "unit": "ms",
                "value": round(step.value * 1000, 6),
            }
            if cell.p10_s is not None and cell.p90_s is not None:
                entry["range"] = f"± {fmt.ms((cell.p90_s - cell.p10_s) / 2)}"
            entry["extra"] = (
                f"median of timed steps; p10–p90 {fmt.ms_range(cell.p10_s, cell.p90_s)} ms; "
                f"throughput {fmt.throughput(cell.throughput)} samples/s; {context}"
            )
            entries.append(entry)
        speedup = group.speedup(policy)
        if speedup is not None and policy != BASELINE:
            entry = {
                "name": f"{label}: step time vs float32",
                "unit": "x float32",
                "value": round(_inverse(speedup.value), 6),
                "extra": f"speed-up {fmt.ratio(speedup.value)} vs float32 in the same run",
            }
            if speedup.has_interval:
                entry["range"] = "–".join(
                    fmt.significant_pair(_inverse(speedup.high), _inverse(speedup.low))
                )
                entry["extra"] += f"; 95 % interval {fmt.interval_kind(speedup)}"
            entries.append(entry)
        if cell.memory_bytes is not None:
            entries.append(
                {
                    "name": f"{label}: {cell.memory_kind}",  # one series per kind of memory
                    "unit": "MiB",
                    "value": round(cell.memory_bytes.value / 2**20, 3),
                    "extra": context,
                }
            )
        if cell.accuracy is not None:
            entries.append(
                {
                    "name": f"{label}: test error",
                    "unit": "%",
                    "value": round(100 * (1 - cell.accuracy.value), 4),
                    "extra": f"100 - test accuracy ({fmt.accuracy(cell.accuracy.value)})",
                }
            )
    # A series point must be a number: one that overflowed is left out, not charted as null.
    entries = [e for e in entries if math.isfinite(e["value"])]
    return json.dumps(entries, indent=2, allow_nan=False) + "\n"


def _inverse(value: float) -> float:
    return 1 / value if value else math.inf
