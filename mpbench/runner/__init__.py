"""`mpbench run`: expand the config into cells, run each in its own process, keep every record."""

from __future__ import annotations

import importlib.metadata
import platform
import secrets
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from mpbench import __version__
from mpbench.errors import InvalidInput
from mpbench.results import CellRecord, Status, append_record, write_csv, write_environment
from mpbench.results.io import RESULTS_FILE, read_records
from mpbench.runner.cells import Cell, expand
from mpbench.runner.config import RunConfig, RunOptions, build_config
from mpbench.runner.execute import Outcome, run_in_child
from mpbench.runner.progress import Reporter
from mpbench.runner.records import build_record, now_iso
from mpbench.runner.signals import interrupted_exit_code, stop_on_termination

__all__ = ["RunOptions", "run_matrix"]

# A failure of the harness or environment, as opposed to a measured result (oom, diverged).
FAILED = {Status.ERROR, Status.TIMEOUT}


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment(options: RunOptions, config: RunConfig, report: Any, device: str) -> dict:
    return {
        "mpbench_version": __version__,
        "started_at": now_iso(),
        "command_line": options.command_line,
        "config_file": str(config.source) if config.source else None,
        "device": device,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {
            name: package_version(name)
            for name in ("torch", "tensorflow", "keras", "numpy", "pandas", "nvidia-ml-py")
        },
        "git_commit": git_commit(),
        "detect": report.to_dict(),
    }


def _open_run_dir(
    options: RunOptions, config: RunConfig
) -> tuple[Path, str, dict[str, CellRecord]]:
    """The run directory, its run id, and (with --resume) the records it already holds."""
    if options.resume and options.out is None:
        raise InvalidInput("--resume needs --out DIR: the run directory to continue")
    run_id = new_run_id()
    run_dir = options.out or config.out_dir / run_id
    existing = run_dir / RESULTS_FILE
    if not existing.exists():
        return run_dir, run_id, {}
    if not options.resume:
        raise InvalidInput(
            f"{existing} already exists: pass --resume to continue that run, or another --out"
        )
    done = {record.cell_id: record for record in read_records(existing)}
    return run_dir, next(iter(done.values())).run_id, done


def run_matrix(options: RunOptions) -> int:
    """Run every cell; return the exit code (0 ok, 1 some cell failed to run, 130 interrupted)."""
    from mpbench.detect import collect

    console = Console()
    if not console.is_terminal:  # CI logs and pipes: rich would squeeze the summary into 80
        console = Console(width=160)
    config = build_config(options)
    report = collect(probe=False)
    run_dir, run_id, done = _open_run_dir(options, config)
    device, traits, cells = expand(config, report, run_id)
    kind, _, index = device.partition(":")
    fingerprint = report.hardware_fingerprint(kind, int(index) if index else None)
    measured_peaks = _measured_peaks(device, fingerprint, options.measure_peak, console)
    if not done:
        write_environment(run_dir, environment(options, config, report, device))

    console.print(
        f"mpbench run [bold]{run_id}[/bold]: {len(cells)} cells on {device} ({traits.name}); "
        f"data: {config.data}; results: {run_dir}"
    )
    if config.device == "auto" and device == "cpu" and report.nvml_blind:
        console.print(
            "[yellow]warning:[/yellow] /dev/nvidia* exists but NVML lists no GPU, so `auto` "
            "chose the CPU; pass --device cuda to try the GPU (mpbench detect says more)"
        )
    records = list(done.values())
    interrupted: KeyboardInterrupt | None = None
    with stop_on_termination(), Reporter(console, len(cells)) as reporter:
        try:
            for cell in cells:
                if cell.spec.cell_id in done:
                    reporter.cell_resumed(cell.spec.cell_id)
                    continue
                record, warnings = _run_cell(
                    cell, config, run_dir, reporter, traits, fingerprint, options, measured_peaks
                )
                append_record(run_dir, record)
                records.append(record)
                for message in warnings:
                    reporter.warn(message)
                reporter.cell_finished(record)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (runner.signals)
            interrupted = exc
    if records:
        write_csv(run_dir, records)
    if interrupted is not None:
        console.print(
            f"[yellow]Interrupted.[/yellow] {len(records)} finished cells kept in {run_dir}; "
            f"continue with: mpbench run --out {run_dir} --resume"
        )
        return interrupted_exit_code(interrupted)
    try:
        _print_summary(console, records)
    except Exception as exc:  # the records are on disk: a report bug must not hide them
        console.print(
            f"[yellow]Could not print the summary[/yellow] ({type(exc).__name__}: {exc}); "
            f"the records are complete: mpbench compare {run_dir}"
        )
    console.print(f"Results: {run_dir / RESULTS_FILE}")
    return 1 if any(r.status in FAILED for r in records) else 0


def _run_cell(
    cell: Cell,
    config: RunConfig,
    run_dir: Path,
    reporter: Reporter,
    traits: Any,
    fingerprint: str,
    options: RunOptions,
    measured_peaks: dict[str, float],
) -> tuple[CellRecord, list[str]]:
    spec = cell.spec
    spec.verbose = options.verbose
    if cell.skip_reason:
        outcome = Outcome("skipped", cell.skip_reason)
    else:
        reporter.cell_started(spec.cell_id)
        log_path = run_dir / "logs" / (spec.cell_id.replace("/", "__") + ".log")
        outcome = run_in_child(spec, config.timeout, log_path, reporter.step, options.verbose)
    version = package_version(spec.framework)
    record = build_record(spec, outcome, traits, fingerprint, version, measured_peaks)
    return record, outcome.warnings


def _measured_peaks(
    device: str, fingerprint: str, measure: bool, console: Console
) -> dict[str, float]:
    """The device's measured matmul peaks (TFLOP/s per policy peak key) from detect's cache;
    with --measure-peak, measured first when the cache has none for this hardware."""
    from mpbench.detect.measure import cached_peaks, measure_and_cache

    peaks = cached_peaks(fingerprint)
    if measure and not peaks:
        console.print(f"Measuring the matmul peak of {device} (detect --measure) ...")
        measure_and_cache(device, fingerprint)
        peaks = cached_peaks(fingerprint)
    return peaks


def _print_summary(console: Console, records: list[CellRecord]) -> None:
    from mpbench.compare import print_run_summary

    print_run_summary(records, console)
