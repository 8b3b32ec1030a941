"""`mpbench run`: expand the config into cells, run each in its own process, keep every record."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from mpbench import __version__
from mpbench.backends.base import CellSpec
from mpbench.errors import InvalidInput
from mpbench.git import git
from mpbench.machine import machine_name, named_fingerprint
from mpbench.results import CellRecord, Status, append_record, write_csv, write_environment
from mpbench.results.io import ENVIRONMENT_FILE, RESULTS_FILE, read_records
from mpbench.results.matmul_share import low_precision_note
from mpbench.results.scaling import weak_scaling_efficiency
from mpbench.results.sidefile import write_side_file
from mpbench.results.writer import ResultsWriteError, drop_torn_tail, write_atomically
from mpbench.runner.adaptive import AdaptiveRepeats, widest
from mpbench.runner.config import RunConfig, RunOptions, build_config, contradictions
from mpbench.runner.fallback import fallback_spec
from mpbench.runner.launchers.process import Outcome, run_in_child
from mpbench.runner.launchers.zygote import ForkServers
from mpbench.runner.matrix import Cell, expand, measured_steps_for
from mpbench.runner.preflight import preflight
from mpbench.runner.progress import Reporter, startup_line
from mpbench.runner.records import build_record, cell_telemetry, now_iso
from mpbench.runner.rundir import (
    LOGS,
    RUN_FILE,
    RunLock,
    RunState,
    cell_log,
    check_out_path,
    holds_a_run,
    make_dir,
    read_state,
    write_state,
)
from mpbench.runner.signals import interrupted_exit_code, stop_on_termination
from mpbench.runner.twin import float32_step_s

__all__ = ["RunOptions", "run_matrix"]

# A failure of the harness or environment, as opposed to a measured result (oom, diverged,
# and stopped: a cell that could not pay, stopped with its steps kept).
FAILED = {Status.ERROR, Status.TIMEOUT}


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> tuple[str | None, str | None]:
    """The commit of the directory mpbench runs in and its committer time (ISO 8601), which
    `mpbench store add` orders history by (docs/history.md); None where there is none."""
    commit = git(Path.cwd(), "rev-parse", "HEAD")
    when = git(Path.cwd(), "show", "-s", "--format=%cI", commit) if commit else None
    return commit, when


def environment(options: RunOptions, config: RunConfig, report: Any, device: str) -> dict:
    from mpbench.detect.system import read_tuning

    commit, commit_time = git_commit()
    return {
        "mpbench_version": __version__,
        "started_at": now_iso(),
        "command_line": options.command_line,
        "config_file": str(config.source) if config.source else None,
        "device": device,
        "machine": machine_name(),  # MPBENCH_MACHINE (mpbench/machine.py), None: unnamed
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {
            name: package_version(name)
            for name in ("torch", "tensorflow", "keras", "numpy", "pandas", "nvidia-ml-py")
        },
        "git_commit": commit,
        "git_commit_time": commit_time,
        "detect": report.to_dict(),
        # pyperf's `system show` checks and the load before the first cell (detect.system)
        "tuning": read_tuning().to_dict(),
    }


class Warnings:
    """A run's warnings, on stderr, each distinct one once (every cell of a workload falls
    back alike): stdout keeps the progress, the summary and the results' path. On a terminal,
    rich's live progress display catches what is written to stderr and prints it above it."""

    def __init__(self) -> None:
        self._console = Console(stderr=True, soft_wrap=True)
        self._said: set[str] = set()

    def __call__(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            # Text, not markup: a message may hold brackets ("[run] out_dir").
            self._console.print(Text.assemble(("warning:", "yellow"), " ", message))


# Prints the end-of-run table of the records (the CLI passes compare's): the runner only
# runs cells and keeps records, it renders no comparison of its own.
# The closing table: the records, the console, and the run's accuracy margin in points.
Summary = Callable[[list[CellRecord], Console, float], None]


def run_matrix(options: RunOptions, summary: Summary | None = None) -> int:
    """Run every cell; return the exit code (0 ok, 1 some cell failed to run, 128 + signal
    when interrupted). Bad input and failed writes raise InvalidInput (exit 2). `summary`
    prints the table at the end (None: the start-up line only)."""
    console = Console()
    if not console.is_terminal:  # CI logs and pipes: rich would squeeze the summary into 80
        console = Console(width=200)  # as compare's piped tables
    warn = Warnings()
    with stop_on_termination():  # SIGTERM / SIGHUP from here on are Ctrl-C (runner.signals)
        if options.resume:
            return _resume(options, console, warn, summary)
        return _new_run(options, console, warn, summary)


def _new_run(
    options: RunOptions, console: Console, warn: Callable[[str], None], summary: Summary | None
) -> int:
    config = build_config(options)
    run_id = new_run_id()
    run_dir = options.out if options.out is not None else config.out_dir / run_id
    check_out_path(run_dir, "--out" if options.out is not None else "[run] out_dir")
    plan = _plan(config, run_id, warn)  # every check that needs no file written
    make_dir(run_dir)
    with RunLock(run_dir):
        if holds_a_run(run_dir):
            raise InvalidInput(
                f"{run_dir} already holds a run: continue it with "
                f"'mpbench run --out {run_dir} --resume', or pass another --out"
            )
        state = RunState(run_id, now_iso(), options.command_line, __version__, config)
        write_state(run_dir, state)
        write_environment(run_dir, environment(options, config, plan.report, plan.device))
        return _run_cells(_Run(plan, config, options, run_dir, console, {}), summary)


def _resume(
    options: RunOptions, console: Console, warn: Callable[[str], None], summary: Summary | None
) -> int:
    """Continue the run in --out with the configuration stored when it started."""
    run_dir = options.out
    if run_dir is None:
        raise InvalidInput("--resume needs --out DIR: the run directory to continue")
    check_out_path(run_dir)
    if not (run_dir / RUN_FILE).exists() and not (run_dir / RESULTS_FILE).exists():
        raise InvalidInput(f"--resume: {run_dir} holds no run to continue")
    with RunLock(run_dir):
        state = read_state(run_dir)
        if state is None:
            raise InvalidInput(
                f"--resume: {run_dir} has no {RUN_FILE} (written by an older mpbench), so its "
                "configuration is unknown; start a new run with another --out"
            )
        if options.config is not None and not _same_file(options.config, state.config.source):
            raise InvalidInput(
                f"--config {options.config} contradicts the run in {run_dir}, which used "
                f"{state.config.source or 'no config file'}; resume with --out and --resume only"
            )
        conflicts = contradictions(state.config, options)
        if conflicts:
            raise InvalidInput(
                f"--resume: {'; '.join(conflicts)}: options that contradict the run in "
                f"{run_dir}; resume with --out and --resume only, or start a new run"
            )
        torn = drop_torn_tail(run_dir)
        if torn:
            warn(torn)
        done = _finished(run_dir, state.run_id)
        plan = _plan(state.config, state.run_id, warn)
        if not (run_dir / ENVIRONMENT_FILE).exists():
            # A run that a fleet's driver made (its run.json only) starts on its node here.
            write_environment(run_dir, environment(options, state.config, plan.report, plan.device))
        run = _Run(plan, state.config, options, run_dir, console, done)
        return _run_cells(run, summary)


def _same_file(given: Path, stored: Path | None) -> bool:
    return stored is not None and given.resolve() == stored.resolve()


def _finished(run_dir: Path, run_id: str) -> dict[str, CellRecord]:
    """The records a resumed run already holds; an empty or missing file: none yet."""
    path = run_dir / RESULTS_FILE
    if not path.exists() or not path.read_bytes().strip():
        return {}
    done = {record.cell_id: record for record in read_records(path)}
    strangers = {record.run_id for record in done.values()} - {run_id}
    if strangers:
        raise InvalidInput(
            f"{path} holds records of other runs ({', '.join(sorted(strangers))}) besides "
            f"{run_id}; it cannot be resumed"
        )
    return done


@dataclass
class Plan:
    """The expanded matrix, checked, ready to run."""

    run_id: str
    report: Any
    device: str
    traits: Any
    cells: list[Cell]
    fingerprint: str
    measured_peaks: dict[str, float]
    warn: Callable[[str], None]  # Warnings: stderr, once each
    # The run's fork servers while its cells run (runner/launchers/zygote.py).
    fork_servers: ForkServers | None = None
    # The device's measured memory bandwidth, GB/s (detect --measure's cache): the
    # bottleneck's ridge point is a peak over it.
    measured_bandwidth_gbps: float | None = None


def _plan(config: RunConfig, run_id: str, warn: Callable[[str], None]) -> Plan:
    from mpbench.detect import collect

    report = collect(probe=False)
    device, traits, cells = expand(config, report, run_id, measured_steps_for(config, report))
    preflight(config, cells, warn, report)
    kind, _, index = device.partition(":")
    fingerprint = report.hardware_fingerprint(kind, int(index) if index else None)
    fingerprint = named_fingerprint(fingerprint, machine_name())  # MPBENCH_MACHINE
    return Plan(run_id, report, device, traits, cells, fingerprint, {}, warn)


@dataclass
class _Run:
    """The run context: what each cell of one run is run with, from the first cell to the
    closing table: the plan, the configuration and options, the directory its records go to,
    the console, and its records (a resumed run's first)."""

    plan: Plan
    config: RunConfig
    options: RunOptions
    run_dir: Path
    console: Console
    done: dict[str, CellRecord]  # the records a resumed run holds already, by cell id
    records: list[CellRecord] = field(init=False)  # every record so far, `done`'s first

    def __post_init__(self) -> None:
        self.records = list(self.done.values())


def _run_cells(run: _Run, summary: Summary | None = None) -> int:
    plan, config, console, run_dir = run.plan, run.config, run.console, run.run_dir
    plan.measured_peaks = _measured_peaks(run)
    plan.measured_bandwidth_gbps = _measured_bandwidth(plan.fingerprint, config.threads)
    cells = plan.cells
    rounds = _rounds(cells, config)
    adaptive = _adaptive(config, run.done)
    matrix = (
        f"{len(cells)} cells"
        if adaptive is None
        else f"{len(rounds[0])} cells a round, --repeat auto (a pilot of {adaptive.n0} rounds, "
        f"at most {config.max_repeats}, target ±{config.precision * 100:g} %)"
    )
    console.print(
        f"mpbench run [bold]{plan.run_id}[/bold]: {matrix} "
        f"on {plan.device} ({plan.traits.name}); data: {config.data}; results: {run_dir}"
    )
    if config.device == "auto" and plan.device == "cpu" and plan.report.nvml_blind:
        plan.warn(
            "/dev/nvidia* exists but NVML lists no GPU, so `auto` chose the CPU; pass "
            "--device cuda to try the GPU (mpbench detect says more)"
        )
    records = run.records
    interrupted: KeyboardInterrupt | None = None
    total = len(cells) if adaptive is None else len(rounds[0]) * adaptive.n0
    try:
        with (
            Reporter(console, total) as reporter,
            ForkServers(run_dir / LOGS, plan.warn) as servers,
        ):
            plan.fork_servers = servers
            try:
                _run_rounds(run, reporter, rounds, adaptive)
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (runner.signals)
                interrupted = exc
    except ResultsWriteError:
        _write_csv_if_possible(run_dir, records)
        raise
    csv_error = _write_csv_if_possible(run_dir, records)
    if interrupted is not None:
        console.print(
            f"[yellow]Interrupted.[/yellow] {len(records)} finished cells kept in {run_dir}; "
            f"continue with: mpbench run --out {run_dir} --resume"
        )
        return interrupted_exit_code(interrupted)
    try:
        _print_summary(console, records, summary, config.accuracy_margin)
    except Exception as exc:  # the records are on disk: a report bug must not hide them
        console.print(
            f"[yellow]Could not print the summary[/yellow] ({type(exc).__name__}: {exc}); "
            f"the records are complete: mpbench compare {run_dir}"
        )
    if csv_error is not None:
        raise csv_error  # results.jsonl is complete; say (exit 2) that its CSV copy is not
    console.print(f"Results: {run_dir / RESULTS_FILE}")
    return 1 if any(r.status in FAILED for r in records) else 0


def _run_rounds(
    run: _Run, reporter: Reporter, rounds: list[list[Cell]], adaptive: AdaptiveRepeats | None
) -> None:
    """Each round's cells, each followed by the fallbacks of it that run; a resumed run's
    finished cells are reported, not run again. Under --repeat auto the rounds stop where
    the adaptive rule says (runner/adaptive.py), and run.json keeps why."""
    for index, round_cells in enumerate(rounds):
        if adaptive is not None and not adaptive.may_start(index):
            break
        for first in round_cells:
            # A cell, then (--on-diverge fallback) each fallback of it that runs.
            cell: Cell | None = first
            while cell is not None:
                record = run.done.get(cell.spec.cell_id)
                if record is not None:
                    reporter.cell_resumed(cell.spec.cell_id)
                else:
                    reference = _scaling_reference(cell, run.records)
                    # What a cell that cannot pay is held to (runner/twin.py).
                    cell.spec.float32_step_s = float32_step_s(cell.spec, run.records)
                    record = _run_and_keep(run, reporter, cell, reference)
                    run.records.append(record)
                cell = _fallback(run, reporter, cell, record)
        if adaptive is not None:
            _round_done(adaptive, index, len(round_cells), run.records, reporter, run.run_dir)
    if adaptive is not None:
        reporter.adaptive_stopped(adaptive.finish(run.records), adaptive.ran)
        _record_adaptive(run.run_dir, adaptive)


def _rounds(cells: list[Cell], config: RunConfig) -> list[list[Cell]]:
    """The cells in rounds: under --repeat auto one list per repeat (expand put the repeat
    outermost), else all of them as one."""
    if not config.adaptive:
        return [cells]
    return [[c for c in cells if c.spec.repeat == r] for r in range(config.rounds)]


def _adaptive(config: RunConfig, done: dict[str, CellRecord]) -> AdaptiveRepeats | None:
    """The --repeat auto state; a resumed run's finished cells count against the budget."""
    if not config.adaptive:
        return None
    prior = sum(r.wall_s or 0.0 for r in done.values())
    return AdaptiveRepeats(config.precision, config.max_repeats, config.time_budget, prior)


def _round_done(
    adaptive: AdaptiveRepeats,
    index: int,
    round_size: int,
    records: list[CellRecord],
    reporter: Reporter,
    run_dir: Path,
) -> None:
    """After a round under --repeat auto: decide after the pilot, say where the intervals
    stand, and keep the state in run.json."""
    decided = adaptive.round_done(index, records)
    decision = adaptive.decision
    reporter.round_finished(
        index + 1,
        decision.planned if decision is not None else None,
        adaptive.max_repeats,
        widest(adaptive.widths),
        adaptive.precision,
    )
    if decided and decision is not None:
        reporter.add_cell(round_size * (decision.planned - adaptive.n0))
        reporter.pilot_decided(decision, adaptive.max_repeats)
    _record_adaptive(run_dir, adaptive)


def _record_adaptive(run_dir: Path, adaptive: AdaptiveRepeats) -> None:
    """run.json's `adaptive` entry: the rule, the plan, the rounds run and why it stopped
    (null while it runs). --resume reads the configuration beside it and decides again."""
    path = run_dir / RUN_FILE
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["adaptive"] = adaptive.block()
    write_atomically(path, json.dumps(raw, indent=2, ensure_ascii=False) + "\n")


def _run_and_keep(
    run: _Run, reporter: Reporter, cell: Cell, reference: CellRecord | None = None
) -> CellRecord:
    record, warnings = _run_cell(run, reporter, cell)
    if record.distributed is not None and cell.scaling_reference is not None:
        record.distributed.scaling_reference = cell.scaling_reference
        if reference is not None:
            record.distributed.scaling_efficiency = weak_scaling_efficiency(
                record.throughput_samples_per_s,
                reference.throughput_samples_per_s,
                record.distributed.world_size,
            )
    append_record(run.run_dir, record)  # ResultsWriteError: stop, keep the rest
    for message in warnings:
        run.plan.warn(message)
    reporter.cell_finished(record)
    return record


def _scaling_reference(cell: Cell, records: list[CellRecord]) -> CellRecord | None:
    """The finished ok world-size-1 twin of a data-parallel cell, if this run has it."""
    if cell.scaling_reference is None:
        return None
    for record in records:
        if record.cell_id == cell.scaling_reference and record.status is Status.OK:
            return record
    return None


def _fallback(run: _Run, reporter: Reporter, cell: Cell, record: CellRecord) -> Cell | None:
    """The cell that runs a diverged one again one step down the ladder (runner/fallback.py),
    or None: not asked for, not diverged, or nothing below it on this device."""
    if run.config.on_diverge != "fallback" or record.status is not Status.DIVERGED:
        return None
    spec = fallback_spec(cell.spec, run.plan.traits)
    if spec is None:
        run.plan.warn(f"{cell.spec.cell_id} diverged and {cell.spec.policy} has no fallback here")
        return None
    reporter.add_cell()
    return Cell(spec, fallback_of=cell.spec.cell_id)


def _write_csv_if_possible(run_dir: Path, records: list[CellRecord]) -> ResultsWriteError | None:
    """results.csv from the records, or the error that says why not and what is kept (a
    record that fitted in the last page results.jsonl already had is saved although the
    disk is full; the CSV, a new file, is not)."""
    if not records:
        return None
    try:
        write_csv(run_dir, records)
    except ResultsWriteError as exc:
        return ResultsWriteError(
            f"{exc}; the {len(records)} finished cells are kept in {run_dir / RESULTS_FILE}, "
            f"and 'mpbench run --out {run_dir} --resume' writes the CSV once it can"
        )
    return None


def _run_cell(run: _Run, reporter: Reporter, cell: Cell) -> tuple[CellRecord, list[str]]:
    plan, options, run_dir = run.plan, run.options, run.run_dir
    spec = cell.spec
    spec.verbose = options.verbose
    if cell.skip_reason:
        outcome = Outcome("skipped", cell.skip_reason)
    else:
        reporter.cell_started(spec.cell_id)
        log_path = cell_log(run_dir, spec.cell_id)
        outcome = run_in_child(
            spec,
            run.config.timeout,
            log_path,
            reporter.step,
            options.verbose,
            plan.fork_servers,
            on_phase=reporter.phase,
        )
    version = package_version(spec.framework)
    side_file = _write_side_file(run_dir, spec, cell_telemetry(outcome), outcome.warnings)
    record = build_record(
        spec,
        outcome,
        plan.traits,
        plan.fingerprint,
        version,
        plan.measured_peaks,
        side_file,
        measured_bandwidth_gbps=plan.measured_bandwidth_gbps,
    )
    record.fallback_of = cell.fallback_of
    quiet = record.contention is not None and not record.contention.contended
    if "mfu_measured" in record.implausible and not quiet:
        # The cached peak is lower than what a cell just ran on a busy (or unknown) machine:
        # perhaps measured low. Forget it for this run and for the next `detect --measure`.
        # On a quiet machine it is a method mismatch (records.py): measuring again would give
        # the same peak, so it is kept, and this cell's mfu_measured alone is voided.
        from mpbench.detect.measure import forget_measured
        from mpbench.policies import resolve

        key = resolve(record.policy).peak_key
        forget_measured(plan.fingerprint, key, record.implausible["mfu_measured"])
        plan.measured_peaks.pop(key, None)
    narrow = low_precision_note(record.cell_id, record.precision)
    return record, [*outcome.warnings, *([narrow] if narrow else [])]


def _write_side_file(
    run_dir: Path, spec: CellSpec, telemetry: dict | None, warnings: list[str]
) -> str | None:
    """The cell's per-step numerics and device series beside results.jsonl (run-relative
    path for the record). The series are secondary to the record: one that cannot be
    written (a full disk) is a warning and a record whose side_file is null, and the
    record's own append then decides whether the run can go on."""
    if telemetry is None:
        return None
    try:
        return write_side_file(
            run_dir,
            spec.run_id,
            spec.cell_id,
            spec.repeat,
            telemetry["numerics"],
            telemetry["device"],
        )
    except ResultsWriteError as exc:
        warnings.append(f"{spec.cell_id}: telemetry series not saved ({exc})")
        return None


def _measured_peaks(run: _Run) -> dict[str, float]:
    """The device's measured matmul peaks (TFLOP/s per policy peak key) from detect's cache,
    measured with the threads the cells run with; with --measure-peak, measured first when
    the cache has none for this hardware (a measurement on a busy machine is not cached,
    and the run says so)."""
    from mpbench.detect.measure import cached_peaks, measure_and_cache
    from mpbench.runner.matrix import available_cores

    device, fingerprint = run.plan.device, run.plan.fingerprint
    threads = run.config.threads or available_cores()
    peaks = cached_peaks(fingerprint, threads=threads)
    if run.options.measure_peak and not peaks:
        run.console.print(f"Measuring the matmul peak of {device} (detect --measure) ...")
        result = measure_and_cache(device, fingerprint, threads=threads)
        if result.get("not_cached"):
            run.plan.warn(f"measured peak {result['not_cached']}")
        peaks = cached_peaks(fingerprint, threads=threads)
    return peaks


def _measured_bandwidth(fingerprint: str, threads: int | None) -> float | None:
    """The device's memory bandwidth from detect's cache (measured beside the peaks, under
    the same cache rules), GB/s; None when none is cached."""
    from mpbench.detect.measure import cached_bandwidth
    from mpbench.runner.matrix import available_cores

    return cached_bandwidth(fingerprint, threads=threads or available_cores())


def _print_summary(
    console: Console, records: list[CellRecord], summary: Summary | None, margin_pp: float
) -> None:
    if summary is not None:
        summary(records, console, margin_pp)
    line = startup_line(records)
    if line:
        console.print(line)
