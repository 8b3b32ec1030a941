"""The markdown renderer: the report as GitHub-flavoured markdown (--format markdown and the
step summary)."""

from __future__ import annotations

from mpbench.compare.render.report_tables import report_tables
from mpbench.compare.render.tables import (
    INCONCLUSIVE,
    TEXT_COLUMNS,
    TextTable,
    report_header,
)
from mpbench.compare.report import Report

_VERDICT_MARKDOWN = {"FAIL": "❌ **FAIL**", INCONCLUSIVE: "⚠️ inconclusive"}


def _md_cell(text: str) -> str:
    """One line: a value's lines joined by "; " (a table cell holds no line break)."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return "; ".join(line for line in lines if line).replace("|", "\\|")


def _md_table(table: TextTable) -> list[str]:
    lines = [f"### {_md_cell(table.title)}", ""]
    lines.append("| " + " | ".join(_md_cell(h) for h in table.headers) + " |")
    text = TEXT_COLUMNS | table.text_columns
    aligns = ["---" if h in text else "---:" for h in table.headers]
    lines.append("| " + " | ".join(aligns) + " |")
    for row in table.rows:
        if table.headers[0] == "result":
            row = [_VERDICT_MARKDOWN.get(row[0], "✅ pass"), *row[1:]]
        lines.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    caption = table.caption.splitlines() if table.caption else []
    for line in [*caption, *table.footnotes]:
        lines += ["", _md_cell(line)]
    if table.verdicts:
        lines += ["", "**Verdict**", ""]
        lines += [f"- {_md_cell(line)}" for line in table.verdicts]
    lines.append("")
    return lines


def render_markdown(report: Report) -> str:
    lines = ["## mpbench compare", "", _md_cell(report_header(report)), ""]
    for table in report_tables(report):
        lines += _md_table(table)
    if report.notes:
        lines += ["### Notes", ""]
        lines += [f"- {_md_cell(note)}" for note in report.notes]
        lines.append("")
    if report.results:
        mark = "❌" if report.failures else "✅"
        lines += [f"**{mark} {report.verdict}**", ""]
    return "\n".join(lines)


def markdown_document(heading: str, tables: list[TextTable], notes: list[str]) -> str:
    """A report of another command (history) written as compare writes its own."""
    lines = [f"## {_md_cell(heading)}", ""]
    for table in tables:
        lines += _md_table(table)
    if notes:
        lines += ["### Notes", ""]
        lines += [f"- {_md_cell(note)}" for note in notes]
        lines.append("")
    return "\n".join(lines)
