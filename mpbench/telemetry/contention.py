"""The contention counters now live in results/contention.py (used by detect, the runner and
telemetry alike); these names stay importable from here for the modules that still do."""

from mpbench.results.contention import (
    ContentionReading,
    ContentionWindow,
    busy_warning,
    judge,
    measure_now,
    reasons,
    slowing_reasons,
)

__all__ = [
    "ContentionReading",
    "ContentionWindow",
    "busy_warning",
    "judge",
    "measure_now",
    "reasons",
    "slowing_reasons",
]
