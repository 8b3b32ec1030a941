"""`mpbench compare`: tables, CI gates and renderers over result files (docs/compare.md).

Depends only on `mpbench.results` (and the policy names, and the value parsers in
`mpbench.parsers`); imports neither pandas nor matplotlib until a renderer needs them.
"""

from mpbench.compare.options import CompareOptions
from mpbench.compare.render.terminal import print_run_summary
from mpbench.compare.report import Report, build_report
from mpbench.compare.run import compare, latest_run, render, run_compare
from mpbench.formats import parse_format

__all__ = [
    "CompareOptions",
    "Report",
    "build_report",
    "compare",
    "latest_run",
    "parse_format",
    "print_run_summary",
    "render",
    "run_compare",
]
