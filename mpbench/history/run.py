"""`mpbench history`: read the runs (results/sources.py, compare's rule), build the history or
the fleet, write it where asked, return the exit code.

Exit codes: 0, or with --ci 1 when the newest run brings a regression past --threshold;
invalid input (a store that is damaged, a destination that is an input) raises InvalidInput,
which the CLI turns into one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from mpbench.compare.destinations import check_destinations, input_files, write_text
from mpbench.compare.render.encoding import safe_stream
from mpbench.errors import InvalidInput
from mpbench.formats import HISTORY, parse_format
from mpbench.history.findings import BY_DEVICE, HistoryReport, build_history
from mpbench.history.options import HistoryOptions
from mpbench.result_options import DEFAULT_STORE, METRICS
from mpbench.results.sources import Sources, read_sources, runs_margin
from mpbench.results.store import StoreFilter

if TYPE_CHECKING:
    from mpbench.history.fleet import FleetTable
    from mpbench.history.render import Page


def run_history(options: HistoryOptions, stdout: TextIO | None = None) -> int:
    options.format = parse_format(options.format, HISTORY)
    out = safe_stream(stdout or sys.stdout)
    if options.by == BY_DEVICE and (options.ci or options.plot is not None):
        raise InvalidInput(
            "--by device shows the fleet side by side; --ci and --plot are for a history"
        )
    paths = options.paths or [_default_store()]
    # Before anything is read: a report must never be written over what it reports on.
    check_destinations(options.output, options.plot, input_files(paths), what="history")
    # Checked before anything is read: a bad date or range is one line. Policies pick the
    # series shown, not the records read (a speed-up needs float32's).
    filters = options.record_filter(by_policy=False)
    sources = read_sources(paths, options.repo, ask_git=True)
    if options.by == BY_DEVICE:
        _fleet(sources, filters, options, out)
        return 0
    return _history(sources, filters, options, out)


def _default_store() -> Path:
    if not DEFAULT_STORE.is_file():
        raise InvalidInput(
            f"no results to read: pass a store or run directories ({DEFAULT_STORE} does "
            "not exist; make it with 'mpbench store add RUN_DIR...')"
        )
    return DEFAULT_STORE


def _fleet(
    sources: Sources, filters: StoreFilter | None, options: HistoryOptions, out: TextIO
) -> None:
    tables = _fleet_tables(sources, filters, options)
    if not tables:
        raise InvalidInput("--by device: no finished cells in the runs the filters kept")
    _show(_fleet_page(tables), options, out)


def _fleet_tables(
    sources: Sources, filters: StoreFilter | None, options: HistoryOptions
) -> list[FleetTable]:
    """Each workload's machines side by side, from each machine's newest run."""
    from mpbench.history.fleet import fleet_tables
    from mpbench.policies import BASELINE

    selection = sources.select(filters, newest=True)
    # Each machine's accuracy judged at the margin its run was made with, as compare does.
    margin = runs_margin(selection.run_jsons)
    tables = fleet_tables(selection.records, selection.runs, margin)
    if options.policies:
        for table in tables:
            shown = (*options.policies, BASELINE)
            table.rows = [r for r in table.rows if r.row.policy in shown]
    return tables


def _fleet_page(tables: list[FleetTable]) -> Page:
    from mpbench.history import render

    machines = len({m.fingerprint for t in tables for m in t.machines})
    notes = [
        "Each machine's numbers are its own run's, against its own float32: machines are never "
        "pooled into one interval. † within-run interval only (one repeat)."
    ]
    heading = f"mpbench fleet · {machines} machines"
    return render.Page(heading, render.fleet_text_tables(tables), notes, fleet=tables)


def _history(
    sources: Sources, filters: StoreFilter | None, options: HistoryOptions, out: TextIO
) -> int:
    """Show the history; return the exit code (1: --ci and the newest run failed)."""
    from mpbench.history import render
    from mpbench.history.ci import FAIL, INCONCLUSIVE
    from mpbench.history.series import METRICS as ALL_METRICS

    chosen = ALL_METRICS if METRICS[options.metric] is None else (METRICS[options.metric],)
    report = build_history(
        sources, filters, options.policies, chosen, options.by, options.threshold, options.penalty
    )
    if not report.series:
        raise InvalidInput("no series to show: the filters kept no finished cell")
    if options.plot is not None:
        from mpbench.history.plot import write_plot

        write_plot(report, options.plot)
    page = render.Page(
        _heading(report, render),
        render.history_tables(report, options.points),
        _notes(report),
        history=report,
    )
    if options.format == "html":  # the page shows the machines side by side too
        page.fleet = _fleet_tables(sources, filters, options)
    _show(page, options, out)
    if not options.ci:
        return 0
    for series, verdict in zip(report.series, report.verdicts, strict=True):
        if verdict.outcome in (FAIL, INCONCLUSIVE):  # for the CI log, whatever the format
            group = series.group
            where = f"{group.workload} {series.label} {series.metric} on {group.device}"
            print(f"mpbench history: {verdict.outcome}: {where}: {verdict.text}", file=sys.stderr)
    return 1 if report.failed else 0


def _heading(report: HistoryReport, render) -> str:
    first, last = report.runs[0], report.runs[-1]
    return (
        f"mpbench history · {len(report.runs)} runs, {render.run_name(first, report.by)} → "
        f"{render.run_name(last, report.by)} · {', '.join(report.sources)}"
    )


def _notes(report: HistoryReport) -> list[str]:
    from mpbench.history.changepoints import MIN_POINTS

    notes = [
        f"Change points: PELT's penalised cost on log values (docs/history.md); a series needs "
        f"{MIN_POINTS} points. A point whose evidence compare distrusts (busy machine) is shown "
        "but not used. † within-run interval only (one repeat).",
    ]
    if report.by != "date" and any(r.commit_time is None for r in report.runs):
        notes.append("Runs whose commit time is unknown sit at their start time.")
    return notes


def _show(page: Page, options: HistoryOptions, out: TextIO) -> None:
    """The page in the chosen format (compare's dispatch over history's tables of renderers);
    the table on a terminal at its width, with its styles."""
    from mpbench.compare.render.dispatch import render
    from mpbench.history.render import FLEET_RENDERERS, HISTORY_RENDERERS

    if options.format == "table" and options.output is None and out.isatty():
        from rich.console import Console

        from mpbench.compare.render.terminal import print_document

        print_document(page.heading, page.tables, page.notes, Console(file=out))
        return
    renderers = HISTORY_RENDERERS if page.history is not None else FLEET_RENDERERS
    _write(render(renderers, options.format, page), options, out)


def _write(text: str, options: HistoryOptions, out: TextIO) -> None:
    if options.output is None:
        out.write(text)
    else:
        write_text("--output", options.output, text)
