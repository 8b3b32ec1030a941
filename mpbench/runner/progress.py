"""What the user sees while a matrix runs: the matrix (cells done / total, ETA) and the
current cell's step counter on a terminal; one plain line per cell elsewhere (CI logs)."""

from __future__ import annotations

from rich.console import Console
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

_STYLE = {"ok": "green", "skipped": "yellow", "diverged": "red", "oom": "red", "timeout": "red"}


class Reporter:
    def __init__(self, console: Console, total_cells: int) -> None:
        self.console = console
        self.live = console.is_terminal
        self._progress: Progress | None = None
        self._matrix: TaskID | None = None
        self._cell: TaskID | None = None
        self._total = total_cells
        self._done = 0
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

    def add_cell(self) -> None:
        """One more cell than planned (a fallback of a diverged cell)."""
        self._total += 1
        if self._progress is not None and self._matrix is not None:
            self._progress.update(self._matrix, total=self._total)

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

    def cell_finished(self, record: CellRecord) -> None:
        self._done += 1
        style = _STYLE.get(record.status.value, "red")
        detail = ""
        if record.step_time and record.step_time.median_s:
            detail = f"median step {record.step_time.median_s * 1e3:.2f} ms"
            if record.accuracy.test_accuracy is not None:
                detail += f", accuracy {record.accuracy.test_accuracy:.3f}"
        if record.reason:
            detail = f"{detail}; {record.reason}" if detail else record.reason
        line = (
            f"[{self._done}/{self._total}] {record.cell_id}: "
            f"[{style}]{record.status.value}[/{style}] {detail}"
        )
        self.console.print(line, highlight=False, soft_wrap=True)
        if self._progress and self._matrix is not None:
            self._progress.advance(self._matrix)

    def warn(self, message: str) -> None:
        """Each distinct warning once per run (every cell of a workload falls back alike)."""
        if message not in self._warned:
            self._warned.add(message)
            self.console.print(f"[yellow]warning:[/yellow] {message}", highlight=False)

    def cell_resumed(self, cell_id: str) -> None:
        self._done += 1
        self.console.print(f"[{self._done}/{self._total}] {cell_id}: already done (--resume)")
        if self._progress and self._matrix is not None:
            self._progress.advance(self._matrix)
