"""`mpbench compare` given corrupt results, dangerous destinations, odd terminals: one line and
exit 2 for bad input, never a gate passed on a lie, never an input overwritten.

Every case is a real `python -m mpbench compare` over real files: the committed CPU run
(tests/compare/fixtures/cpu_run), copied and edited record by record.
"""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from adversary import assert_refused
from cli import run_mpbench

FIXTURE = Path(__file__).resolve().parents[1] / "compare" / "fixtures" / "cpu_run"
BF16 = "torch/mnist_dense/mixed_bfloat16/r0"  # line 6 of the fixture
BF16_LINE = 6
NO_SUMMARY = {"GITHUB_STEP_SUMMARY": ""}  # a test run inside Actions must not write there


def compare(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_mpbench("compare", *map(str, args), env={**NO_SUMMARY, **(env or {})}, timeout=120)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A copy of the committed run: results.jsonl, results.csv, environment.json."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def snapshot(*directories: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for d in directories for p in sorted(d.iterdir()) if p.is_file()}


def edit_record(run_dir: Path, cell_id: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit one record through its parsed JSON. Python's json writes NaN and Infinity as the
    tokens it also reads; a value "@@" followed by `::TEXT` is written as TEXT verbatim."""
    path = run_dir / "results.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        raw = json.loads(line)
        if raw["cell_id"] == cell_id:
            edit(raw)
            text = json.dumps(raw)
            lines[index] = re.sub(r'"@@::([^"]*)"', r"\1", text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def setting(dotted: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        *parents, last = dotted.split(".")
        for name in parents:
            raw = raw[name]
        raw[last] = value

    return edit


# --- 1. corrupt records never pass a gate --------------------------------------------------

MEDIAN = "step_time.median_s must be a finite number > 0"
SPEEDUP = ["--min-speedup", "bf16=100"]  # gates that a NaN or a negative time used to pass
DELTA = ["--max-accuracy-delta", "0.01"]


@pytest.mark.parametrize(
    ("edit", "gate", "fragment"),
    [
        (setting("step_time.median_s", float("nan")), SPEEDUP, f"{MEDIAN} or null, got NaN"),
        (setting("step_time.median_s", float("inf")), SPEEDUP, f"{MEDIAN} or null, got Infinity"),
        (setting("step_time.median_s", "@@::1e999"), SPEEDUP, f"{MEDIAN} or null, got Infinity"),
        (setting("step_time.median_s", -0.001), SPEEDUP, f"{MEDIAN} or null, got -0.001"),
        (setting("step_time.median_s", "fast"), [], f'{MEDIAN} or null, got "fast"'),
        (setting("step_time.raw_s", [0.001, None]), [], "step_time.raw_s[1] must be a finite"),
        (setting("config", "string"), [], 'config must be an object, got "string"'),
        (setting("schema_version", True), [], "unknown schema version true"),
        (setting("repeat", "zero"), [], 'repeat must be a whole number >= 0, got "zero"'),
        (setting("device", 3), [], "device must be an object, got 3"),
        (setting("accuracy.test_accuracy", "@@::NaN"), DELTA, "test_accuracy must be a finite"),
        (setting("accuracy.test_accuracy", 97.0), DELTA, "in [0, 1] or null, got 97.0"),
    ],
    ids=["nan", "infinity", "1e999", "negative", "fast", "null-in-raw_s", "config-string",
         "schema-version-true", "repeat-zero", "device-3", "accuracy-nan", "accuracy-percent"],
)  # fmt: skip
def test_a_corrupt_record_is_refused_naming_file_line_and_field(run, edit, gate, fragment):
    edit_record(run, BF16, edit)
    result = compare(run, *gate)
    assert_refused(result, f"{run / 'results.jsonl'} line {BF16_LINE}: ", fragment)


def test_a_corrupt_baseline_is_refused_before_any_gate(run, tmp_path):
    baseline = Path(shutil.copytree(FIXTURE, tmp_path / "baseline"))
    edit_record(baseline, BF16, setting("step_time.median_s", float("nan")))
    result = compare(run, "--baseline", baseline, "--max-slowdown", "1%")
    assert_refused(result, f"{baseline / 'results.jsonl'} line {BF16_LINE}: {MEDIAN}")


def test_bytes_that_are_not_utf8_are_refused(run):
    path = run / "results.jsonl"
    lines = path.read_bytes().splitlines()
    lines[BF16_LINE - 1] = lines[BF16_LINE - 1].replace(b"AMD EPYC", b"AMD \xff\xfe EPYC")
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert_refused(compare(run), f"results.jsonl line {BF16_LINE}: not UTF-8")


def test_two_different_records_of_one_repeat_name_both_places(run, tmp_path):
    other = Path(shutil.copytree(FIXTURE, tmp_path / "other"))
    edit_record(other, BF16, setting("hardware_fingerprint", "cpu-0000000000000000"))
    line = assert_refused(compare(run, other), "two different records")
    assert f"{run / 'results.jsonl'} line {BF16_LINE}" in line
    assert f"{other / 'results.jsonl'} line {BF16_LINE}" in line
    assert "differ in hardware_fingerprint" in line


def test_the_same_run_passed_twice_counts_once(run):
    twice = compare(run, run / "results.jsonl", "--format", "json")
    once = compare(run, "--format", "json")
    assert twice.returncode == once.returncode == 0, twice.stderr
    assert json.loads(twice.stdout)["cells"] == json.loads(once.stdout)["cells"]


# --- 2. a report never replaces an input ---------------------------------------------------


def _link(run: Path, kind: str, name: str) -> Path:
    link = run.parent / name
    if kind == "symlink":
        link.symlink_to(run / "results.jsonl")
    else:
        os.link(run / "results.jsonl", link)
    return link


@pytest.mark.parametrize(
    ("option", "target"),
    [
        ("--output", "results.jsonl"),
        ("--output", "results.csv"),
        ("--output", "environment.json"),
        ("--output", "symlink"),
        ("--output", "hardlink"),
        ("--plot", "symlink"),
    ],
)
def test_no_destination_may_be_an_input(run, tmp_path, option, target):
    if target in ("symlink", "hardlink"):
        path = _link(run, target, "report.png" if option == "--plot" else "report.md")
    else:
        path = run / target
    before = snapshot(run, tmp_path)
    result = compare(run, "--format", "markdown", option, path)
    assert_refused(result, f"{option} {path} would overwrite an input of this comparison")
    assert snapshot(run, tmp_path) == before


def test_the_baseline_is_an_input_too(run, tmp_path):
    baseline = Path(shutil.copytree(FIXTURE, tmp_path / "baseline"))
    before = snapshot(run, baseline)
    result = compare(run, "--baseline", baseline, "--output", baseline / "results.jsonl")
    assert_refused(result, "would overwrite an input")
    assert snapshot(run, baseline) == before


def test_output_and_plot_must_be_two_files(run, tmp_path):
    (tmp_path / "alias").symlink_to(tmp_path)
    result = compare(run, "--output", tmp_path / "r.png", "--plot", tmp_path / "alias" / "r.png")
    assert_refused(result, "--output and --plot name the same file")
    assert not (tmp_path / "r.png").exists()


# --- 3. destinations that cannot be written -------------------------------------------------


@pytest.mark.parametrize(
    ("option", "name", "fragment"),
    [
        ("--plot", "chart.gif", ".gif extension; name a file ending in .png, .svg, .pdf"),
        ("--plot", "chart", "no extension"),
        ("--plot", "folder.png", "is a directory"),
        ("--plot", "file.txt/chart.png", "file.txt is not a directory"),
        ("--output", "folder.png", "is a directory"),
        ("--output", "file.txt/report.md", "file.txt is not a directory"),
        ("--output", "file.txt/deeper/report.md", "file.txt is not a directory"),
    ],
)
def test_an_unwritable_destination_is_one_line(run, tmp_path, option, name, fragment):
    (tmp_path / "folder.png").mkdir()
    (tmp_path / "file.txt").write_text("keep me\n")
    before = snapshot(run, tmp_path)
    assert_refused(compare(run, option, tmp_path / name), option, fragment)
    assert snapshot(run, tmp_path) == before


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
@pytest.mark.parametrize("option", ["--output", "--plot"])
def test_a_read_only_folder_is_one_line(run, tmp_path, option):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert_refused(compare(run, option, locked / "r.png"), "Permission denied")
    finally:
        locked.chmod(0o700)


# --- 4. --min-speedup names what it accepts -------------------------------------------------

ACCEPTED = (
    "tf32, mixed_float16, mixed_bfloat16, float8, fp16, amp_fp16, bf16, amp_bf16, fp8, mixed_float8"
)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("all=1.5", "name one policy per limit"),
        ("auto=1.5", "name one policy per limit"),
        ("fp4=1.5", "unknown policy 'fp4'"),
        ("fp32=1.5", "measured against float32 itself"),
    ],
)
def test_min_speedup_lists_only_the_policies_it_accepts(run, spec, fragment):
    line = assert_refused(compare(run, "--min-speedup", spec), fragment, ACCEPTED)
    assert line.endswith(ACCEPTED) and "float32," not in line and "auto" not in line[-70:]


# --- 5. a terminal that is not UTF-8 ---------------------------------------------------------

ASCII_ENV = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["--format", "table"], 0, "(2.41-2.52)+"),
        (["--format", "markdown"], 0, "| 2.45x (2.41-2.52)+ |"),
        (["--format", "table", "--min-speedup", "fp16=1"], 1, "FAIL"),
        (["--format", "json", "--min-speedup", "fp16=1"], 1, '"speedup_vs_float32"'),
    ],
)
def test_an_ascii_stdout_gets_ascii(run, args, code, expected):
    result = compare(run, *args, env=ASCII_ENV)
    assert "Traceback" not in result.stderr and result.returncode == code, result.stderr
    assert result.stdout.isascii() and result.stderr.isascii()
    assert expected in result.stdout
    if code == 1 and args[1] == "json":  # failures on stderr, spelled too
        assert "speed-up vs float32 0.18x (minimum 1x)" in result.stderr


# --- 6. a step summary that cannot be written ------------------------------------------------


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("folder", "Is a directory"),
        ("file.txt/summary.md", "Not a directory"),
        ("missing/summary.md", "No such file or directory"),
    ],
)
def test_an_unwritable_step_summary_is_a_warning(run, tmp_path, name, why):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("keep me\n")
    summary = tmp_path / name
    result = compare(run, "--format", "markdown", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines() == [
        f"mpbench: warning: cannot append the step summary to {summary}: {why}"
    ]
    assert result.stdout.startswith("## mpbench compare")
    assert not (tmp_path / "missing").exists()


def test_a_step_summary_that_is_an_input_is_left_alone(run):
    before = snapshot(run)
    env = {"GITHUB_STEP_SUMMARY": str(run / "results.jsonl")}
    result = compare(run, "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    assert "it is an input of this comparison" in result.stderr
    assert snapshot(run) == before


# --- 7. a narrow terminal --------------------------------------------------------------------


def on_a_terminal(columns: int, *args: object) -> tuple[int, str]:
    """`mpbench compare ARGS` with stdout on a pseudo-terminal COLUMNS wide: what a user sees."""
    leader, follower = pty.openpty()
    env = {**os.environ, **NO_SUMMARY, "COLUMNS": str(columns), "NO_COLOR": "1"}
    child = subprocess.Popen(
        [sys.executable, "-m", "mpbench", "compare", *map(str, args)],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    code = child.wait(timeout=120)
    return code, re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", b"".join(chunks).decode("utf-8"))


@pytest.mark.parametrize("columns", [20, 80, 120])
def test_a_narrow_terminal_shows_every_speedup(run, columns):
    code, text = on_a_terminal(columns, run, "--min-speedup", "bf16=1.5")
    assert code == 0, text
    for speedup in ("2.45×", "2.14×", "2.46×", "2.22×"):  # each framework × workload's bf16
        assert speedup in text, text
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= columns
