"""`python -m mpbench compare` as a user and CI run it: exit codes 0, 1 and 2, files written."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from builders import OTHER_CPU, OTHER_FINGERPRINT, cpu_run, write_run
from cli import run_mpbench

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _one_line_error(outcome: subprocess.CompletedProcess[str], *expected: str) -> None:
    """Exit 2, one line on stderr naming the problem, no traceback."""
    assert outcome.returncode == 2, outcome
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, outcome.stderr
    assert lines[0].startswith("mpbench: error: ")
    assert "Traceback" not in outcome.stderr
    for text in expected:
        assert text in lines[0], lines[0]


def test_a_run_against_itself_is_one_line_and_exit_2(cpu_run_dir: Path) -> None:
    # It passed, +0.0 % whatever the run measured (issue 55): a run is never its own baseline.
    outcome = run_mpbench(
        "compare", cpu_run_dir, "--baseline", cpu_run_dir, "--max-slowdown", "10%"
    )
    assert outcome.returncode == 2, outcome.stdout
    assert outcome.stderr.strip() == (
        f"mpbench: error: --baseline {cpu_run_dir} holds only 20260301-101500-cpu, the run "
        "compared: nothing to compare against"
    )
    assert "PASS" not in outcome.stdout


def test_a_slower_float32_exits_1_and_names_the_cell(cpu_run_dir, baseline_dir) -> None:
    outcome = run_mpbench(
        "compare", cpu_run_dir, "--baseline", baseline_dir, "--max-slowdown", "10%"
    )
    assert outcome.returncode == 1
    assert "torch/mnist_dense/float32" in outcome.stdout
    assert "+20.0 %" in outcome.stdout
    assert "FAIL: 1 of" in outcome.stdout


def test_machine_readable_output_still_lists_failures_on_stderr(cpu_run_dir, baseline_dir):
    outcome = run_mpbench(
        "compare",
        cpu_run_dir,
        "--baseline",
        baseline_dir,
        "--max-slowdown",
        "0.1",
        "--format",
        "json",
    )
    assert outcome.returncode == 1
    assert json.loads(outcome.stdout)["exit_code"] == 1
    assert outcome.stderr.splitlines()[0].startswith("FAIL max-slowdown torch/mnist_dense/float32")


def test_ratio_gates_on_this_cpu(cpu_run_dir: Path) -> None:
    assert (
        run_mpbench("compare", cpu_run_dir, "--min-speedup", "mixed_bfloat16=1.5").returncode == 0
    )
    fp16 = run_mpbench("compare", cpu_run_dir, "--min-speedup", "mixed_float16=1.0")
    assert fp16.returncode == 1
    assert "torch/mnist_dense/mixed_float16" in fp16.stdout


def test_truncated_file_exits_2(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", cpu_run())
    data = (run / "results.jsonl").read_bytes()
    (run / "results.jsonl").write_bytes(data[: len(data) - 200])  # killed mid-write
    _one_line_error(run_mpbench("compare", run), "results.jsonl line 16: not valid JSON")


def test_unknown_schema_version_exits_2(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", cpu_run())
    lines = (run / "results.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["schema_version"] = 99
    lines[0] = json.dumps(first)
    (run / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    _one_line_error(run_mpbench("compare", run), "unknown schema version 99")


def test_missing_file_exits_2(tmp_path: Path) -> None:
    _one_line_error(run_mpbench("compare", tmp_path / "nowhere"), "no such results file")


def test_missing_baseline_exits_2(cpu_run_dir: Path, tmp_path: Path) -> None:
    outcome = run_mpbench(
        "compare", cpu_run_dir, "--baseline", tmp_path / "gone.jsonl", "--max-slowdown", "5%"
    )
    _one_line_error(outcome, "gone.jsonl: no such results file")


def test_nothing_comparable_exits_2(cpu_run_dir: Path, tmp_path: Path) -> None:
    records = cpu_run("bigger")
    for rec in records:
        rec.config["batch_size"] = 512
    other = write_run(tmp_path / "other", records)
    outcome = run_mpbench("compare", cpu_run_dir, "--baseline", other, "--max-slowdown", "10%")
    _one_line_error(outcome, "nothing comparable")


def test_different_hardware_exits_2_unless_allowed(cpu_run_dir: Path, tmp_path: Path) -> None:
    other = write_run(
        tmp_path / "other", cpu_run("xeon", fingerprint=OTHER_FINGERPRINT, device=OTHER_CPU)
    )
    outcome = run_mpbench("compare", cpu_run_dir, "--baseline", other, "--max-slowdown", "10%")
    _one_line_error(outcome, "different hardware", "Intel Xeon Platinum 8488C", "AMD EPYC")
    allowed = run_mpbench(
        "compare",
        cpu_run_dir,
        "--baseline",
        other,
        "--max-slowdown",
        "10%",
        "--allow-different-hardware",
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "different hardware, compared anyway" in allowed.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-slowdown", "10"], "--max-slowdown '10' is ambiguous"),
        (["--min-speedup", "fp4=2"], "unknown policy 'fp4'"),
        (["--format", "pdf"], "unknown format 'pdf'"),
        (["--max-slowdown", "10%"], "need --baseline"),
    ],
)
def test_bad_options_exit_2(cpu_run_dir: Path, args: list[str], message: str) -> None:
    _one_line_error(run_mpbench("compare", cpu_run_dir, *args), message)


def test_without_paths_the_latest_run_is_compared(tmp_path: Path) -> None:
    results = tmp_path / "results"
    old = write_run(results / "old", cpu_run("old-run"))
    write_run(results / "new", cpu_run("new-run"))
    (results / "baselines" / "main").mkdir(parents=True)  # not a run: ignored
    past = time.time() - 3600
    os.utime(old / "results.jsonl", (past, past))
    outcome = run_mpbench("compare", "--format", "json", cwd=tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    assert json.loads(outcome.stdout)["runs"] == ["new-run"]
    elsewhere = run_mpbench(
        "compare", "--results-dir", results, "--format", "json", cwd=results.parent.parent
    )
    assert json.loads(elsewhere.stdout)["runs"] == ["new-run"]


def test_without_paths_and_without_runs_exits_2(tmp_path: Path) -> None:
    _one_line_error(run_mpbench("compare", cwd=tmp_path), "no results to compare", "mpbench run")


def test_plot_is_written_as_png(cpu_run_dir: Path, tmp_path: Path) -> None:
    plot = tmp_path / "plots" / "compare.png"
    outcome = run_mpbench("compare", cpu_run_dir, "--plot", plot, "--format", "markdown")
    assert outcome.returncode == 0, outcome.stderr
    assert plot.read_bytes()[:8] == PNG_MAGIC
    assert plot.stat().st_size > 20_000  # three panels per workload, not an empty canvas


def test_output_file_gets_the_report(cpu_run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "compare.md"
    outcome = run_mpbench("compare", cpu_run_dir, "--format", "markdown", "--output", out)
    assert outcome.returncode == 0 and outcome.stdout == ""
    assert out.read_text(encoding="utf-8").startswith("## mpbench compare")
