"""`mpbench compare`: read results, build the report, write it where asked, return the exit code.

Exit codes: 0 every gate passed (or none was asked for), 1 a gate failed; invalid input
raises `InvalidInput`, which the CLI turns into one line on stderr and exit code 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

from mpbench.compare.destinations import (
    append_step_summary,
    check_destinations,
    input_files,
    write_text,
)
from mpbench.compare.options import CompareOptions
from mpbench.compare.render.encoding import safe_stream
from mpbench.compare.report import Report, build_report
from mpbench.errors import InvalidInput
from mpbench.formats import BY_NAME, parse_format
from mpbench.results import CellRecord
from mpbench.results.io import RESULTS_FILE
from mpbench.results.run_json import AdaptiveBlock
from mpbench.results.sources import (
    Selection,
    read_baseline,
    read_sources,
    runs_margin,
)
from mpbench.results.store import StoredRun, StoreFilter


def latest_run(results_dir: Path) -> Path:
    """The run directory under `results_dir` whose results.jsonl changed last."""
    if not results_dir.is_dir():
        raise InvalidInput(
            f"no results to compare: {results_dir}/ does not exist "
            "(pass result files or run directories, or run 'mpbench run' first)"
        )
    runs = [d for d in results_dir.iterdir() if (d / RESULTS_FILE).is_file()]
    if not runs:
        raise InvalidInput(
            f"no results to compare: no run directory with {RESULTS_FILE} under {results_dir}/ "
            "(pass result files or run directories, or run 'mpbench run' first)"
        )
    return max(runs, key=lambda d: ((d / RESULTS_FILE).stat().st_mtime, d.name))


def read(paths: list[Path], filters: StoreFilter | None = None, pool: bool = False) -> Selection:
    """The runs and records of every path (results/sources.py's rule): a store's runs, or run
    directories of several commits, are a history, and only each machine's newest run is read
    unless `pool` or a filter that picks runs (--commits, --since, --until) says otherwise."""
    selection = read_sources(paths).select(filters, pool)
    if filters is not None and not selection.records:
        raise InvalidInput("no record passes --device, --workload, --policy and the run filters")
    return selection


def load(
    paths: list[Path], filters: StoreFilter | None = None, pool: bool = False
) -> list[CellRecord]:
    """The records `read` reads."""
    return read(paths, filters, pool).records


def selection_notes(selection: Selection) -> list[str]:
    """What the report says about the runs it read: each machine whose older runs were left
    out, and each whose runs of several commits were pooled."""
    notes = []
    for held in selection.machines.values():
        if held.left_out:
            older = held.left_out
            commits = list(dict.fromkeys(r.short_commit for r in older if r.short_commit))
            span = f" ({commits[0]} … {commits[-1]})" if len(commits) > 1 else ""
            span = f" ({commits[0]})" if len(commits) == 1 else span
            notes.append(
                f"{held.machine.label()}: read its newest run only, {_run_name(held.runs[-1])}; "
                f"{len(older)} older run{'s' if len(older) != 1 else ''}{span} left out, as a "
                "history is not repeats of one experiment: choose runs with --commits, --since "
                "or --until, or pool them with --pool"
            )
    for fingerprint, commits in selection.pooled_commits.items():
        held = selection.machines[fingerprint]
        notes.append(
            f"{held.machine.label()}: {len(held.runs)} runs of {len(commits)} commits "
            f"({', '.join(commits)}) pooled as repeats of one experiment"
        )
    return notes


def _run_name(run: StoredRun) -> str:
    commit = f"commit {run.short_commit}" if run.short_commit else "commit unknown"
    return f"{run.run_id} ({commit}{', ' + run.when[:10] if run.when else ''})"


def run_compare(paths: list[Path] | None = None, **options: object) -> int:
    """Compare result files; `options` are `CompareOptions` fields (or pass `options=`)."""
    given = options.pop("options", None)
    if given is not None and not isinstance(given, CompareOptions):
        raise TypeError("options= must be a CompareOptions")
    opts = given or CompareOptions(**options)  # type: ignore[arg-type]
    if paths:
        opts.paths = [Path(p) for p in paths]
    return compare(opts)


def compare(options: CompareOptions, stdout: TextIO | None = None) -> int:
    options.format = parse_format(options.format)
    paths = options.paths or [latest_run(options.results_dir)]
    # Before anything is read: a report must never be written over what it reports on.
    inputs = input_files([*paths, *([options.baseline] if options.baseline else [])])
    check_destinations(options.output, options.plot, inputs)
    if options.has_baseline_gates and options.baseline is None:
        raise InvalidInput(
            "--max-slowdown, --max-memory-increase and --max-accuracy-drop need --baseline "
            "(within one run, use --min-speedup and --max-accuracy-delta)"
        )
    filters = options.record_filter()
    selection = read(paths, filters, options.pool)
    # A run is never its own baseline (results/sources.py's rule): a store it was added to
    # is read less its records, and the report says so.
    against = None if options.baseline is None else read_baseline(options.baseline, selection)
    baseline = against.selection.records if against is not None else None
    if options.accuracy_margin_pp is None:
        options.accuracy_margin_pp = runs_margin(selection.run_jsons)
    directories = selection.directories if options.plot is not None else None
    report = build_report(selection.records, options, baseline, run_dirs=directories)
    report.notes += selection_notes(selection)
    if against is not None and against.note:
        report.notes.append(against.note)
    adaptive_repeats(report, selection.run_jsons)
    write_outputs(report, options, safe_stream(stdout or sys.stdout), inputs)
    return report.exit_code


def adaptive_repeats(report: Report, run_jsons: list[dict]) -> None:
    """Runs of `mpbench run --repeat auto`: why each stopped (the `adaptive` entry the run
    wrote into its run.json), as a note and in the report's data. A path without a readable
    run.json (a bare results.jsonl, an older run) adds nothing."""
    for raw in run_jsons:
        run_id = raw.get("run_id")
        block = AdaptiveBlock.from_dict(raw.get("adaptive"))
        known = isinstance(run_id, str) and run_id in report.runs
        known = known and run_id not in report.adaptive_repeats
        if known and block is not None:
            # The report's data keeps the entry as the run wrote it (the JSON output shows it).
            report.adaptive_repeats[run_id] = raw["adaptive"]
            report.notes.append(adaptive_note(run_id, block))


def adaptive_note(run_id: str, block: AdaptiveBlock) -> str:
    """'run X: --repeat auto stopped after 7 rounds: planned repeats reached (stein two-stage:
    pilot 5, planned 7; widest ±3.1 % in torch/mnist_dense/mixed_bfloat16, target ±5 %)'."""
    planned = block.planned
    stopped = block.stopped or "did not finish (continue it with mpbench run --resume)"
    text = f"run {run_id}: --repeat auto stopped after {block.ran} rounds: {stopped} "
    text += f"({block.rule}: pilot {block.pilot}, "
    text += f"planned {planned if planned is not None else '-'}"
    widths = {k: v for k, v in block.half_width.items() if isinstance(v, float)}
    if widths:
        label = max(widths, key=lambda k: widths[k])
        shown = "" if "widest" in stopped else f" ±{widths[label] * 100:.1f} %"
        text += f"; widest{shown} in {label}"
    precision = block.precision
    if isinstance(precision, (int, float)):
        text += f", target ±{precision * 100:g} %"
    return text + ")"


def write_outputs(
    report: Report, options: CompareOptions, stdout: TextIO, inputs: list[Path] | None = None
) -> None:
    """The chosen format to --output or stdout; markdown to the step summary; the plot."""
    extra: dict[str, object] = {}
    if options.plot is not None:
        from mpbench.compare.plot.figure import build_figure, write_plot

        figure = build_figure(report)
        write_plot(report, options.plot, figure)
        if options.format == "html":  # the page carries the same figure, inline
            from mpbench.compare.plot.inline import figure_svg

            extra["figure"] = figure_svg(figure)
    if options.output is not None:
        write_text("--output", options.output, render(report, options.format, **extra))
    elif options.format == "table":
        _print_table(report, stdout)
    else:
        stdout.write(render(report, options.format, **extra))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        from mpbench.compare.render.markdown import render_markdown

        warning = append_step_summary(Path(summary), render_markdown(report) + "\n", inputs or [])
        if warning:
            print(f"mpbench: warning: {warning}", file=safe_stream(sys.stderr))
    if options.output is not None or not BY_NAME[options.format].human:
        _print_failures(report)


def render(report: Report, format: str, terminal: bool = False, **extra: object) -> str:
    """The report as text in `format` (mpbench/formats.py's table), as --output writes it;
    `terminal`: the table with a terminal's styles; `extra`: what only some formats take
    (compare/render/dispatch.py, the one dispatch)."""
    if format == "table" and terminal:
        import io

        buffer = io.StringIO()
        _print_table(report, buffer, terminal=True)
        return buffer.getvalue()
    from mpbench.compare.render.dispatch import COMPARE_RENDERERS
    from mpbench.compare.render.dispatch import render as render_as

    return render_as(COMPARE_RENDERERS, format, report, **extra)


def _print_table(report: Report, out: TextIO, terminal: bool | None = None) -> None:
    from rich.console import Console

    from mpbench.compare.render.terminal import print_report

    console = Console(file=out, force_terminal=terminal, soft_wrap=False)
    if not console.is_terminal:
        console = Console(file=out, width=200, force_terminal=False, no_color=True)
    print_report(report, console)


def _print_failures(report: Report) -> None:
    """When the report went to a file or is machine-readable, CI logs still say why."""
    stderr = safe_stream(sys.stderr)
    for failure in report.failures:
        print(f"FAIL {failure.gate} {failure.cell}: {failure.message}", file=stderr)
    if report.results:
        print(report.verdict, file=stderr)
