"""`compare --format html`: the whole report on one page. The header (runs, machines,
framework versions, the conditions the cells ran under), the gates' outcome when gates were
asked, every table of the report (report_tables: the tables the terminal and markdown draw,
with the same numbers, footnotes and verdicts), the figure `--plot` draws (inline SVG, given
by the command: render never imports plot), and the notes."""

from __future__ import annotations

from mpbench.compare.render.html_page import (
    bullet_list,
    esc,
    facts,
    outcome,
    page,
    table_html,
)
from mpbench.compare.render.report_tables import report_tables
from mpbench.compare.report import Report


def render_html(report: Report, figure: str | None = None) -> str:
    """The page; `figure`: the plot as an `<svg>` element (compare/plot/inline.py), or None."""
    body = ["<header>", "<h1>mpbench compare</h1>", facts(header_facts(report)), "</header>"]
    if report.results:
        body.append(outcome(report.verdict, "fail" if report.failures else "pass"))
    for index, table in enumerate(report_tables(report), start=1):
        body.append(table_html(table, f"t{index}"))
    if figure is not None:
        body.append(_figure(figure))
    if report.notes:
        body += ['<section id="notes">', "<h2>Notes</h2>", bullet_list(report.notes), "</section>"]
    return page(f"mpbench compare · {', '.join(report.runs)}", body)


def header_facts(report: Report) -> list[tuple[str, str]]:
    """What the page's header says: the runs, the machines, the frameworks' versions, and the
    conditions every number below rests on."""
    items = [("runs", ", ".join(report.runs))]
    if report.baseline_runs:
        items.append(("baseline", ", ".join(report.baseline_runs)))
    machines = {s.machine.label(): None for s in report.sections}  # in table order, once each
    items.append(("machines", "; ".join(machines)))
    # As the records spell them (`torch 2.13.0+cpu`), once each, in table order.
    versions = {
        record.framework_version or f"{record.framework} (version unknown)": None
        for _, _, cell in report.policy_cells()
        for record in cell.records
    }
    items.append(("versions", "; ".join(versions)))
    items.append(("conditions", conditions(report)))
    return items


def conditions(report: Report) -> str:
    """`1–3 repeats per cell; accuracy judged at a 1 pp margin; 2 cells ran contended; 1 cell
    skipped`: the statuses as the tables' status column words them."""
    cells = [cell for _, _, cell in report.policy_cells()]
    repeats = sorted({cell.repeats for cell in cells}) or [0]
    counted = str(repeats[0]) if len(repeats) == 1 else f"{repeats[0]}–{repeats[-1]}"
    parts = [f"{counted} repeat{'' if repeats == [1] else 's'} per cell"]
    parts.append(f"accuracy judged at a {report.accuracy_margin_pp:g} pp margin")
    counts = {"ran contended": sum(cell.contended for cell in cells)}
    for cell in cells:  # `2 cells skipped`, `1 cell timeout`: each status that is not ok
        if not cell.all_ok:
            counts[cell.status] = counts.get(cell.status, 0) + 1
    parts += [f"{n} cell{'s' if n > 1 else ''} {what}" for what, n in counts.items() if n]
    return "; ".join(parts)


def _figure(svg: str) -> str:
    """The plot inline, with its text alternative (the SVG's own <title> and a caption)."""
    caption = (
        "Speed-up, memory and accuracy of each policy against float32 with their 95 % "
        "intervals, and each policy's step-time distribution and loss curves: the numbers "
        "are in the tables above."
    )
    return "\n".join(
        [
            '<section id="figure">',
            "<h2>Figure</h2>",
            '<figure class="plot">',
            svg,
            f"<figcaption>{esc(caption)}</figcaption>",
            "</figure>",
            "</section>",
        ]
    )
