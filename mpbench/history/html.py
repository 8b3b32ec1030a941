"""`mpbench history --format html`: one page. The findings (history's tables: per series its
first and newest value, change points and the newest run's verdict), a chart per series
(workload × policy × machine: speed-up and step time across commits, svg.py), the machines side
by side (the `--by device` tables), and the notes; `--by device --format html` is the
machines alone. Drawn with compare's page and table renderer (compare/render/html_page.py)."""

from __future__ import annotations

from mpbench.compare.render.html_page import (
    bullet_list,
    esc,
    facts,
    outcome,
    page,
    table_html,
)
from mpbench.history.ci import FAIL, INCONCLUSIVE
from mpbench.history.findings import HistoryReport
from mpbench.history.render import Page, fleet_text_tables, run_name, section_title
from mpbench.history.svg import series_svg


def history_html(page_data: Page) -> str:
    report = page_data.history
    assert report is not None
    body = ["<header>", f"<h1>{esc(page_data.heading)}</h1>", facts(_facts(report)), "</header>"]
    body += _outcomes(report)
    body += ['<section id="findings">', "<h2>Findings</h2>"]
    body += [table_html(t, f"t{i}", "h3") for i, t in enumerate(page_data.tables, start=1)]
    body.append("</section>")
    body += _charts(report)
    if page_data.fleet:
        body += ['<section id="machines">', "<h2>Machines: each one's newest run</h2>"]
        tables = fleet_text_tables(page_data.fleet)
        body += [table_html(t, f"m{i}", "h3") for i, t in enumerate(tables, start=1)]
        body.append("</section>")
    body += _notes(page_data.notes)
    return page(page_data.heading, body)


def fleet_html(page_data: Page) -> str:
    body = ["<header>", f"<h1>{esc(page_data.heading)}</h1>", "</header>"]
    body += [table_html(t, f"m{i}") for i, t in enumerate(page_data.tables, start=1)]
    body += _notes(page_data.notes)
    return page(page_data.heading, body)


def _facts(report: HistoryReport) -> list[tuple[str, str]]:
    first, last = report.runs[0], report.runs[-1]
    machines = sorted({s.group.machine().label() for s in report.series})
    return [
        ("runs", f"{len(report.runs)}: {run_name(first, report.by)} → {run_name(last, report.by)}"),
        ("read from", ", ".join(report.sources)),
        ("machines", "; ".join(machines)),
        ("order", f"by {report.by}"),
        ("gate", f"a regression past {report.threshold * 100:g} % fails the newest run (--ci)"),
    ]


def _outcomes(report: HistoryReport) -> list[str]:
    """A banner per series whose newest run failed, or is inconclusive."""
    out = []
    for series, verdict in zip(report.series, report.verdicts, strict=True):
        if verdict.outcome in (FAIL, INCONCLUSIVE):
            where = (
                f"{series.group.workload} {series.label} {series.metric} on {series.group.device}"
            )
            kind = "fail" if verdict.outcome == FAIL else "warn"
            out.append(outcome(f"{verdict.outcome}: {where}: {verdict.text}", kind))
    return out


def _charts(report: HistoryReport) -> list[str]:
    """A chart per series, grouped as the findings are: per workload on a machine."""
    out = ['<section id="series">', "<h2>Series</h2>"]
    current = None
    for index, series in enumerate(report.series, start=1):
        where = section_title(series)
        if where != current:
            if current is not None:
                out.append("</div>")
            current = where
            workload = where[2]
            out.append(f"<h3>{esc(workload)} on {esc(series.group.machine().label())}</h3>")
            out.append('<div class="charts">')
        out.append('<figure class="chart">')
        out.append(series_svg(series, report.by, f"s{index}"))
        caption = f"{series.label} {series.metric}"
        out.append(f"<figcaption>{esc(caption)}</figcaption>")
        out.append("</figure>")
    if current is not None:
        out.append("</div>")
    out.append("</section>")
    return out


def _notes(notes: list[str]) -> list[str]:
    if not notes:
        return []
    return ['<section id="notes">', "<h2>Notes</h2>", bullet_list(notes), "</section>"]
