"""What the user sees while a matrix runs: on a terminal, a live display of the matrix (cells
done / total, ETA) and of the running cell: its phase, step N of total, elapsed time and an
ETA from the rate its steps arrive at; one plain line per finished cell, and nothing while a
cell runs, elsewhere (CI logs, pipes). Under --repeat auto, a line after each round: the
widest interval so far against the target, and after the pilot the rounds it planned
(runner/adaptive.py)."""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from mpbench.backends.base import BUILDING, COMPILING, END_TO_END, EVALUATING, LOADING, TRAINING
from mpbench.results import CellRecord
from mpbench.runner.adaptive import Decision, percent
from mpbench.runner.fallback import MARK as FALLBACK_MARK
from mpbench.runner.launchers.process import STARTING

_STYLE = {
    "ok": "green",
    "skipped": "yellow",
    "stopped": "yellow",  # could not pay: measured and stopped, not a failure
    "diverged": "red",
    "oom": "red",
    "timeout": "red",
}

# The running cell's phase as its line says it; TRAINING is "warm-up" or "timing" by step.
_LABELS = {
    STARTING: "starting",
    LOADING: "loading data",
    BUILDING: "building the model",
    COMPILING: "compiling",
    END_TO_END: "end-to-end window",
    EVALUATING: "evaluating",
}
_STEPPING = (TRAINING, END_TO_END)  # the phases whose steps the ETA counts down
RATE_WINDOW_S = 60.0  # the step rate is over the step events of the last minute
_BAR = (10, 30)  # the cell's bar: left out below 10 columns to spare, at most 30


@dataclass
class CellSteps:
    """The running cell as its events describe it: its phase, its steps, and the rate they
    arrive at (over the last RATE_WINDOW_S, from at least two step events: the time of a
    first step that compiles or traces is before the first event, so it never counts)."""

    cell_id: str
    started: float  # the clock when the runner started it
    phase: str = STARTING
    step: int = 0
    total: int | None = None
    warmup: int = 0  # TRAINING's warm-up steps, from the cell's plan
    seen: deque[tuple[float, int]] = field(default_factory=deque)  # (time, step)

    def entered(self, phase: str, plan: dict[str, int]) -> None:
        self.phase = phase
        if phase == STARTING:  # the cell runs again from its start (a lost fork server)
            self.step, self.total, self.seen = 0, None, deque()
        if phase == END_TO_END:  # steps without a sync each, after an untimed trace: a
            self.seen = deque()  # rate of their own
        if phase == TRAINING:
            self.warmup = plan.get("warmup", 0)
            self.total = plan.get("total", self.total)

    def stepped(self, now: float, step: int, total: int) -> None:
        if step < self.step:  # counting from the start again
            self.seen.clear()
        self.step, self.total = step, total
        self.seen.append((now, step))
        while len(self.seen) > 2 and self.seen[0][0] < now - RATE_WINDOW_S:
            self.seen.popleft()

    def label(self) -> str:
        if self.phase == TRAINING:
            return "warm-up" if self.step < self.warmup else "timing"
        return _LABELS.get(self.phase, self.phase)

    def eta(self, now: float) -> float | None:
        """Seconds to the last step at the observed rate, counting down between events;
        None outside the training phases or before two step events."""
        seen = tuple(self.seen)  # one read: the display's thread renders while events come
        if self.phase not in _STEPPING or self.total is None or len(seen) < 2:
            return None
        (t0, s0), (t1, s1) = seen[0], seen[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return max(0.0, (self.total - s1) * (t1 - t0) / (s1 - s0) - (now - t1))

    def parts(self, now: float) -> tuple[str, str, list[tuple[str, str]]]:
        """(cell id, phase, [(text, style)] after the bar): 'step 120/775' once it has
        steps, the elapsed time, and in the training phases 'ETA 0:06:32'."""
        tail = []
        if self.total is not None:
            tail.append((f"step {self.step}/{self.total}", "progress.download"))
        tail.append((_clock(now - self.started), "progress.elapsed"))
        if self.phase in _STEPPING:
            tail.append((f"ETA {_clock(self.eta(now))}", "progress.remaining"))
        return self.cell_id, self.label(), tail


def _clock(seconds: float | None) -> str:
    return "-:--:--" if seconds is None else str(timedelta(seconds=max(0, int(seconds))))


class _CellLine:
    """The running cell's line, fitted to the width it gets:
    '  torch/cifar10_cnn/float32/r0: timing ━━━━╸━━━━ step 120/775 0:01:15 ETA 0:06:32'.
    On a narrow terminal the bar goes first, then the cell id's start ('…/float32/r0')."""

    def __init__(self, steps: CellSteps, now: float) -> None:
        self.steps, self.now = steps, now

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        steps = self.steps
        cell_id, label, tail = steps.parts(self.now)
        after = Text(" ").join(Text(text, style=style) for text, style in tail)
        width = options.max_width
        room = width - (2 + len(cell_id) + 2 + len(label)) - len(after) - 2  # 2: bar's spaces
        if room < _BAR[0]:  # no bar; the cell id's start goes where the line is still too long
            spare = width - len(after) - 1 - (2 + 2 + len(label))
            if len(cell_id) > spare:
                cut = "..." if options.ascii_only else "…"
                cell_id = cut + cell_id[len(cell_id) - max(spare - len(cut), 0) :]
        head = Text.assemble("  ", cell_id, ": ", (label, "bold"))
        if room < _BAR[0]:
            yield Text.assemble(head, " ", after, no_wrap=True, overflow="crop")
            return
        grid = Table.grid(padding=(0, 1))
        grid.add_row(
            head,
            ProgressBar(
                total=steps.total,
                completed=steps.step,
                width=min(room, _BAR[1]),
                pulse=steps.total is None,
                animation_time=self.now,
            ),
            after,
        )
        yield grid


class _Display(Progress):
    """rich's Progress for the matrix's line, with the running cell's line under it."""

    def __init__(self, *columns: str | ProgressColumn, **options: Any) -> None:
        self.cell: CellSteps | None = None  # before rich's Live, which renders at once
        super().__init__(*columns, **options)

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.cell is not None:
            yield _CellLine(self.cell, self.get_time())


class Reporter:
    def __init__(
        self, console: Console, total_cells: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.console = console
        self.live = console.is_terminal
        self._clock = clock
        self._progress: _Display | None = None
        self._matrix: TaskID | None = None
        self._total = total_cells  # the cells announced, with those add_cell added since
        self._done = 0  # of those
        # Fallbacks of diverged cells run so far: cells beyond the announced matrix, so they
        # are counted apart and never as cell N+1 of N+1 (the runner adds each one through
        # add_cell before it runs, as it adds --repeat auto's planned rounds).
        self._fallbacks = 0
        self._warned: set[str] = set()
        if self.live:
            self._progress = _Display(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
                get_time=clock,
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
        """The cell's line, live from its start: 'starting' until its first event."""
        if self._progress:
            self._progress.cell = CellSteps(cell_id, self._clock())

    def phase(self, name: str, plan: dict[str, int] | None = None) -> None:
        """The running cell entered phase `name` (its `phase` event: backends/base.py)."""
        if self._progress and self._progress.cell is not None:
            self._progress.cell.entered(name, plan or {})

    def step(self, step: int, total: int) -> None:
        if self._progress and self._progress.cell is not None:
            self._progress.cell.stepped(self._clock(), step, total)

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
        if self._progress and self._matrix is not None:
            self._progress.cell = None  # its phases and steps are over: the line goes too
            self._progress.advance(self._matrix)
            # Drawn now: rich draws its last frame again under what is printed, and that
            # frame would still hold the finished cell's line.
            self._progress.refresh()
        self.console.print(line, highlight=False, soft_wrap=True)

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
