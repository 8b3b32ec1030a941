"""The run's cell counter (runner/progress.py) against the matrix the run announced.

`mpbench run` says "N cells" before it starts; a fallback of a diverged cell
(`--on-diverge fallback`) is one more cell that was not among them, so it is counted as the
fallback of the cell it follows, never as cell N+1 of N+1.
"""

from __future__ import annotations

import io
import re

from builders import variant_run
from rich.console import Console

from mpbench.runner.progress import Reporter

COUNTER = re.compile(r"^\[(\d+)/(\d+)\]")


def _lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line.strip()]


def test_a_fallback_does_not_grow_the_count_past_the_announced_cells() -> None:
    records = {r.cell_id: r for r in variant_run()}
    diverged = records["torch/mnist_dense/mixed_float16@ls1e+30/r0"]
    fallback = records["torch/mnist_dense/mixed_float16@ls1e+30~fallback-mixed_bfloat16/r0"]
    plain = records["torch/mnist_dense/float32/r0"]
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with Reporter(console, total_cells=2) as reporter:  # "2 cells", as the run announced
        reporter.cell_finished(diverged)
        reporter.add_cell()  # what the runner does before it runs the fallback
        reporter.cell_finished(fallback)
        reporter.cell_finished(plain)
    lines = _lines(out)
    counts = [COUNTER.match(line) for line in lines]
    assert [(int(m[1]), int(m[2])) for m in counts if m] == [(1, 2), (2, 2)]
    (line,) = [line for line in lines if fallback.cell_id in line]
    assert line.startswith(f"[fallback of 1/2] {fallback.cell_id}: ok")


def test_a_resumed_fallback_is_counted_the_same_way() -> None:
    records = {r.cell_id: r for r in variant_run()}
    diverged = records["torch/mnist_dense/mixed_float16@ls1e+30/r0"]
    fallback_id = "torch/mnist_dense/mixed_float16@ls1e+30~fallback-mixed_bfloat16/r0"
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with Reporter(console, total_cells=1) as reporter:
        reporter.cell_resumed(diverged.cell_id)
        reporter.add_cell()
        reporter.cell_resumed(fallback_id)
    lines = _lines(out)
    assert lines[0].startswith(f"[1/1] {diverged.cell_id}: already done")
    assert lines[1].startswith(f"[fallback of 1/1] {fallback_id}: already done")


def test_added_rounds_of_repeat_auto_still_count_as_cells() -> None:
    """--repeat auto plans more rounds after its pilot: those are cells of the matrix."""
    records = [r for r in variant_run() if r.status.value == "ok"][:3]
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False)
    with Reporter(console, total_cells=1) as reporter:
        reporter.cell_finished(records[0])
        reporter.add_cell(2)
        reporter.cell_finished(records[1])
        reporter.cell_finished(records[2])
    counts = [COUNTER.match(line) for line in _lines(out)]
    assert [(int(m[1]), int(m[2])) for m in counts if m] == [(1, 1), (2, 3), (3, 3)]
