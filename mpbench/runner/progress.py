"""What the user sees while a matrix runs: the matrix (cells done / total, ETA) and the
current cell's step counter on a terminal; one plain line per cell elsewhere (CI logs).
Under --repeat auto, a line after each round: the widest interval so far against the target,
and after the pilot the rounds it planned (runner/adaptive.py)."""

from __future__ import annotations

import statistics

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from mpbench.results import CellRecord
from mpbench.runner.adaptive import Decision, percent
from mpbench.runner.fallback import MARK as FALLBACK_MARK

_STYLE = {"ok": "green", "skipped": "yellow", "diverged": "red", "oom": "red", "timeout": "red"}


class Reporter:
    def __init__(self, console: Console, total_cells: int) -> None:
        self.console = console
        self.live = console.is_terminal
        self._progress: Progress | None = None
        self._matrix: TaskID | None = None
        self._cell: TaskID | None = None
        self._total = total_cells  # the cells announced, with those add_cell added since
        self._done = 0  # of those
        # Fallbacks of diverged cells run so far: cells beyond the announced matrix, so they
        # are counted apart and never as cell N+1 of N+1 (the runner adds each one through
        # add_cell before it runs, as it adds --repeat auto's planned rounds).
        self._fallbacks = 0
        self._warned: set[str] = set()
        if self.live:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self._matrix = self._progress.add_task("cells", total=total_cells)

    def add_cell(self, count: int = 1) -> None:
        """More cells than planned: a fallback of a diverged cell, or (--repeat auto) the
        rounds the pilot planned."""
        self._total += count
        if self._progress is not None and self._matrix is not None:
            self._progress.update(self._matrix, total=self._total)

    def round_finished(
        self,
        number: int,
        planned: int | None,
        max_repeats: int,
        widest: tuple[str, float] | None,
        precision: float,
    ) -> None:
        """--repeat auto: 'round 3/≤10, widest ±7.9 % (torch/mnist_dense/mixed_bfloat16),
        target ±5 %' (planned None: the pilot has not decided yet)."""
        self._say(round_line(number, planned, max_repeats, widest, precision))

    def pilot_decided(self, decision: Decision, max_repeats: int) -> None:
        self._say(pilot_line(decision, max_repeats))

    def adaptive_stopped(self, reason: str, ran: int) -> None:
        self._say(f"--repeat auto stopped after {ran} round{'s' if ran != 1 else ''}: {reason}")

    def _say(self, line: str) -> None:
        if not self.console.encoding.lower().startswith("utf"):  # LC_ALL=C, a plain pipe
            line = line.replace("≤", "<=").replace("±", "+/-")
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def __enter__(self) -> Reporter:
        if self._progress:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress:
            self._progress.stop()

    def cell_started(self, cell_id: str) -> None:
        if self._progress:
            if self._cell is not None:
                self._progress.remove_task(self._cell)
            self._cell = self._progress.add_task(f"  {cell_id} steps", total=None)

    def step(self, step: int, total: int) -> None:
        if self._progress and self._cell is not None:
            self._progress.update(self._cell, completed=step, total=total)

    def _count(self, fallback: bool) -> str:
        """`[3/8]` for a cell of the matrix, `[fallback of 3/8]` for a fallback run after
        cell 3: the matrix's count, never grown past the cells the run announced."""
        if fallback:
            self._fallbacks += 1
            if self._progress is not None and self._matrix is not None:
                extra = f"{self._fallbacks} fallback{'s' if self._fallbacks > 1 else ''}"
                self._progress.update(self._matrix, description=f"cells (+{extra})")
        else:
            self._done += 1
        of = f"{self._done}/{self._total - self._fallbacks}"
        return f"[fallback of {of}]" if fallback else f"[{of}]"

    def cell_finished(self, record: CellRecord) -> None:
        count = self._count(fallback=bool(record.fallback_of))
        style = _STYLE.get(record.status.value, "red")
        detail = ""
        if record.step_time and record.step_time.median_s:
            detail = f"median step {record.step_time.median_s * 1e3:.2f} ms"
            if record.accuracy.test_accuracy is not None:
                detail += f", accuracy {record.accuracy.test_accuracy:.3f}"
        if record.reason:
            detail = f"{detail}; {record.reason}" if detail else record.reason
        status = f"[{style}]{record.status.value}[/{style}]"
        line = f"{escape(count)} {escape(record.cell_id)}: {status} {escape(detail)}"
        self.console.print(line, highlight=False, soft_wrap=True)
        if self._progress and self._matrix is not None:
            self._progress.advance(self._matrix)

    def warn(self, message: str) -> None:
        """Each distinct warning once per run (every cell of a workload falls back alike)."""
        if message not in self._warned:
            self._warned.add(message)
            self.console.print(f"[yellow]warning:[/yellow] {message}", highlight=False)

    def cell_resumed(self, cell_id: str) -> None:
        count = self._count(fallback=FALLBACK_MARK in cell_id)
        self.console.print(f"{count} {cell_id}: already done (--resume)", markup=False)
        if self._progress and self._matrix is not None:
            self._progress.advance(self._matrix)


def round_line(
    number: int,
    planned: int | None,
    max_repeats: int,
    widest: tuple[str, float] | None,
    precision: float,
) -> str:
    """The line after round `number` (1-based) under --repeat auto."""
    of = f"{planned}" if planned is not None else f"≤{max_repeats}"
    if widest is None:
        now = "no interval yet (one round per cell)" if number < 2 else "no interval yet"
    else:
        now = f"widest {percent(widest[1])} ({widest[0]})"
    return f"round {number}/{of}, {now}, target {_target(precision)}"


def pilot_line(decision: Decision, max_repeats: int) -> str:
    """After the pilot: the rounds it planned, and why."""
    more = decision.planned - decision.n0
    then = f"{more} more round{'s' if more != 1 else ''}" if more else "no more rounds"
    return (
        f"pilot of {decision.n0} rounds done: planned {decision.planned} of at most "
        f"{max_repeats} rounds ({then}); {decision.reason}"
    )


def _target(precision: float) -> str:
    """0.05 -> '±5 %', 0.025 -> '±2.5 %'."""
    return f"±{precision * 100:g} %"


def startup_line(records: list[CellRecord]) -> str | None:
    """What starting the cells cost, per framework and launcher: the median and range of the
    records' start-up (docs/measurement.md, "Starting a cell"). A framework's first forked
    cell pays for starting its fork server, so the range shows it."""
    groups: dict[tuple[str, str], list[float]] = {}
    for record in records:
        if record.startup is not None and record.startup.seconds is not None:
            key = (record.framework, record.startup.launcher)
            groups.setdefault(key, []).append(record.startup.seconds)
    if not groups:
        return None
    parts = [
        f"{framework} {statistics.median(seconds):.2f} s "
        f"({min(seconds):.2f}-{max(seconds):.2f}, {len(seconds)} cells, {launcher})"
        for (framework, launcher), seconds in sorted(groups.items())
    ]
    return "Cell start-up to the first step, median (range): " + "; ".join(parts)
