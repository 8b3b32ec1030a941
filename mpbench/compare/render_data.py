"""Machine-readable renderers: JSON, CSV (one row per cell) and github-action-benchmark."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from mpbench.compare import fmt
from mpbench.compare.cells import CellKey, CellSummary, PolicyGroup
from mpbench.compare.estimate import Estimate
from mpbench.compare.report import Report
from mpbench.compare.rows import config_text
from mpbench.policies import BASELINE

COMPARE_SCHEMA = "mpbench-compare/1"


def _estimate(value: Estimate | None, scale: float = 1.0) -> dict[str, Any] | None:
    if value is None:
        return None
    return {
        "value": value.value * scale,
        "low": value.low * scale,
        "high": value.high * scale,
        "repeats": value.repeats,
    }


def _cells(report: Report) -> list[tuple[PolicyGroup, str, CellSummary]]:
    return [
        (group, policy, cell)
        for section in report.sections
        for group in section.groups
        for policy, cell in group.cells.items()
    ]


def _cell_json(report: Report, group: PolicyGroup, policy: str, cell: CellSummary) -> dict:
    key = group.key
    ms = 1000.0
    return {
        "cell": report.labeler.cell(CellKey(key, policy)),
        "framework": key.framework,
        "workload": key.workload,
        "policy": policy,
        "device": key.device,
        "hardware_fingerprint": key.fingerprint,
        "config": key.config_dict(),
        "status": cell.status,
        "reason": cell.reason,
        "repeats": cell.repeats,
        "runs": sorted({r.run_id for r in cell.records}),
        "step_time_ms": _estimate(cell.step_time_s, ms),
        "step_time_p10_ms": cell.p10_s * ms if cell.p10_s is not None else None,
        "step_time_p90_ms": cell.p90_s * ms if cell.p90_s is not None else None,
        "speedup_vs_float32": _estimate(group.speedup(policy)),
        "throughput_samples_per_s": cell.throughput,
        "peak_memory_bytes": _estimate(cell.memory_bytes),
        "peak_memory_source": cell.memory_source,
        "memory_vs_float32": _estimate(group.memory_ratio(policy)),
        "test_accuracy": _estimate(cell.accuracy),
        "accuracy_delta_pp_vs_float32": _estimate(group.accuracy_delta_pp(policy)),
        "loss_scale": cell.loss_scale,
        "loss_scale_skipped_steps": cell.skipped_steps,
        "achieved_tflops": cell.achieved_tflops,
        "mfu": cell.mfu,
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
            "max_accuracy_delta_pp": options.max_accuracy_delta_pp,
        },
        "cells": [_cell_json(report, g, p, c) for g, p, c in _cells(report)],
        "baseline": [
            {
                "cell": m.label,
                "baseline_status": m.baseline.status,
                "status": m.candidate.status,
                "step_time_ratio": _estimate(m.step_change()),
                "memory_ratio": _estimate(m.memory_change()),
                "accuracy_change_pp": _estimate(m.accuracy_change_pp()),
                "baseline_step_time_ms": _estimate(m.baseline.step_time_s, 1000.0),
                "baseline_peak_memory_bytes": _estimate(m.baseline.memory_bytes),
                "baseline_test_accuracy": _estimate(m.baseline.accuracy),
            }
            for m in report.matches
        ],
        "gates": [
            {
                "gate": r.gate,
                "cell": r.cell,
                "passed": r.passed,
                "noise": r.noise,
                "value": r.value,
                "limit": r.limit,
                "message": r.message,
            }
            for r in report.results
        ],
        "notes": report.notes,
    }
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


_CSV_COLUMNS = [
    "cell",
    "framework",
    "workload",
    "policy",
    "device",
    "hardware_fingerprint",
    "config",
    "status",
    "reason",
    "repeats",
    "step_time_median_ms",
    "step_time_p10_ms",
    "step_time_p90_ms",
    "step_time_spread_low_ms",
    "step_time_spread_high_ms",
    "speedup_vs_float32",
    "throughput_samples_per_s",
    "peak_memory_bytes",
    "peak_memory_source",
    "memory_vs_float32",
    "test_accuracy",
    "accuracy_delta_pp_vs_float32",
    "loss_scale",
    "loss_scale_skipped_steps",
    "achieved_tflops",
    "mfu",
    "failed_gates",
]
_CSV_BASELINE_COLUMNS = [
    "baseline_status",
    "baseline_step_time_median_ms",
    "step_time_change_pct",
    "baseline_peak_memory_bytes",
    "memory_change_pct",
    "baseline_test_accuracy",
    "accuracy_change_pp",
]


def render_csv(report: Report) -> str:
    """One row per cell; baseline columns when a baseline was given. Empty = not measured."""
    columns = _CSV_COLUMNS + (_CSV_BASELINE_COLUMNS if report.baseline_runs else [])
    matches = {m.label: m for m in report.matches}
    failed: dict[str, list[str]] = {}
    for result in report.failures:
        failed.setdefault(result.cell, []).append(result.gate)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for group, policy, cell in _cells(report):
        data = _cell_json(report, group, policy, cell)
        step = data["step_time_ms"] or {}
        row = {
            **{k: data[k] for k in ("cell", "framework", "workload", "policy", "device")},
            "hardware_fingerprint": data["hardware_fingerprint"],
            "config": json.dumps(data["config"], sort_keys=True),
            "status": cell.status,
            "reason": cell.reason,
            "repeats": cell.repeats,
            "step_time_median_ms": step.get("value"),
            "step_time_p10_ms": data["step_time_p10_ms"],
            "step_time_p90_ms": data["step_time_p90_ms"],
            "step_time_spread_low_ms": step.get("low"),
            "step_time_spread_high_ms": step.get("high"),
            "speedup_vs_float32": _value(data["speedup_vs_float32"]),
            "throughput_samples_per_s": cell.throughput,
            "peak_memory_bytes": _value(data["peak_memory_bytes"]),
            "peak_memory_source": cell.memory_source,
            "memory_vs_float32": _value(data["memory_vs_float32"]),
            "test_accuracy": _value(data["test_accuracy"]),
            "accuracy_delta_pp_vs_float32": _value(data["accuracy_delta_pp_vs_float32"]),
            "loss_scale": cell.loss_scale,
            "loss_scale_skipped_steps": cell.skipped_steps,
            "achieved_tflops": cell.achieved_tflops,
            "mfu": cell.mfu,
            "failed_gates": ";".join(failed.get(data["cell"], [])),
        }
        match = matches.get(data["cell"])
        if match is not None:
            base = match.baseline
            step_change, memory_change = match.step_change(), match.memory_change()
            accuracy_change = match.accuracy_change_pp()
            row.update(
                baseline_status=base.status,
                baseline_step_time_median_ms=(
                    base.step_time_s.value * 1000 if base.step_time_s else None
                ),
                step_time_change_pct=(step_change.value - 1) * 100 if step_change else None,
                baseline_peak_memory_bytes=base.memory_bytes.value if base.memory_bytes else None,
                memory_change_pct=(memory_change.value - 1) * 100 if memory_change else None,
                baseline_test_accuracy=base.accuracy.value if base.accuracy else None,
                accuracy_change_pp=accuracy_change.value if accuracy_change else None,
            )
        writer.writerow(row)
    return out.getvalue()


def _value(estimate: dict[str, Any] | None) -> float | None:
    return estimate["value"] if estimate else None


def render_benchmark_action(report: Report) -> str:
    """github-action-benchmark `customSmallerIsBetter`: every value is better when smaller.

    Step time (ms), step time relative to float32 (the ratio survives noisy runners), peak
    memory (MiB) and test error (%, = 100 - accuracy) for every cell that finished.
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
            entries.append(
                {
                    "name": f"{label}: step time vs float32",
                    "unit": "x float32",
                    "value": round(1 / speedup.value, 6),
                    "range": f"{1 / speedup.high:.3f}–{1 / speedup.low:.3f}",
                    "extra": f"speed-up {fmt.ratio(speedup.value)} vs float32 in the same run",
                }
            )
        if cell.memory_bytes is not None:
            entries.append(
                {
                    "name": f"{label}: peak memory",
                    "unit": "MiB",
                    "value": round(cell.memory_bytes.value / 2**20, 3),
                    "extra": f"peak {cell.memory_source}; {context}",
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
    return json.dumps(entries, indent=2, allow_nan=False) + "\n"
