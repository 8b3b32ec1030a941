"""Intervals, their labels, drift, end-to-end speed-up and MFU in every output format."""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

import pytest
from builders import cpu_run, record, write_run
from cli import run_mpbench
from compare_helpers import run_inprocess

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.plot.figure import _caption
from mpbench.results import CellRecord, Status, StepTimeStats

BF16 = "torch/mnist_dense/mixed_bfloat16"


def _outputs(run: Path, **options: object) -> dict[str, str]:
    """The report in every format, as a user would get it."""
    return {
        fmt: run_inprocess(run, format=fmt, **options)[1]
        for fmt in ("table", "markdown", "json", "csv")
    }


def _csv_row(text: str, cell: str) -> dict[str, str]:
    return next(r for r in csv.DictReader(io.StringIO(text)) if r["cell"] == cell)


def _json_cell(text: str, cell: str) -> dict:
    return next(c for c in json.loads(text)["cells"] if c["cell"] == cell)


def _three_repeats(bf16_failed_repeat: int | None = None) -> list[CellRecord]:
    """float32 and bf16 of torch/mnist_dense, 3 repeats each, interleaved in one run."""
    records = []
    for repeat, (f32, bf16) in enumerate([(2.40, 0.98), (2.52, 1.01), (2.31, 0.97)]):
        records.append(
            record("torch", "mnist_dense", "float32", median_ms=f32, accuracy=0.9712 - repeat / 1e3,
                   rss_mib=612, training_mib=48 + repeat, repeat=repeat)
        )  # fmt: skip
        if repeat == bf16_failed_repeat:
            records.append(
                record("torch", "mnist_dense", "mixed_bfloat16", status=Status.ERROR,
                       reason="RuntimeError: boom", repeat=repeat)
            )  # fmt: skip
            continue
        records.append(
            record("torch", "mnist_dense", "mixed_bfloat16", median_ms=bf16,
                   accuracy=0.9699 + repeat / 1e3, rss_mib=604, training_mib=31 - repeat,
                   repeat=repeat, end_to_end=0.9 + repeat / 100)
        )  # fmt: skip
    return records


def test_one_repeat_is_labelled_within_run_only_everywhere(cpu_run_dir: Path) -> None:
    out = _outputs(cpu_run_dir)
    assert "| 2.45× (2.41–2.52)† |" in out["markdown"]
    assert "(2.41–2.52)†" in out["table"]  # the table wraps cells: the interval on its own line
    for human in ("table", "markdown"):
        text = " ".join(out[human].split())
        assert "† within-run only: one repeat" in text
        assert "ignores process-to-process variance" in text
    speedup = _json_cell(out["json"], BF16)["speedup_vs_float32"]
    assert speedup["interval"]["kind"] == "within-run only" and speedup["interval"]["n"] == 1
    assert speedup["interval"]["low"] < speedup["value"] < speedup["interval"]["high"]
    row = _csv_row(out["csv"], BF16)
    assert row["speedup_vs_float32_interval"] == "within-run only"
    assert float(row["speedup_vs_float32_low"]) < float(row["speedup_vs_float32"])
    report = build_report(cpu_run(), CompareOptions())
    assert "within-run only" in _caption(report)


def test_three_repeats_give_repeat_intervals_and_no_within_run_label(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", _three_repeats())
    out = _outputs(run)
    for human in ("table", "markdown"):
        text = " ".join(out[human].split())
        assert "within-run only" not in text and "†" not in text
        assert "95 % interval over 3 repeats" in text
    cell = _json_cell(out["json"], BF16)
    for name in ("speedup_vs_float32", "memory_vs_float32", "accuracy_delta_pp_vs_float32"):
        assert cell[name]["interval"]["kind"] == "repeats", name
        assert cell[name]["interval"]["n"] == 3, name
    ratios = [2.40 / 0.98, 2.52 / 1.01, 2.31 / 0.97]
    # the median of the per-repeat ratios (docs/compare.md, "Combining repeats")
    assert cell["speedup_vs_float32"]["value"] == pytest.approx(statistics.median(ratios), rel=1e-6)
    row = _csv_row(out["csv"], BF16)
    assert row["speedup_vs_float32_interval"] == "repeats"
    assert row["accuracy_delta_pp_vs_float32_interval"] == "repeats"
    report = build_report(_three_repeats(), CompareOptions())
    assert "over 3 repeats" in _caption(report) and "within-run only" not in _caption(report)


def test_an_unpaired_repeat_is_left_out_and_said_so() -> None:
    report = build_report(_three_repeats(bf16_failed_repeat=1), CompareOptions())
    group = report.sections[0].groups[0]
    speedup = group.comparisons["mixed_bfloat16"].speedup
    assert speedup.n == 2 and speedup.kind == "repeats"
    assert speedup.value == pytest.approx(((2.40 / 0.98) * (2.31 / 0.97)) ** 0.5, rel=1e-6)
    (note,) = [n for n in report.notes if "left out of the ratios" in n]
    assert note.startswith(BF16) and "float32 r1 of 20260301-101500-cpu" in note


def _drifting(rec: CellRecord) -> None:
    raw = [0.0020] * 25 + [0.0026] * 25  # throttled half-way through
    rec.step_time = StepTimeStats.from_samples(raw, warmup_steps=5)


def test_a_drifting_cell_is_a_visible_warning_not_an_error(tmp_path: Path) -> None:
    records = cpu_run()
    for rec in records:
        if rec.cell_id.startswith(BF16):
            _drifting(rec)
    run = write_run(tmp_path / "run", records)
    out = _outputs(run)
    assert "| torch bf16 |" in out["markdown"] and "| ok, drift |" in out["markdown"]
    for human in ("table", "markdown"):
        text = " ".join(out[human].split())
        assert (
            f"drift: {BF16} (run 20260301-101500-cpu, repeat 0): timed steps drifted: "
            "first-half median 2.00 ms, second-half 2.60 ms"
        ) in text
    cell = _json_cell(out["json"], BF16)
    assert cell["drifting"] is True
    assert cell["drift"][0]["first_half_median_ms"] == pytest.approx(2.0)
    assert cell["drift"][0]["second_half_median_ms"] == pytest.approx(2.6)
    assert _csv_row(out["csv"], BF16)["drifting"] == "True"
    assert _csv_row(out["csv"], "torch/mnist_dense/float32")["drifting"] == "False"
    code, _ = run_inprocess(run, min_speedup={"mixed_bfloat16": 1.0})
    assert code == 0  # a warning, not a failure


def test_end_to_end_speedup_is_shown_next_to_the_step_speedup(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", _three_repeats())
    out = _outputs(run)
    header = next(line for line in out["markdown"].splitlines() if line.startswith("| cell"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns.index("e2e speed-up") == columns.index("speed-up") + 1
    # bf16's end-to-end rate is 90-92 % of its synced throughput; float32's 93 %
    ratios = [(2.40 / 0.98) * 0.90 / 0.93, (2.52 / 1.01) * 0.91 / 0.93, (2.31 / 0.97) * 0.92 / 0.93]
    expected = statistics.median(ratios)
    cell = _json_cell(out["json"], BF16)
    assert cell["end_to_end_speedup_vs_float32"]["value"] == pytest.approx(expected, rel=1e-6)
    assert cell["end_to_end_speedup_vs_float32"]["interval"]["kind"] == "repeats"
    assert cell["end_to_end_input_pipeline"] == "preloaded tensors, shuffled index batches"
    row = _csv_row(out["csv"], BF16)
    assert float(row["end_to_end_speedup_vs_float32"]) == pytest.approx(expected, rel=1e-6)
    # one repeat: the point ratio, no interval
    _, text = run_inprocess(write_run(tmp_path / "one", cpu_run()), format="json")
    single = _json_cell(text, BF16)
    assert single["end_to_end_speedup_vs_float32"]["interval"] is None


def test_old_records_without_new_fields_show_no_new_columns(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", cpu_run(v1=True))
    code, out = run_inprocess(run, format="markdown")
    assert code == 0
    assert "e2e speed-up" not in out and "MFU" not in out
    assert "peak mem (host RSS, whole process)" in out and "training mem" not in out
    cell = _json_cell(run_inprocess(run, format="json")[1], BF16)
    assert cell["memory_kind"] == "peak mem (host RSS, whole process)"
    assert cell["training_memory"] is False
    assert cell["memory_vs_float32"]["value"] == pytest.approx(604 / 612, rel=1e-6)


def test_mfu_columns_appear_when_a_cell_has_them(tmp_path: Path) -> None:
    records = cpu_run()
    for rec in records:
        if rec.status is Status.OK:
            rec.achieved_tflops, rec.mfu = 0.5, 0.125
            if rec.framework == "torch":
                rec.measured_peak_tflops, rec.mfu_measured = 2.0, 0.25
    run = write_run(tmp_path / "run", records)
    out = _outputs(run)
    assert "| MFU | MFU meas. |" in out["markdown"]
    assert "MFU meas.: against the matmul peak measured on this device" in out["markdown"]
    assert "12.5 %" in out["markdown"] and "25.0 %" in out["markdown"]
    cell = _json_cell(out["json"], BF16)
    assert (cell["mfu"], cell["mfu_measured"], cell["measured_peak_tflops"]) == (0.125, 0.25, 2.0)
    row = _csv_row(out["csv"], "tensorflow/mnist_dense/mixed_bfloat16")
    assert row["mfu"] == "0.125" and row["mfu_measured"] == ""


def test_require_conclusive_on_the_command_line(tmp_path: Path) -> None:
    base = [r for r in _three_repeats() if r.policy == "float32"]
    for rec, median in zip(base, [2.0, 2.2, 2.7], strict=True):
        rec.step_time = StepTimeStats.from_samples(
            [t * median / 1000 / rec.step_time.median_s for t in rec.step_time.raw_s], 5
        )
        rec.run_id = "base"
    cand = [r for r in _three_repeats() if r.policy == "float32"]
    for rec, median in zip(cand, [2.5, 2.55, 2.6], strict=True):
        rec.step_time = StepTimeStats.from_samples(
            [t * median / 1000 / rec.step_time.median_s for t in rec.step_time.raw_s], 5
        )
    baseline, run = write_run(tmp_path / "base", base), write_run(tmp_path / "run", cand)
    lenient = run_mpbench("compare", run, "--baseline", baseline, "--max-slowdown", "10%")
    assert lenient.returncode == 0, lenient.stderr
    assert "inconclusive — add repeats" in " ".join(lenient.stdout.split())
    strict = run_mpbench(
        "compare", run, "--baseline", baseline, "--max-slowdown", "10%", "--require-conclusive"
    )
    assert strict.returncode == 1
    assert "FAIL" in strict.stdout and "--require-conclusive" in strict.stdout


def test_training_memory_that_did_not_grow_gives_a_plain_ratio_not_a_crash(tmp_path: Path) -> None:
    """Sampled RSS can show no growth at all (TensorFlow reusing its pool): a zero has no
    logarithm, so the memory ratio is the ratio of the means, without an interval."""
    records = []
    for repeat, bf16_mib in enumerate([0.0, 2.0, 0.0]):
        records.append(
            record("torch", "mnist_dense", "float32", median_ms=2.4, accuracy=0.97,
                   rss_mib=612, training_mib=4.0, repeat=repeat)
        )  # fmt: skip
        records.append(
            record("torch", "mnist_dense", "mixed_bfloat16", median_ms=1.0, accuracy=0.97,
                   rss_mib=604, training_mib=bf16_mib, repeat=repeat)
        )  # fmt: skip
    run = write_run(tmp_path / "run", records)
    out = _outputs(run)
    ratio = _json_cell(out["json"], BF16)["memory_vs_float32"]
    assert ratio["value"] == pytest.approx((2.0 / 3) / 4.0)
    assert ratio["interval"] is None
    assert "0.17×" in out["table"]
