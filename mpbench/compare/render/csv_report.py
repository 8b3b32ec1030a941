"""The CSV renderer (--format csv): one row per cell, the JSON renderer's objects flattened,
an estimate as its value, low, high and interval kind."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from mpbench.compare.render.json_report import (
    TELEMETRY_COLUMNS,
    cell_json,
    estimate_json,
    finite_only,
    scaling_json,
)
from mpbench.compare.report import Report
from mpbench.compare.summary.cells import CellKey
from mpbench.compare.summary.estimate import Estimate
from mpbench.compare.summary.scaling import all_scaling_rows


def _flat(name: str, estimate: dict[str, Any] | None, value_column: str | None = None) -> dict:
    """An estimate as CSV columns: the value, `<name>_low`, `<name>_high`, `<name>_interval`
    (the interval's kind: "repeats", "within-run only"; where there is none, why, if an
    interval was wanted: "too few timed steps for an interval"; else empty)."""
    estimate = estimate or {}
    interval = estimate.get("interval") or {}
    return {
        value_column or name: estimate.get("value"),
        f"{name}_low": interval.get("low"),
        f"{name}_high": interval.get("high"),
        f"{name}_interval": interval.get("kind") or estimate.get("no_interval"),
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
    "memory_vs_float32_reason",
    "test_accuracy",
    *_flat_columns("accuracy_delta_pp_vs_float32"),
    "loss_scale",
    "loss_scale_skipped_steps",
    "achieved_tflops",
    "mfu",
    "mfu_measured",
    *TELEMETRY_COLUMNS,
    "bottleneck",
    "bottleneck_evidence",
    "accuracy_vs_float32",
    "test_loss",
    "fp8_mode",
    "fp8_flop_share",
    "fp8_flop_share_note",
    *_flat_columns("fp8_emulation_cost_vs_float32"),
    "fp8_compiled",
    *_flat_columns("fp8_speedup_vs_bfloat16"),
    "fp8_predicted_gain_vs_bfloat16",
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
    for group, policy, cell in report.policy_cells():
        data = cell_json(report, group, policy, cell)
        fp8 = data["fp8"]
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
            "memory_vs_float32_reason": data["memory_vs_float32_reason"],
            "test_accuracy": _value(data["test_accuracy"]),
            **_flat("accuracy_delta_pp_vs_float32", data["accuracy_delta_pp_vs_float32"]),
            "loss_scale": cell.loss_scale,
            "loss_scale_skipped_steps": cell.skipped_steps,
            "achieved_tflops": cell.achieved_tflops,
            "mfu": cell.mfu,
            "mfu_measured": cell.mfu_measured,
            **{name: data[name] for name in TELEMETRY_COLUMNS},
            "bottleneck": cell.bottleneck.kind if cell.bottleneck else None,
            "bottleneck_evidence": cell.bottleneck.evidence if cell.bottleneck else None,
            "accuracy_vs_float32": (data["accuracy_vs_float32"] or {}).get("outcome"),
            "test_loss": data["test_loss"],
            "fp8_mode": fp8["mode"] if fp8 else None,
            "fp8_flop_share": fp8["flop_share"] if fp8 else None,
            "fp8_flop_share_note": fp8["flop_share_note"] if fp8 else None,
            **_flat(
                "fp8_emulation_cost_vs_float32", fp8["emulation_cost_vs_float32"] if fp8 else None
            ),
            "fp8_compiled": fp8["compiled"] if fp8 else None,
            **_flat(
                "fp8_speedup_vs_bfloat16",
                (fp8["vs_bfloat16"] or {}).get("speedup") if fp8 else None,
            ),
            "fp8_predicted_gain_vs_bfloat16": fp8["predicted_gain_vs_bfloat16"] if fp8 else None,
            "drifting": data["drifting"],
            "failed_gates": ";".join(failed.get(data["cell"], [])),
            "inconclusive_gates": ";".join(unsure.get(data["cell"], [])),
        }
        row_scaling = scaling.get(CellKey(group.key, policy))
        if row_scaling is not None:
            scaled = scaling_json(report, row_scaling)
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
