"""The one way every report is written in a format: a table per report of `--format` name ->
"module:function" (mpbench/formats.py's names), and `render`, which imports the function only
when that report is written (the renderers import numpy, rich or matplotlib; the CLI's start
imports none of them). compare's table is here; history's and the fleet's are history's own
(history/render.py), as compare never imports history (docs/architecture.md, "Layers"). Every
function takes the report and returns the whole text the format writes; `extra` passes what
only some formats take (the html page's inline figure).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

Renderers = dict[str, str]  # --format name -> "module:function"

_RENDER = "mpbench.compare.render"
COMPARE_RENDERERS: Renderers = {
    "table": f"{_RENDER}.terminal:render_table",
    "markdown": f"{_RENDER}.markdown:render_markdown",
    "json": f"{_RENDER}.json_report:render_json",
    "csv": f"{_RENDER}.csv_report:render_csv",
    "benchmark-action": f"{_RENDER}.benchmark_action:render_benchmark_action",
    "html": f"{_RENDER}.html_compare:render_html",
}


def renderer(table: Renderers, format: str) -> Callable[..., str]:
    name = table.get(format)
    if name is None:
        raise ValueError(f"no renderer for --format {format!r}")
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def render(table: Renderers, format: str, report: object, **extra: object) -> str:
    return renderer(table, format)(report, **extra)
