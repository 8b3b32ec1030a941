"""The terminal renderer: the report's tables as rich tables that fit the console's width
(columns left out by priority, or one block per row), the verdicts and the notes."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from mpbench.compare.options import CompareOptions
from mpbench.compare.render.encoding import safe_console, spell_for
from mpbench.compare.render.report_tables import report_tables, section_tables
from mpbench.compare.render.tables import (
    INCONCLUSIVE,
    TEXT_COLUMNS,
    TextTable,
    report_header,
)
from mpbench.compare.report import Report, build_report
from mpbench.compare.summary import fmt

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from mpbench.results import CellRecord

# Prose columns (gate messages, statuses) may wrap between words; numbers and names never do.
_WRAPPING = {"status: baseline → now", "numbers", "gate"}
_ROW_STYLE = {"dim": "dim", "failed": "red", "warning": "yellow"}


def render_table(report: Report) -> str:
    """The tables as plain text, 200 columns wide, as `--format table --output` writes them
    and as a pipe gets them."""
    import io

    from rich.console import Console

    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=200, force_terminal=False, no_color=True))
    return buffer.getvalue()


def print_report(report: Report, console: Console) -> None:
    from rich.markup import escape

    with safe_console(console):
        # Everything from the records is escaped: "[Errno 2]" in a reason is text, not markup.
        console.print(f"[bold]mpbench compare[/bold] · {escape(report_header(report))}")
        _print_tables(report_tables(report), console)
        _print_notes(report, console)


def print_document(
    heading: str, tables: list[TextTable], notes: list[str], console: Console
) -> None:
    """A report of another command (history) drawn as compare draws its own: the heading,
    the tables fitted to the console, the notes."""
    from rich.markup import escape

    with safe_console(console):
        console.print(f"[bold]{escape(heading)}[/bold]")
        _print_tables(tables, console)
        _print_note_lines(notes, console)


def document_text(heading: str, tables: list[TextTable], notes: list[str]) -> str:
    """print_document as plain text, 200 columns wide (--output, a pipe)."""
    import io

    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=False, no_color=True)
    print_document(heading, tables, notes, console)
    return buffer.getvalue()


def print_run_summary(
    records: list[CellRecord], console: Console, accuracy_margin_pp: float | None = None
) -> None:
    """The end of `mpbench run`: the comparison tables of the cells it just ran, no gates;
    accuracy judged at the run's margin."""
    if records:
        report = build_report(records, CompareOptions(accuracy_margin_pp=accuracy_margin_pp))
        with safe_console(console):
            _print_tables(section_tables(report), console)


def _print_tables(tables: list[TextTable], console: Console) -> None:
    for text_table in tables:
        text_table = _spelled(text_table, console)
        console.print()
        fitted, left_out = _fit(text_table, console)
        if fitted is None:
            _print_stacked(text_table, console)
        else:
            console.print(_rich_table(fitted, left_out))
        _print_verdicts(text_table, console)


def _fit(text_table: TextTable, console: Console) -> tuple[TextTable | None, list[str]]:
    """The table with the fewest columns left out that fits the console, least important
    first (TextTable.priorities), and the headers left out; None when even the essential
    columns do not fit (then it is printed as blocks)."""
    dropped: set[int] = set()
    while True:
        candidate = text_table.without(dropped)
        left_out = [text_table.headers[i] for i in sorted(dropped)]
        if _fits(_rich_table(candidate, left_out), console):
            return candidate, left_out
        droppable = [
            i
            for i in range(len(text_table.headers))
            if i not in dropped and text_table.priority(i) > 0
        ]
        if not droppable:
            return None, []
        # The least important column; of equals, the rightmost.
        dropped.add(max(droppable, key=lambda i: (text_table.priority(i), i)))


def _print_verdicts(text_table: TextTable, console: Console) -> None:
    from rich.markup import escape
    from rich.padding import Padding

    if text_table.verdicts:
        console.print("[bold]Verdict[/bold]")
        for line in text_table.verdicts:
            console.print(Padding(escape(line), (0, 0, 0, 2)))  # wrapped lines stay indented


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


def _rich_table(text_table: TextTable, left_out: list[str] | None = None) -> Table:
    from rich import box
    from rich.cells import cell_len
    from rich.markup import escape
    from rich.table import Table

    notes = list(text_table.footnotes)
    if left_out:
        notes.append(
            f"not shown at this width: {', '.join(left_out)} (a wider terminal, "
            "--format markdown, json or csv show every column)"
        )
    caption = "\n".join(filter(None, [text_table.caption, *notes]))
    table = Table(
        title=escape(text_table.title),
        caption=escape(caption) if caption else None,
        title_justify="left",
        caption_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    wrapping = _WRAPPING | text_table.prose_columns
    for column, header in enumerate(text_table.headers):
        numeric = header not in TEXT_COLUMNS | text_table.text_columns
        values = [header, *(row[column] for row in text_table.rows)]
        longest = max(cell_len(line) for value in values for line in value.split("\n"))
        table.add_column(
            escape(header),
            justify="right" if numeric else "left",
            # rich measures a no_wrap column by its longest word, then cuts values with "…";
            # the whole longest value as the minimum makes _fits see what the column needs.
            min_width=None if header in wrapping else longest,
            # Values never wrap: a number split over lines is misread. Too wide a table
            # loses whole columns instead (_fit), or becomes blocks (_print_stacked).
            no_wrap=header not in wrapping,
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
    while count < min(2, len(headers) - 1) and headers[count] in TEXT_COLUMNS:
        count += 1
    return max(count, 1)


_VERDICT_MARKUP = {
    "FAIL": "[bold red]FAIL[/bold red]",
    INCONCLUSIVE: "[yellow]inconclusive[/yellow]",
}


def _verdict_markup(result: str) -> str:
    return _VERDICT_MARKUP.get(result, "[green]pass[/green]")


def _print_notes(report: Report, console: Console) -> None:
    from rich.markup import escape

    _print_note_lines(report.notes, console)
    if report.results:
        style = "bold red" if report.failures else "bold green"
        console.print()
        console.print(f"[{style}]{escape(report.verdict)}[/{style}]")


def _print_note_lines(notes: list[str], console: Console) -> None:
    from rich.markup import escape

    if notes:
        console.print()
        console.print("[bold]Notes[/bold]")
        for note in notes:
            console.print(f"  • {escape(note)}")
