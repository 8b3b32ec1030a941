"""The JSON renderer (--format json): every cell, baseline pair, scaling row and gate of the
report as data, schema `mpbench-compare/2` (docs/compare.md); the CSV renderer flattens the
same cell and scaling objects."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from mpbench.compare.gates import BaselineMatch
from mpbench.compare.report import Report
from mpbench.compare.summary.cells import (
    CellSummary,
    PolicyGroup,
    is_training_memory,
)
from mpbench.compare.summary.comparison import AgainstBase, Comparison
from mpbench.compare.summary.estimate import Estimate
from mpbench.compare.summary.scaling import ScalingRow, all_scaling_rows

COMPARE_SCHEMA = "mpbench-compare/2"


def estimate_json(value: Estimate | None, scale: float = 1.0) -> dict[str, Any] | None:
    """`{"value": v, "interval": {"low", "high", "kind", "n"} or null, "no_interval": why or
    null}`; kind is "repeats" or "within-run only"; the interval is null for a single value,
    and `no_interval` says why where one was wanted ("too few timed steps for an interval")."""
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
    return {"value": value.value * scale, "interval": interval, "no_interval": value.no_interval}


def _verdict_json(comparison: Comparison) -> dict[str, Any] | None:
    """The table's verdict line as data; None for float32, the reference itself."""
    verdict = comparison.verdict
    if verdict is None:
        return None
    return {"advice": verdict.advice, "evidence": verdict.evidence, "why": verdict.why}


def cell_json(report: Report, group: PolicyGroup, policy: str, cell: CellSummary) -> dict:
    key = group.key
    comparison = group.comparisons[policy]
    ms = 1000.0
    return {
        "cell": report.labeler.cell(cell.key),
        "group": report.labeler.group(key),  # the table's and the plot's name of the group
        "framework": key.framework,
        "workload": key.workload,
        "policy": cell.row.policy,
        # "[accumulate=2]", "@512", "[loss scale 1024]", "(fallback)": results.variant
        "variant": report.labeler.variant(cell.key),
        "device": key.device,
        "hardware_fingerprint": key.fingerprint,
        "config": key.config_dict(),
        "status": cell.status,
        "reason": cell.reason,
        # Repeats stopped early (they could not pay): the rule, the measured ratio to float32
        # and the projected time; no figure of the cell is taken from them.
        "stopped": [
            {"run_id": r.run_id, "repeat": r.repeat, **dataclasses.asdict(r.stopped)}
            for r in cell.stopped
            if r.stopped is not None
        ],
        "repeats": cell.repeats,
        "runs": sorted({r.run_id for r in cell.records}),
        "step_time_ms": estimate_json(cell.step_time_s, ms),
        "step_time_p10_ms": cell.p10_s * ms if cell.p10_s is not None else None,
        "step_time_p90_ms": cell.p90_s * ms if cell.p90_s is not None else None,
        "speedup_vs_float32": estimate_json(comparison.speedup),
        "end_to_end_speedup_vs_float32": estimate_json(comparison.end_to_end_speedup),
        "end_to_end_samples_per_s": estimate_json(cell.end_to_end),
        "end_to_end_input_pipeline": cell.end_to_end_pipeline,
        "throughput_samples_per_s": cell.throughput,
        "memory_bytes": estimate_json(cell.memory_bytes),
        "memory_kind": cell.memory_kind,
        "training_memory": is_training_memory(cell.memory_kind),
        "dataset_device_bytes": cell.dataset_device_bytes,
        "memory_vs_float32": estimate_json(comparison.memory_ratio),
        # why memory_vs_float32 is null though both cells have a figure (two kinds of memory)
        "memory_vs_float32_reason": comparison.memory_refused,
        "test_accuracy": estimate_json(cell.accuracy),
        "accuracy_delta_pp_vs_float32": estimate_json(comparison.accuracy_delta_pp),
        # The difference judged by its interval at the report's margin (docs/compare.md).
        "accuracy_vs_float32": _accuracy_json(comparison),
        "test_loss": cell.test_loss,
        "fp8": _fp8_json(group, policy),
        "loss_scale": cell.loss_scale,
        "loss_scale_skipped_steps": cell.skipped_steps,
        "achieved_tflops": cell.achieved_tflops,
        "mfu": cell.mfu,
        "mfu_measured": cell.mfu_measured,
        "measured_peak_tflops": cell.measured_peak_tflops,
        **_telemetry_json(cell),
        "bottleneck": _bottleneck_json(cell),
        "verdict": _verdict_json(comparison),
        # Repeats that ran beside other work (docs/measurement.md, "Contention"), and
        # figures no device can produce
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


def _bottleneck_json(cell: CellSummary) -> dict[str, Any] | None:
    """What limited the step (the record's diagnosis), and how many repeats agree."""
    if cell.bottleneck is None:
        return None
    agree, diagnosed = cell.bottleneck_agree
    return {**dataclasses.asdict(cell.bottleneck), "repeats_agreeing": agree, "of": diagnosed}


def _accuracy_json(comparison: Comparison) -> dict[str, Any] | None:
    judged = comparison.accuracy
    if judged is None:
        return None
    return {
        "outcome": judged.outcome,
        "margin_pp": judged.margin_pp,
        "repeats_needed": judged.repeats_needed,
        "text": judged.text(),
    }


def _fp8_json(group: PolicyGroup, policy: str) -> dict[str, Any] | None:
    """A float8 cell's fp8 as it ran: compiled or not, an emulated cell's step time as the
    cost of emulation (its speedup_vs_float32 is null), the cell against bf16, its base
    policy, and the gain its GEMMs' timings predicted over bf16."""
    cell, comparison = group.cells[policy], group.comparisons[policy]
    fp8 = cell.fp8
    if fp8 is None:
        return None
    prediction = fp8.prediction
    return {
        "mode": fp8.mode,
        "why": fp8.why,
        "gemm": fp8.gemm,
        "compiled": cell.compiled,
        "layers_fp8": fp8.layers_fp8,
        "layers_total": fp8.layers_total,
        "flop_share": fp8.flop_share,  # of the step's matmul FLOPs
        "flop_share_note": fp8.flop_share_note,  # why flop_share is null
        "swapped_layers": dict(fp8.swapped_layers),  # name -> what mpbench swapped for Linear
        "emulation_cost_vs_float32": estimate_json(comparison.emulation_cost),
        # bf16 is float8's base policy, the only fp8 policy (mpbench.policies)
        "vs_bfloat16": _against_base_json(comparison.vs_base),
        "predicted_gain_vs_bfloat16": fp8.predicted_gain,
        "prediction": dataclasses.asdict(prediction) if prediction is not None else None,
    }


def _against_base_json(against: AgainstBase | None) -> dict[str, Any] | None:
    if against is None:
        return None
    judged = against.accuracy
    return {
        "speedup": estimate_json(against.speedup),
        "memory_ratio": estimate_json(against.memory_ratio),
        "memory_ratio_reason": against.memory_refused,
        "accuracy_delta_pp": estimate_json(against.accuracy_delta_pp),
        "accuracy": judged.outcome if judged is not None else None,
        "compiled": against.compiled,
        "distrust": against.distrust,
    }


def _telemetry_json(cell: CellSummary) -> dict[str, Any]:
    """Utilisation, power and energy (v4 records; null where not measured, and for energy the
    reason the records give, so that a missing value is explained)."""
    energy = cell.energy_per_sample_j
    return {
        "mean_cpu_util_pct": cell.cpu_util_pct,
        "mean_gpu_util_pct": cell.gpu_util_pct,
        "mean_power_w": cell.power_w,
        "power_source": cell.power_source,
        "energy_per_sample_mj": energy * 1000 if energy is not None else None,
        "energy_source": cell.energy_source,
        "energy_reason": cell.energy_reason if energy is None else None,
        "energy_window": "; ".join(cell.energy_windows) or None,
        "telemetry_unavailable": dict(cell.telemetry_missing),
    }


TELEMETRY_COLUMNS = [
    "mean_cpu_util_pct",
    "mean_gpu_util_pct",
    "mean_power_w",
    "power_source",
    "energy_per_sample_mj",
    "energy_source",
    "energy_reason",
    "energy_window",
]


def _baseline_json(match: BaselineMatch) -> dict[str, Any]:
    return {
        "cell": match.label,
        "baseline_status": match.baseline.status,
        "status": match.candidate.status,
        "step_time_ratio": estimate_json(match.step_change()),
        "memory_ratio": estimate_json(match.memory_change()),
        "memory_ratio_reason": match.memory_refused,
        "accuracy_change_pp": estimate_json(match.accuracy_change_pp()),
        "baseline_step_time_ms": estimate_json(match.baseline.step_time_s, 1000.0),
        "baseline_memory_bytes": estimate_json(match.baseline.memory_bytes),
        "baseline_memory_kind": match.baseline.memory_kind,
        "baseline_test_accuracy": estimate_json(match.baseline.accuracy),
    }


def scaling_json(report: Report, row: ScalingRow) -> dict[str, Any]:
    """A row of the scaling table (scaling.py); throughputs are global (every replica)."""
    key, layout, cell = row.group.key, row.layout, row.cell
    ms = 1000.0
    return {
        "cell": report.labeler.cell(row.key),
        "group": report.labeler.group(key),
        "framework": key.framework,
        "workload": key.workload,
        "policy": row.row.policy,
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
            "accuracy_margin_pp": report.accuracy_margin_pp,
            "require_conclusive": options.require_conclusive,
        },
        "cells": [cell_json(report, g, p, c) for g, p, c in report.policy_cells()],
        "baseline": [_baseline_json(m) for m in report.matches],
        "scaling": [scaling_json(report, row) for row in all_scaling_rows(report.sections)],
        "gates": [
            {
                "gate": r.gate,
                "cell": r.cell,
                "passed": r.passed,
                "inconclusive": r.inconclusive,
                "decided_under": r.decided_under,
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
