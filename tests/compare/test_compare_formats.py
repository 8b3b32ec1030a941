"""Every output format, read back the way its consumer reads it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from builders import cpu_run, record, slower, write_run
from compare_helpers import FIXTURES, run_inprocess
from make_fixtures import GATE_ARGS

from mpbench.compare import CompareOptions, build_report, render
from mpbench.compare.render.terminal import print_report
from mpbench.compare.summary import fmt
from mpbench.results import Status
from mpbench.results.stats import log_ratio_interval

EXPECTED = FIXTURES / "expected"


def _gate_options(baseline: Path) -> dict:
    """GATE_ARGS (what the golden file was made with) as CompareOptions fields."""
    assert GATE_ARGS == [
        "--max-slowdown", "10%", "--max-memory-increase", "10%", "--max-accuracy-drop", "0.5",
        "--min-speedup", "bf16=1.5", "--max-accuracy-delta", "1.0",
    ]  # fmt: skip
    return {
        "baseline": baseline,
        "max_slowdown": 0.10,
        "max_memory_increase": 0.10,
        "max_accuracy_drop_pp": 0.5,
        "min_speedup": {"mixed_bfloat16": 1.5},
        "max_accuracy_delta_pp": 1.0,
    }


def test_markdown_matches_the_expected_file(cpu_run_dir: Path) -> None:
    code, out = run_inprocess(cpu_run_dir, format="markdown")
    assert code == 0
    assert out == (EXPECTED / "cpu_run.md").read_text(encoding="utf-8")


def test_markdown_with_gates_matches_the_expected_file(cpu_run_dir: Path, baseline_dir) -> None:
    code, out = run_inprocess(cpu_run_dir, format="markdown", **_gate_options(baseline_dir))
    assert code == 1
    assert out == (EXPECTED / "cpu_run_vs_baseline.md").read_text(encoding="utf-8")


def test_markdown_tables_are_well_formed(cpu_run_dir: Path) -> None:
    _, out = run_inprocess(cpu_run_dir, format="markdown")
    tables = [line for line in out.splitlines() if line.startswith("|")]
    widths = {line.count(" | ") for line in tables}
    assert len(widths) == 1  # every row has as many cells as its header
    # Reasons are numbered footnotes, so a long one never widens a column.
    assert "| torch tf32 |" in out and "| skipped [1] |" in out
    assert "[1] tf32 is unsupported on AMD EPYC: TF32 is an NVIDIA GPU" in out
    assert "| tf fp16 |" in out and "| timeout [2] |" in out and "[2] cell exceeded" in out


def test_markdown_escapes_pipes_in_reasons(tmp_path: Path) -> None:
    rec = record("torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=10)
    bad = record("torch", "mnist_dense", "mixed_float16", status=Status.ERROR, reason="a | b")
    write_run(tmp_path, [rec, bad])
    _, out = run_inprocess(tmp_path, format="markdown")
    assert "| error [1] |" in out and "[1] a \\| b" in out


def test_json_parses_and_carries_cells_gates_and_verdict(cpu_run_dir, baseline_dir) -> None:
    code, out = run_inprocess(cpu_run_dir, format="json", **_gate_options(baseline_dir))
    data = json.loads(out)
    assert code == data["exit_code"] == 1
    assert data["schema"] == "mpbench-compare/2"
    assert len(data["cells"]) == 16
    bf16 = next(c for c in data["cells"] if c["cell"] == "torch/mnist_dense/mixed_bfloat16")
    assert bf16["speedup_vs_float32"]["value"] == pytest.approx(2.40 / 0.98)
    assert bf16["speedup_vs_float32"]["interval"]["kind"] == "within-run only"
    assert bf16["step_time_ms"]["value"] == pytest.approx(0.98)
    assert bf16["memory_kind"] == "training mem (process RSS sampled)"
    assert bf16["training_memory"] is True
    assert bf16["config"]["units"] == 64 and "seed" not in bf16["config"]
    skipped = next(c for c in data["cells"] if c["cell"] == "torch/mnist_dense/tf32")
    assert skipped["status"] == "skipped" and skipped["step_time_ms"] is None
    failed = [g for g in data["gates"] if not g["passed"]]
    assert {(g["gate"], g["cell"]) for g in failed} == {
        ("max-slowdown", "torch/mnist_dense/float32"),
        ("max-accuracy-delta", "tensorflow/cifar10_cnn/mixed_float16"),
    }
    assert data["thresholds"]["min_speedup"] == {"mixed_bfloat16": 1.5}


def test_csv_loads_in_pandas_one_row_per_cell(cpu_run_dir: Path, baseline_dir: Path) -> None:
    _, out = run_inprocess(cpu_run_dir, format="csv", **_gate_options(baseline_dir))
    frame = pd.read_csv(io.StringIO(out))
    assert len(frame) == 16
    row = frame[(frame.cell == "torch/mnist_dense/float32")].iloc[0]
    assert row.step_time_median_ms == pytest.approx(2.40)
    assert row.baseline_step_time_median_ms == pytest.approx(2.00)
    assert row.step_time_change_pct == pytest.approx(20.0)
    assert row.failed_gates == "max-slowdown"
    tf32 = frame[frame.cell == "torch/mnist_dense/tf32"].iloc[0]
    assert tf32.status == "skipped" and pd.isna(tf32.step_time_median_ms)
    assert json.loads(tf32.config)["batch_size"] == 128


def test_csv_without_baseline_has_no_baseline_columns(cpu_run_dir: Path) -> None:
    _, out = run_inprocess(cpu_run_dir, format="csv")
    header = next(csv.reader(io.StringIO(out)))
    assert "cell" in header and not any(h.startswith("baseline_") for h in header)


def test_benchmark_action_is_a_custom_smaller_is_better_list(cpu_run_dir: Path) -> None:
    _, out = run_inprocess(cpu_run_dir, format="benchmark-action")
    entries = json.loads(out)
    assert isinstance(entries, list) and entries
    for entry in entries:
        assert set(entry) <= {"name", "unit", "value", "range", "extra"}
        assert isinstance(entry["name"], str) and isinstance(entry["unit"], str)
        assert isinstance(entry["value"], (int, float)) and entry["value"] >= 0
        assert isinstance(entry.get("range", ""), str) and isinstance(entry.get("extra", ""), str)
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names))  # a dashboard keys its series by name
    by_name = {e["name"]: e for e in entries}
    step = by_name["torch/mnist_dense/mixed_bfloat16: step time"]
    assert step["unit"] == "ms" and step["value"] == pytest.approx(0.98)
    assert step["range"].startswith("± ")
    ratio = by_name["torch/mnist_dense/mixed_bfloat16: step time vs float32"]
    assert ratio["value"] == pytest.approx(0.98 / 2.40, rel=1e-5)  # smaller is better
    error = by_name["torch/mnist_dense/mixed_bfloat16: test error"]
    assert error["unit"] == "%" and error["value"] == pytest.approx(3.01)
    assert not any("tf32" in n for n in names)  # skipped cells have no numbers to chart


def test_table_output_shows_every_cell_and_the_memory_kind(cpu_run_dir: Path) -> None:
    code, out = run_inprocess(cpu_run_dir)
    assert code == 0
    assert "train mem: training mem (process RSS sampled)" in out  # said once, under the table
    assert "skipped [1]" in out and "timeout [2]" in out and "torch bf16" in out
    assert "\x1b[" not in out  # not a terminal: no colour codes


def test_table_on_a_terminal_uses_colour() -> None:
    from rich.console import Console

    report = build_report(cpu_run(), CompareOptions(min_speedup={"mixed_float16": 1.0}))
    buffer = io.StringIO()
    print_report(report, Console(file=buffer, force_terminal=True, width=220))
    assert "\x1b[" in buffer.getvalue() and "FAIL" in buffer.getvalue()


def test_output_file_and_step_summary(tmp_path: Path, cpu_run_dir, monkeypatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out_file = tmp_path / "reports" / "compare.json"
    code, printed = run_inprocess(cpu_run_dir, format="json", output=out_file)
    assert code == 0 and printed == ""
    assert json.loads(out_file.read_text(encoding="utf-8"))["cells"]
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n## mpbench compare")  # appended, not replaced
    assert "| torch bf16 |" in text


def test_step_interval_column_appears_only_with_repeats(tmp_path: Path) -> None:
    records = [
        record("torch", "mnist_dense", "float32", median_ms=m, accuracy=0.97, rss_mib=600, repeat=i)
        for i, m in enumerate([2.0, 2.3, 2.6])
    ]
    write_run(tmp_path, records)
    _, out = run_inprocess(tmp_path, format="markdown")
    _, low, high = log_ratio_interval([0.0020, 0.0023, 0.0026])
    interval = f"{fmt.ms(low)}–{fmt.ms(high)} (n=3)"
    assert "step ms 95 %" in out and interval in out and "ok ×3" in out
    report = build_report(slower(cpu_run(), 1.0), CompareOptions())
    assert "step ms 95 %" not in render(report, "markdown", terminal=False)


def test_table_prints_brackets_in_reasons_as_text(tmp_path: Path) -> None:
    ok = record("torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=10)
    bad = record(
        "torch", "mnist_dense", "mixed_float16", status=Status.ERROR,
        reason="OSError: [Errno 28] No space left on device",
    )  # fmt: skip
    write_run(tmp_path, [ok, bad])
    _, out = run_inprocess(tmp_path)
    assert "[Errno 28]" in " ".join(out.split())
    assert "[cpu-3f9a1c07]" in out  # the fingerprint in the section title


def test_run_summary_prints_the_tables_of_a_finished_run() -> None:
    from rich.console import Console

    from mpbench.compare import print_run_summary

    buffer = io.StringIO()
    print_run_summary(cpu_run(), Console(file=buffer, width=220, no_color=True))
    text = buffer.getvalue()
    assert "mnist_dense on cpu: AMD EPYC" in text and "cifar10_cnn on cpu: AMD EPYC" in text
    assert "2.45×" in text  # torch bf16 speed-up on mnist_dense
    assert "Gates" not in text and "mpbench compare" not in text
    empty = io.StringIO()
    print_run_summary([], Console(file=empty))
    assert empty.getvalue() == ""


def test_run_compare_takes_options_as_keywords(cpu_run_dir: Path, tmp_path: Path) -> None:
    from mpbench.compare import run_compare

    out = tmp_path / "report.json"
    code = run_compare([cpu_run_dir], format="json", output=out, min_speedup={"mixed_float16": 1})
    assert code == 1
    assert json.loads(out.read_text(encoding="utf-8"))["exit_code"] == 1
