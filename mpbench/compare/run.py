"""`mpbench compare`: read results, build the report, write it where asked, return the exit code.

Exit codes: 0 every gate passed (or none was asked for), 1 a gate failed; invalid input
raises `InvalidInput`, which the CLI turns into one line on stderr and exit code 2.
"""

from __future__ import annotations

import json
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
from mpbench.compare.options import CompareOptions, parse_format
from mpbench.compare.render.encoding import safe_stream
from mpbench.compare.report import Report, build_report
from mpbench.errors import InvalidInput
from mpbench.formats import BY_NAME
from mpbench.results import CellRecord
from mpbench.results.io import RESULTS_FILE, read_runs, results_file
from mpbench.results.run_json import AdaptiveBlock
from mpbench.results.store import StoreFilter, is_store, store_records, stored_runs


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


def load(paths: list[Path], filters: StoreFilter | None = None) -> list[CellRecord]:
    """The records of every path, merged (conflicting duplicates refused: read_runs); a store
    (mpbench store add) gives those of its runs the filters keep, run directories and files
    those that pass the record filters (device, workload, policy)."""
    stores = [p for p in paths if is_store(p)]
    if filters is not None and not stores and filters.selects_runs:
        raise InvalidInput(
            "--commits, --since and --until choose among the runs of a store "
            "(mpbench store add; docs/history.md): pass one"
        )
    files = [p for p in paths if p not in stores]
    records = read_runs(files) if files else []
    if filters is not None:
        records = [r for r in records if filters.keeps(r)]
    found = {(r.run_id, r.cell_id, r.repeat): r for r in records}
    for store in stores:
        for record in store_records(store, filters):
            identity = (record.run_id, record.cell_id, record.repeat)
            if identity in found and found[identity] != record:
                raise InvalidInput(
                    f"{store}: record {record.cell_id} of run {record.run_id} differs from "
                    "the copy in the other sources: pass one of them"
                )
            if identity not in found:
                found[identity] = record
                records.append(record)
    if filters is not None and not records:
        raise InvalidInput("no record passes --device, --workload, --policy and the run filters")
    return records


def _run_dirs(paths: list[Path], options: CompareOptions) -> dict[str, list[Path]] | None:
    """Where each run's telemetry side files are; only --plot reads them."""
    if options.plot is None:
        return None
    from mpbench.compare.summary.side_files import run_dirs

    return run_dirs([p for p in paths if not is_store(p)])  # a store keeps no side files


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
    records = load(paths, filters)
    baseline = load([options.baseline]) if options.baseline is not None else None
    run_jsons = _run_jsons(paths, filters)  # read once: the margin, --repeat auto
    if options.accuracy_margin_pp is None:
        options.accuracy_margin_pp = runs_margin(run_jsons)
    report = build_report(records, options, baseline, run_dirs=_run_dirs(paths, options))
    adaptive_repeats(report, run_jsons)
    write_outputs(report, options, safe_stream(stdout or sys.stdout), inputs)
    return report.exit_code


def runs_margin(run_jsons: list[dict]) -> float | None:
    """The accuracy margin the runs were made with (run.json's config.accuracy_margin), where
    every run that says one says the same; None otherwise (the default applies)."""
    margins = set()
    for raw in run_jsons:
        config = raw.get("config")
        margin = config.get("accuracy_margin") if isinstance(config, dict) else None
        if isinstance(margin, (int, float)) and not isinstance(margin, bool) and margin >= 0:
            margins.add(float(margin))
    return margins.pop() if len(margins) == 1 else None


def _run_jsons(paths: list[Path], filters: StoreFilter | None) -> list[dict]:
    """Each run's run.json: a run directory's file, a store's copies of its runs'."""
    found = []
    for path in paths:
        if is_store(path):
            found += [run.run_json or {} for run in stored_runs(path, filters)]
        else:
            found.append(_run_json(path))
    return found


def _run_json(path: Path) -> dict:
    """A run's run.json, or {} where there is none to read (a bare results.jsonl)."""
    try:
        raw = json.loads((results_file(Path(path)).parent / "run.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


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
    if options.plot is not None:
        from mpbench.compare.plot.figure import write_plot

        write_plot(report, options.plot)
    if options.output is not None:
        write_text("--output", options.output, render(report, options.format, terminal=False))
    elif options.format == "table":
        _print_table(report, stdout)
    else:
        stdout.write(render(report, options.format, terminal=False))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        from mpbench.compare.render.markdown import render_markdown

        warning = append_step_summary(Path(summary), render_markdown(report) + "\n", inputs or [])
        if warning:
            print(f"mpbench: warning: {warning}", file=safe_stream(sys.stderr))
    if options.output is not None or not BY_NAME[options.format].human:
        _print_failures(report)


def render(report: Report, format: str, terminal: bool = False) -> str:
    """The report as text in `format` (mpbench/formats.py's table), as --output writes it;
    `terminal`: the table with a terminal's styles."""
    if format == "table" and terminal:
        import io

        buffer = io.StringIO()
        _print_table(report, buffer, terminal=True)
        return buffer.getvalue()
    return BY_NAME[format].render(report)


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
