"""The `mpbench history` command (registered in mpbench/cli.py).

Parses, validates, delegates: the store is results/store.py, the rest this package. Nothing
heavy is imported at the top (numpy, pandas, compare's summary): `mpbench --help` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from mpbench.errors import InvalidInput
from mpbench.history import DEFAULT_STORE

FORMATS = ("table", "markdown", "json")
METRIC_CHOICES = {"all": None, "step-time": "step time", "speed-up": "speed-up"}


def history(
    sources: list[Path] | None = typer.Argument(
        None, help=f"Stores and/or run directories (default: {DEFAULT_STORE})."
    ),
    by: str = typer.Option(
        "commit",
        "--by",
        help="commit (history in commit order), date (in the runs' order in time), or device "
        "(the fleet: each machine's newest run side by side).",
    ),
    metric: str = typer.Option("all", "--metric", help="all, step-time or speed-up."),
    device: list[str] | None = typer.Option(
        None, "--device", help="Only devices whose name holds this (h200, cpu) or this fingerprint."
    ),
    framework: list[str] | None = typer.Option(
        None, "--framework", "-f", help="torch, tensorflow."
    ),
    workload: list[str] | None = typer.Option(None, "--workload", "-w", help="Only this workload."),
    policy: list[str] | None = typer.Option(
        None, "--policy", "-p", help="Only these policies' series."
    ),
    commits: str | None = typer.Option(
        None, "--commits", help="A..B: the runs from commit A to B, both included (A.. or ..B)."
    ),
    since: str | None = typer.Option(None, "--since", help="Runs from this date or time on."),
    until: str | None = typer.Option(None, "--until", help="Runs up to this date (included)."),
    fmt: str = typer.Option("table", "--format", help="table, markdown or json."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not to stdout."),
    plot: Path | None = typer.Option(None, "--plot", help="Draw the series into this image file."),
    points: bool = typer.Option(False, "--points", help="Also list every point of every series."),
    ci: bool = typer.Option(
        False, "--ci", help="Exit 1 when the newest run brings a regression past --threshold."
    ),
    threshold: str = typer.Option(
        "5%", "--threshold", help="--ci's limit on a regression: 5% or 0.05."
    ),
    penalty: float | None = typer.Option(
        None, "--penalty", help="Change-point penalty × ln(points) (default 5; docs/history.md)."
    ),
    repo: Path | None = typer.Option(
        None, "--repo", help="Where run directories' commits are looked up (default: here)."
    ),
) -> None:
    """Step times and speed-ups over commits, with change points; --ci gates on the newest run."""
    from mpbench.arguments import parse_fraction
    from mpbench.history.report import ORDERS, read_sources
    from mpbench.policies import resolve
    from mpbench.results.store import StoreFilter

    if by not in ORDERS:
        raise InvalidInput(f"--by {by!r}: valid choices: {', '.join(ORDERS)}")
    if metric not in METRIC_CHOICES:
        raise InvalidInput(f"--metric {metric!r}: valid choices: {', '.join(METRIC_CHOICES)}")
    if fmt not in FORMATS:
        raise InvalidInput(f"--format {fmt!r}: valid choices: {', '.join(FORMATS)}")
    if by == "device" and (ci or plot is not None):
        raise InvalidInput(
            "--by device shows the fleet side by side; --ci and --plot are for a history"
        )
    if penalty is not None and penalty <= 0:
        raise InvalidInput(f"--penalty {penalty:g}: must be above 0")
    limit = parse_fraction("--threshold", threshold)
    policies = tuple(dict.fromkeys(resolve(p).name for p in policy or ()))
    filters = StoreFilter(
        devices=tuple(device or ()),
        frameworks=tuple(framework or ()),
        workloads=tuple(workload or ()),
        commits=commits,
        since=since,
        until=until,
    )
    filters.check()  # a bad date or range before anything is read
    read = read_sources(list(sources or []), repo)
    if by == "device":
        _fleet(read, filters, policies, fmt, output)
        return
    code = _history(read, filters, policies, metric, by, limit, penalty, fmt, output, plot, points)
    raise typer.Exit(code if ci else 0)


def _fleet(read, filters, policies: tuple[str, ...], fmt: str, output: Path | None) -> None:
    from mpbench.history import render
    from mpbench.history.fleet import fleet_tables
    from mpbench.policies import BASELINE

    runs, records = read.select(filters)
    tables = fleet_tables(records, runs)
    if policies:
        for table in tables:
            table.rows = [r for r in table.rows if r.row.policy in (*policies, BASELINE)]
    if not tables:
        raise InvalidInput("--by device: no finished cells in the runs the filters kept")
    if fmt == "json":
        _write(render.fleet_json(tables), output)
        return
    machines = len({m.fingerprint for t in tables for m in t.machines})
    notes = [
        "Each machine's numbers are its own run's, against its own float32: machines are never "
        "pooled into one interval. † within-run interval only (one repeat)."
    ]
    _show(
        f"mpbench fleet · {machines} machines", render.fleet_text_tables(tables), notes, fmt, output
    )


def _history(read, filters, policies, metric, by, limit, penalty, fmt, output, plot, points) -> int:
    """Show the history; return what --ci exits with (1: the newest run failed the gate)."""
    from mpbench.history import render
    from mpbench.history.ci import FAIL, INCONCLUSIVE
    from mpbench.history.report import build_history
    from mpbench.history.series import METRICS

    chosen = METRICS if METRIC_CHOICES[metric] is None else (METRIC_CHOICES[metric],)
    report = build_history(read, filters, policies, chosen, by, limit, penalty)
    if not report.series:
        raise InvalidInput("no series to show: the filters kept no finished cell")
    if plot is not None:
        from mpbench.history.plot import write_plot

        write_plot(report, plot)
    if fmt == "json":
        _write(render.history_json(report), output)
    else:
        first, last = report.runs[0], report.runs[-1]
        title = (
            f"mpbench history · {len(report.runs)} runs, {render.run_name(first, by)} → "
            f"{render.run_name(last, by)} · {', '.join(report.sources)}"
        )
        _show(title, render.history_tables(report, points), _notes(report), fmt, output)
    for series, verdict in zip(report.series, report.verdicts, strict=True):
        if verdict.outcome in (FAIL, INCONCLUSIVE):  # for the CI log, whatever the format
            group = series.group
            where = f"{group.workload} {series.label} {series.metric} on {group.device}"
            print(f"mpbench history: {verdict.outcome}: {where}: {verdict.text}", file=sys.stderr)
    return 1 if report.failed else 0


def _notes(report) -> list[str]:
    from mpbench.history.changepoints import MIN_POINTS

    notes = [
        f"Change points: PELT's penalised cost on log values (docs/history.md); a series needs "
        f"{MIN_POINTS} points. A point whose evidence compare distrusts (busy machine) is shown "
        "but not used. † within-run interval only (one repeat).",
    ]
    if report.by != "date" and any(r.commit_time is None for r in report.runs):
        notes.append("Runs whose commit time is unknown sit at their start time.")
    return notes


def _show(title: str, tables: list, notes: list[str], fmt: str, output: Path | None) -> None:
    """Tables as markdown, or drawn by rich: on a terminal at its width, else 200 wide."""
    from mpbench.history import render

    if fmt == "markdown":
        _write(render.markdown_text(title, tables, notes), output)
    elif output is None and sys.stdout.isatty():
        from rich.console import Console

        render.print_terminal(title, tables, notes, Console())
    else:
        _write(render.terminal_text(title, tables, notes), output)


def _write(text: str, output: Path | None) -> None:
    if output is None:
        from mpbench.compare.render.encoding import safe_stream

        safe_stream(sys.stdout).write(text)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write --output {output}: {exc.strerror or exc}") from None
