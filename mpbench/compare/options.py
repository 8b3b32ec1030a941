"""What `mpbench compare` was asked to do: CompareOptions, filled from the command line
through the option table (mpbench/result_options.py's COMPARE_OPTIONS, whose parsers read the
user's spelling of each threshold).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpbench.result_options import COMPARE_OPTIONS
from mpbench.results.sources import SourceChoice


@dataclass
class CompareOptions(SourceChoice):
    """Everything `run_compare` needs; the CLI fills it from its options (command_line_options).
    Each field is one entry of COMPARE_OPTIONS; which records to read (devices, frameworks,
    workloads, policies, commits, since, until) are SourceChoice's, shared with history."""

    paths: list[Path] = field(default_factory=list)  # none: the latest run under results_dir
    results_dir: Path = Path("results")
    pool: bool = False  # a store's runs (or several commits') pooled as repeats
    baseline: Path | None = None
    max_slowdown: float | None = None  # fraction: 0.10 = 10 % slower step time allowed
    max_memory_increase: float | None = None  # fraction
    max_accuracy_drop_pp: float | None = None  # percentage points
    # canonical policy -> ratio; `policy@N` keys gate the cells at world size N only
    min_speedup: dict[str, float] = field(default_factory=dict)
    # "N" (every policy) or "policy@N" -> the lowest weak-scaling efficiency at world size N
    min_scaling_efficiency: dict[str, float] = field(default_factory=dict)
    max_accuracy_delta_pp: float | None = None  # points below float32: non-inferiority
    # The verdicts' accuracy margin in points (summary/accuracy.py); None: the runs' own
    # (run.json's accuracy_margin), else 1.
    accuracy_margin_pp: float | None = None
    allow_different_hardware: bool = False
    require_conclusive: bool = False  # an inconclusive gate (interval straddles it) fails
    format: str = "table"
    output: Path | None = None
    plot: Path | None = None

    @property
    def has_baseline_gates(self) -> bool:
        return any(
            v is not None
            for v in (self.max_slowdown, self.max_memory_increase, self.max_accuracy_drop_pp)
        )

    @property
    def has_ratio_gates(self) -> bool:
        return (
            bool(self.min_speedup)
            or bool(self.min_scaling_efficiency)
            or self.max_accuracy_delta_pp is not None
        )


def command_line_options(given: dict[str, Any]) -> CompareOptions:
    """What typer parsed (a value per entry of COMPARE_OPTIONS, under its field's name) ->
    CompareOptions, each value through its entry's parser, in the table's order (so the first
    bad option is the one named)."""
    return CompareOptions(
        **{option.field: option.value(given[option.field]) for option in COMPARE_OPTIONS}
    )
