"""The running cell's line (runner/progress.py) on a terminal: its phase (loading data,
warm-up, timing, end-to-end window, evaluating), step N of total, elapsed time and an ETA
from the rate its steps arrive at, live while the cell runs; nothing of it in a pipe or a
CI log, which keeps one plain line per finished cell. Also the cell's side of it: the phase
events, and step events at most every 0.2 s (launchers/cell.py's Events)."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import record, tiny_toml
from cli import run_mpbench
from frameworks import needs_torch
from rich.console import Console

from mpbench.runner.launchers import cell as cell_module
from mpbench.runner.launchers.cell import Events
from mpbench.runner.progress import Reporter

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CELL = "torch/mnist_dense/float32/r0"

# What the runner heard from a real cell (torch's mnist_dense, float32, 8 steps of which 2
# warm up, then a 6-step end-to-end window; run_in_child's on_phase and on_step, in order),
# each event with the seconds since the cell started at which it is fed here.
EVENTS: list[tuple[float, str, object]] = [
    (1.5, "phase", ("loading data", {})),
    (1.8, "phase", ("building", {})),
    (2.0, "phase", ("training", {"warmup": 2, "timed": 8, "total": 14})),
    (3.0, "step", (1, 14)),
    (3.5, "step", (3, 14)),
    (4.0, "step", (5, 14)),
    (4.5, "step", (7, 14)),
    (4.75, "step", (8, 14)),
    (4.8, "phase", ("end-to-end", {})),
    (5.0, "step", (9, 14)),
    (5.2, "step", (11, 14)),
    (5.4, "step", (13, 14)),
    (5.5, "step", (14, 14)),
    (5.6, "phase", ("evaluating", {})),
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def last_frame(out: io.StringIO) -> list[str]:
    """The lines of the live display as rich last drew it: every frame starts with a
    carriage return (its cursor moves back over the one before)."""
    text = ANSI.sub("", out.getvalue())
    return [line.rstrip() for line in text.split("\r")[-1].splitlines() if line.strip()]


def cell_line(reporter: Reporter, out: io.StringIO) -> str | None:
    reporter._progress.refresh()  # what rich's own thread does 10 times a second
    lines = [line for line in last_frame(out) if CELL in line]
    return lines[-1].strip() if lines else None


def test_the_cell_line_says_phase_step_elapsed_and_eta() -> None:
    clock = Clock()
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    seen: dict[float, str | None] = {}
    with Reporter(console, total_cells=2, clock=clock) as reporter:
        started = clock.now
        reporter.cell_started(CELL)
        clock.now = started + 1.0
        seen[1.0] = cell_line(reporter, out)
        for at, kind, payload in EVENTS:
            clock.now = started + at
            if kind == "phase":
                reporter.phase(*payload)
            else:
                reporter.step(*payload)
            seen[at] = cell_line(reporter, out)
        clock.now = started + 65.0  # a long evaluation: its clock runs on
        seen[65.0] = cell_line(reporter, out)
        reporter.cell_finished(record("torch", "mnist_dense", "float32", median_ms=2.0))
        gone = cell_line(reporter, out)
    assert seen[1.0].startswith(f"{CELL}: starting ") and seen[1.0].endswith(" 0:00:01")
    assert "step" not in seen[1.0] and "ETA" not in seen[1.0]  # nothing to count yet
    assert seen[1.5].startswith(f"{CELL}: loading data ") and seen[1.5].endswith(" 0:00:01")
    assert seen[1.8].startswith(f"{CELL}: building the model ")
    # The plan came with the training phase: 0 of 14 steps, no rate yet.
    assert seen[2.0].endswith("step 0/14 0:00:02 ETA -:--:--")
    assert seen[3.0].startswith(f"{CELL}: warm-up ")
    assert seen[3.0].endswith("step 1/14 0:00:03 ETA -:--:--")  # one step: no rate yet
    # 2 steps in 0.5 s since the first event: 4 steps a second, 11 steps left.
    assert seen[3.5].startswith(f"{CELL}: timing ")  # step 3: past the 2 warm-up steps
    assert seen[3.5].endswith("step 3/14 0:00:03 ETA 0:00:02")
    assert seen[4.75].endswith("step 8/14 0:00:04 ETA 0:00:01")
    assert seen[4.8].startswith(f"{CELL}: end-to-end window ")
    assert seen[4.8].endswith("step 8/14 0:00:04 ETA -:--:--")  # a rate of its own
    assert seen[5.5].endswith("step 14/14 0:00:05 ETA 0:00:00")
    assert seen[5.6].startswith(f"{CELL}: evaluating ")
    assert seen[5.6].endswith("step 14/14 0:00:05")  # no ETA: no steps left to count
    assert seen[65.0].endswith("step 14/14 0:01:05")
    assert gone is None  # the finished cell's line went with it
    lines = ANSI.sub("", out.getvalue()).replace("\r", "\n").splitlines()
    assert any(line.startswith(f"[1/2] {CELL}: ok median step") for line in lines)


def test_the_eta_counts_down_between_step_events_and_never_below_zero() -> None:
    clock = Clock()
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system=None)
    with Reporter(console, total_cells=1, clock=clock) as reporter:
        reporter.cell_started(CELL)
        reporter.phase("training", {"warmup": 0, "timed": 100, "total": 100})
        for step in range(1, 11):  # a step every 2 s
            clock.now += 2.0
            reporter.step(step, 100)
        assert cell_line(reporter, out).endswith("step 10/100 0:00:20 ETA 0:03:00")
        clock.now += 30.0  # no event for 30 s: the estimate runs down meanwhile
        assert cell_line(reporter, out).endswith("step 10/100 0:00:50 ETA 0:02:30")
        clock.now += 600.0
        assert cell_line(reporter, out).endswith("ETA 0:00:00")


@pytest.mark.parametrize("columns", [80, 60])
def test_a_narrow_terminal_keeps_the_cell_on_one_line(columns: int) -> None:
    """The bar goes first, then the start of the cell id: the phase and figures stay."""
    clock = Clock()
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=columns, color_system=None)
    long_id = "tensorflow/cifar10_cnn/mixed_bfloat16@ls1e+30~fallback-float32/r2"
    with Reporter(console, total_cells=1, clock=clock) as reporter:
        reporter.cell_started(long_id)
        reporter.phase("training", {"warmup": 5, "timed": 390, "total": 775})
        clock.now += 3
        reporter.step(120, 775)
        reporter._progress.refresh()
        frame = last_frame(out)
    (line,) = [line for line in frame if "step" in line]
    assert len(line) <= columns
    assert line.endswith(": timing step 120/775 0:00:03 ETA -:--:--")
    assert line.startswith("  …") and "float32/r2: timing" in line  # its start cut


def test_a_terminal_less_console_draws_no_cell_line() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=120)
    with Reporter(console, total_cells=1) as reporter:
        reporter.cell_started(CELL)
        for _, kind, payload in EVENTS:
            getattr(reporter, "phase" if kind == "phase" else "step")(*payload)
        reporter.cell_finished(record("torch", "mnist_dense", "float32", median_ms=2.0))
    (line,) = out.getvalue().splitlines()  # the finished cell's, and nothing before it
    assert line.startswith(f"[1/1] {CELL}: ok median step 2.00 ms")


# --- the cell's side ------------------------------------------------------------------------


def test_the_cell_sends_a_step_at_most_every_fifth_of_a_second(monkeypatch) -> None:
    """Steps 1/32 s apart: one event every 7 steps (0.22 s), the last step always, and a
    phase sends the step it held back first, so the display never shows a stale count
    through the phase."""
    now = [1000.0]
    monkeypatch.setattr(cell_module.time, "monotonic", lambda: now[0])
    read_fd, write_fd = os.pipe()
    events = Events(write_fd)
    events.phase("training", warmup=5, timed=49, total=100)
    for step in range(1, 101):
        if step == 50:
            events.phase("end-to-end")
        now[0] += 1 / 32
        events(step, 100)  # what a backend calls after each step's clock read
    events._stream.close()
    with os.fdopen(read_fd, "rb") as stream:
        sent = [json.loads(line) for line in stream]
    assert sent[0] == {
        "event": "phase",
        "phase": "training",
        "warmup": 5,
        "timed": 49,
        "total": 100,
    }
    steps = [e["step"] for e in sent if e["event"] == "step"]
    assert steps == [1, 8, 15, 22, 29, 36, 43, 49, 50, 57, 64, 71, 78, 85, 92, 99, 100]
    held = sent.index({"event": "phase", "phase": "end-to-end"}) - 1
    assert sent[held] == {"event": "step", "step": 49, "total": 100}  # sent before the phase


# --- real runs ------------------------------------------------------------------------------

# cifar10_cnn's tiny table, a few more steps: a training phase of a fraction of a second at
# least, which the display (10 frames a second) cannot miss.
TINY = tiny_toml(cifar10_cnn={"max_steps": 12, "synthetic_train_size": 1024})
RUN = ["--framework", "torch", "--workload", "cifar10_cnn", "--policy", "float32"]
TINY_CELL = "torch/cifar10_cnn/float32/r0"
LIVE = re.compile(
    rf"{re.escape(TINY_CELL)}: (warm-up|timing|end-to-end window|evaluating) .*"
    r"step (\d+)/(\d+) \d:\d\d:\d\d"
)


def run_args(tmp_path: Path) -> list[str]:
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "run"
    return ["run", "--config", str(config), *RUN, "--device", "cpu", "--repeat", "1", "--out", out]


def on_a_terminal(args: list[object], columns: int = 160) -> tuple[int, list[tuple[float, str]]]:
    """`python -m mpbench ARGS` with stdout and stderr on a pseudo-terminal: each line it
    drew (frames split at their carriage returns, escape codes removed), with when."""
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"}
    for key in ("NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "GITHUB_STEP_SUMMARY"):
        env.pop(key, None)
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "mpbench", *map(str, args)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen: list[tuple[float, str]] = []
    partial = ""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 300)
            if not ready:
                child.kill()
                raise AssertionError("no output from mpbench run for 300 s")
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed its end
                break
            if not chunk:
                break
            text = partial + ANSI.sub("", chunk.decode("utf-8", "replace"))
            *lines, partial = re.split(r"[\r\n]", text)
            when = time.monotonic() - started
            seen += [(when, line.strip()) for line in lines if line.strip()]
    finally:
        os.close(leader)
    return child.wait(timeout=60), seen


@needs_torch
def test_a_run_on_a_terminal_shows_the_cell_line_while_the_cell_runs(tmp_path: Path) -> None:
    code, seen = on_a_terminal(run_args(tmp_path))
    lines = [line for _, line in seen]
    assert code == 0, "\n".join(lines)
    finished = next(i for i, line in enumerate(lines) if line.startswith(f"[1/1] {TINY_CELL}"))
    before = lines[:finished]
    # The cell's line is up before its steps: "starting", or, where a warm server forks the cell
    # faster than the terminal's next refresh, already its next phase ("loading data"; a clean
    # clone's CI saw that once). How "starting" reads is held by the clocked test above.
    first = next((line for line in before if line.startswith(f"{TINY_CELL}: ")), "")
    assert first.startswith((f"{TINY_CELL}: starting", f"{TINY_CELL}: loading data")), before
    live = [LIVE.search(line) for line in before]
    live = [match for match in live if match]
    assert live, "\n".join(before)  # a phase with its step count, while the cell ran
    totals = {int(match[3]) for match in live}
    assert len(totals) == 1  # the cell's steps: 12 timed, then its end-to-end window
    assert lines[finished].startswith(f"[1/1] {TINY_CELL}: ok median step")
    after = lines[finished + 1 :]
    assert not any(LIVE.search(line) for line in after)  # the cell line went with it


@needs_torch
def test_a_run_in_a_pipe_prints_no_progress_inside_a_cell(tmp_path: Path) -> None:
    """A pipe or CI log: the run's header, one line for the finished cell, the summary."""
    result = run_mpbench(*run_args(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "\r" not in result.stdout and "\x1b[" not in result.stdout
    assert [line for line in lines if TINY_CELL in line] == [
        line for line in lines if line.startswith(f"[1/1] {TINY_CELL}: ok median step")
    ]
    for text in (result.stdout, result.stderr):
        assert not re.search(r"step \d+/\d+", text)
        for phase in ("starting", "loading data", "warm-up", "timing", "evaluating"):
            assert f": {phase}" not in text
