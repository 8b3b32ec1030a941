"""Human-readable renderers: a rich table for the terminal and GitHub-flavoured markdown."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpbench.compare.options import CompareOptions
from mpbench.compare.report import Report, build_report
from mpbench.compare.rows import (
    INCONCLUSIVE,
    TextTable,
    baseline_table,
    gates_table,
    section_table,
)

if TYPE_CHECKING:
    from rich.console import Console

    from mpbench.results import CellRecord

_TEXT_COLUMNS = {"framework", "policy", "status", "cell", "result", "gate", "numbers"}


def _tables(report: Report) -> list[TextTable]:
    tables = [section_table(s, report.labeler) for s in report.sections]
    if report.matches:
        tables.append(baseline_table(report))
    if report.results:
        tables.append(gates_table(report))
    return tables


def _header(report: Report) -> str:
    text = "runs: " + ", ".join(report.runs)
    if report.baseline_runs:
        text += " · baseline: " + ", ".join(report.baseline_runs)
    return text


# --- terminal -----------------------------------------------------------------------------

_ROW_STYLE = {"dim": "dim", "failed": "red"}


def print_report(report: Report, console: Console) -> None:
    from rich.markup import escape

    # Everything from the records is escaped: "[Errno 2]" in a reason is text, not markup.
    console.print(f"[bold]mpbench compare[/bold] · {escape(_header(report))}")
    _print_tables(_tables(report), console)
    _print_notes(report, console)


def print_run_summary(records: list[CellRecord], console: Console) -> None:
    """The end of `mpbench run`: the comparison tables of the cells it just ran, no gates."""
    if records:
        report = build_report(records, CompareOptions())
        _print_tables([section_table(s, report.labeler) for s in report.sections], console)


def _print_tables(tables: list[TextTable], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    for text_table in tables:
        caption = "\n".join(filter(None, [text_table.caption, *text_table.footnotes]))
        table = Table(
            title=escape(text_table.title),
            caption=escape(caption) if caption else None,
            title_justify="left",
            caption_justify="left",
            header_style="bold",
        )
        for header in text_table.headers:
            numeric = header not in _TEXT_COLUMNS
            table.add_column(
                escape(header),
                justify="right" if numeric else "left",
                overflow="fold",
                no_wrap=header in ("framework", "policy"),  # names stay whole; numbers wrap
            )
        for index, row in enumerate(text_table.rows):
            style = _ROW_STYLE.get(text_table.styles[index] or "")
            row = [escape(cell) for cell in row]
            if text_table.headers[0] == "result":
                row = [_verdict_markup(text_table.rows[index][0]), *row[1:]]
            table.add_row(*row, style=style, end_section=index in text_table.group_ends)
        console.print()
        console.print(table)


_VERDICT_MARKUP = {
    "FAIL": "[bold red]FAIL[/bold red]",
    INCONCLUSIVE: "[yellow]inconclusive[/yellow]",
}
_VERDICT_MARKDOWN = {"FAIL": "❌ **FAIL**", INCONCLUSIVE: "⚠️ inconclusive"}


def _verdict_markup(result: str) -> str:
    return _VERDICT_MARKUP.get(result, "[green]pass[/green]")


def _print_notes(report: Report, console: Console) -> None:
    from rich.markup import escape

    if report.notes:
        console.print()
        console.print("[bold]Notes[/bold]")
        for note in report.notes:
            console.print(f"  • {escape(note)}")
    if report.results:
        style = "bold red" if report.failures else "bold green"
        console.print()
        console.print(f"[{style}]{escape(report.verdict)}[/{style}]")


# --- markdown -----------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _md_table(table: TextTable) -> list[str]:
    lines = [f"### {_md_cell(table.title)}", ""]
    lines.append("| " + " | ".join(_md_cell(h) for h in table.headers) + " |")
    aligns = ["---" if h in _TEXT_COLUMNS else "---:" for h in table.headers]
    lines.append("| " + " | ".join(aligns) + " |")
    for row in table.rows:
        if table.headers[0] == "result":
            row = [_VERDICT_MARKDOWN.get(row[0], "✅ pass"), *row[1:]]
        lines.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    for line in filter(None, [table.caption, *table.footnotes]):
        lines += ["", _md_cell(line)]
    lines.append("")
    return lines


def render_markdown(report: Report) -> str:
    lines = ["## mpbench compare", "", _md_cell(_header(report)), ""]
    for table in _tables(report):
        lines += _md_table(table)
    if report.notes:
        lines += ["### Notes", ""]
        lines += [f"- {_md_cell(note)}" for note in report.notes]
        lines.append("")
    if report.results:
        mark = "❌" if report.failures else "✅"
        lines += [f"**{mark} {report.verdict}**", ""]
    return "\n".join(lines)
