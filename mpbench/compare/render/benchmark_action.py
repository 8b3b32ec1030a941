"""The github-action-benchmark renderer (--format benchmark-action): the series a CI chart
tracks from run to run, each better when smaller."""

from __future__ import annotations

import json
import math
from typing import Any

from mpbench.compare.render.tables import config_text
from mpbench.compare.report import Report
from mpbench.compare.summary import fmt
from mpbench.compare.summary.cells import CellKey
from mpbench.policies import BASELINE


def render_benchmark_action(report: Report) -> str:
    """github-action-benchmark `customSmallerIsBetter`: every value is better when smaller.

    Step time (ms), step time relative to float32 (the ratio survives noisy runners), memory
    (MiB, one series per kind: training memory is never charted with process peaks) and test
    error (%, = 100 - accuracy) for every cell that finished.
    """
    entries: list[dict[str, Any]] = []
    for group, policy, cell in report.policy_cells():
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
        speedup = group.comparisons[policy].speedup
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
            elif speedup.no_interval:
                entry["extra"] += f"; {speedup.no_interval}"
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
