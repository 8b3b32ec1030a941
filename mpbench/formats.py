"""`mpbench compare`'s output formats, one row each: the name `--format` takes, what it is
for, and the function that renders a report in it. The option's check (compare/options.py),
its help (arguments.py) and the dispatch (compare/run.py) all read this table, so a new format is
one row here and one renderer module in compare/render/.

A leaf module: the CLI reads it for `--format`'s help without importing compare (numpy, the
renderers); a renderer is imported only when a report is rendered in its format.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OutputFormat:
    name: str  # as --format takes it
    # For people (the table, markdown): a failed gate is in what they read. A machine format
    # (or any format written to --output) repeats each failure on stderr for the CI log.
    human: bool
    renderer: str  # "module:function", the function taking a Report and returning its text

    def render(self, report: Any) -> str:
        module, function = self.renderer.split(":")
        return getattr(importlib.import_module(module), function)(report)


OUTPUT_FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("table", True, "mpbench.compare.render.terminal:render_table"),
    OutputFormat("markdown", True, "mpbench.compare.render.markdown:render_markdown"),
    OutputFormat("json", False, "mpbench.compare.render.json_report:render_json"),
    OutputFormat("csv", False, "mpbench.compare.render.csv_report:render_csv"),
    OutputFormat(
        "benchmark-action", False, "mpbench.compare.render.benchmark_action:render_benchmark_action"
    ),
)
BY_NAME = {output.name: output for output in OUTPUT_FORMATS}
FORMATS = tuple(BY_NAME)


def help_text() -> str:
    """--format's help: `table, markdown, json, csv or benchmark-action.`"""
    *first, last = FORMATS
    return f"{', '.join(first)} or {last}."
