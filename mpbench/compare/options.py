"""What `mpbench compare` was asked to do: CompareOptions, a field per entry of its option table
(mpbench/result_options.py's COMPARE_OPTIONS), which cli.py builds the command from and fills
it through (each value through its entry's parser, mpbench/parsers.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mpbench.results.sources import SourceChoice


@dataclass
class CompareOptions(SourceChoice):
    """Everything `run_compare` needs; the CLI fills it from its options. Each field is one
    entry of COMPARE_OPTIONS; which records to read (devices, frameworks, workloads,
    policies, commits, since, until) are SourceChoice's, shared with history."""

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
