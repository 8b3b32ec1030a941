"""Human-readable renderers: a rich table for the terminal and GitHub-flavoured markdown."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from mpbench.compare import fmt
from mpbench.compare.encoding import safe_console, spell_for
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
    from rich.table import Table

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

    with safe_console(console):
        # Everything from the records is escaped: "[Errno 2]" in a reason is text, not markup.
        console.print(f"[bold]mpbench compare[/bold] · {escape(_header(report))}")
        _print_tables(_tables(report), console)
        _print_notes(report, console)


def print_run_summary(records: list[CellRecord], console: Console) -> None:
    """The end of `mpbench run`: the comparison tables of the cells it just ran, no gates."""
    if records:
        report = build_report(records, CompareOptions())
        with safe_console(console):
            _print_tables([section_table(s, report.labeler) for s in report.sections], console)


def _print_tables(tables: list[TextTable], console: Console) -> None:
    for text_table in tables:
        text_table = _spelled(text_table, console)
        table = _rich_table(text_table)
        console.print()
        if _fits(table, console):
            console.print(table)
        else:
            _print_stacked(text_table, console)


def _spelled(table: TextTable, console: Console) -> TextTable:
    """The table in the characters the console can print (encoding.py), before layout."""

    def spell(text: str) -> str:
        return spell_for(console.file, text)

    return dataclasses.replace(
        table,
        title=spell(table.title),
        headers=[spell(h) for h in table.headers],
        rows=[[spell(c) for c in row] for row in table.rows],
        caption=spell(table.caption) if table.caption else table.caption,
        footnotes=[spell(f) for f in table.footnotes],
    )


def _rich_table(text_table: TextTable) -> Table:
    from rich.markup import escape
    from rich.table import Table

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
    return table


def _fits(table: Table, console: Console) -> bool:
    """Whether every column gets at least its longest word. Narrower, rich would cut numbers
    mid-way ("130,61" over "2") or collapse whole columns to "…": a value misread is worse
    than a long page, so the table is printed as blocks instead."""
    from rich.measure import Measurement

    unbounded = console.options.update(max_width=1_000_000)
    return Measurement.get(console, unbounded, table).minimum <= console.width


def _print_stacked(text_table: TextTable, console: Console) -> None:
    """One block per row: its name (the leading text columns), then `header: value` lines.
    Values that are "—" (not measured) are left out; every number stays whole."""
    from rich.markup import escape
    from rich.padding import Padding

    console.print(f"[bold]{escape(text_table.title)}[/bold]")
    names = _name_columns(text_table.headers)
    dash = spell_for(console.file, fmt.DASH)
    for index, row in enumerate(text_table.rows):
        style = _ROW_STYLE.get(text_table.styles[index] or "")
        name = [escape(cell) for cell in row[:names]]
        if text_table.headers[0] == "result":
            name[0] = _verdict_markup(row[0])
        console.print()
        console.print(f"[bold]{' '.join(name)}[/bold]", style=style)
        for header, cell in zip(text_table.headers[names:], row[names:], strict=True):
            if cell != dash:
                # Indented as a block: a value that wraps stays under its row.
                console.print(
                    Padding(f"{escape(header)}: {escape(cell)}", (0, 0, 0, 2)), style=style
                )
    for line in filter(None, [text_table.caption, *text_table.footnotes]):
        console.print()
        console.print(escape(line))


def _name_columns(headers: list[str]) -> int:
    """How many leading columns name a row (framework and policy; result and gate; cell)."""
    count = 0
    while count < min(2, len(headers) - 1) and headers[count] in _TEXT_COLUMNS:
        count += 1
    return max(count, 1)


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
