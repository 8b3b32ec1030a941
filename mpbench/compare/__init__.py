"""`mpbench compare`: tables, CI gates and renderers over result files (docs/compare.md).

Depends only on `mpbench.results` (and the policy names); imports neither pandas nor
matplotlib until a renderer needs them.
"""

from mpbench.compare.options import (
    FORMATS,
    CompareOptions,
    parse_format,
    parse_fraction,
    parse_min_scaling_efficiency,
    parse_min_speedup,
    parse_points,
)
from mpbench.compare.render.terminal import print_run_summary
from mpbench.compare.report import Report, build_report
from mpbench.compare.run import compare, latest_run, render, run_compare

__all__ = [
    "FORMATS",
    "CompareOptions",
    "Report",
    "build_report",
    "compare",
    "latest_run",
    "parse_format",
    "parse_fraction",
    "parse_min_scaling_efficiency",
    "parse_min_speedup",
    "parse_points",
    "print_run_summary",
    "render",
    "run_compare",
]
