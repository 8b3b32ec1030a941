"""Verdicts that give their reasons: accuracy judged by its interval at a margin, a speed-up
ceiling that cannot misfire on a slow policy, and what limited a step when a policy gains
nothing (docs/compare.md, "Accuracy", "Why a policy gains nothing")."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from builders import cpu_run, record, write_run

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.csv_report import render_csv
from mpbench.compare.render.tables import section_table
from mpbench.compare.summary.accuracy import (
    INCONCLUSIVE,
    NO_WORSE,
    WORSE,
    judge,
    repeats_to_decide,
    within,
)
from mpbench.compare.summary.estimate import REPEATS, Estimate
from mpbench.compare.summary.verdict import AVOID, CAREFUL, RECOMMENDED, UNDECIDED
from mpbench.results import CellRecord, DeviceInfo
from mpbench.results.schema import BottleneckStats, EnergyStats, TelemetryStats

# --- the accuracy rule ---------------------------------------------------------------------


def delta(value: float, low: float, high: float, n: int = 3) -> Estimate:
    return Estimate(value, low, high, REPEATS, n)


def test_the_three_outcomes_follow_the_interval_not_the_point():
    assert judge(delta(-0.9, -0.95, -0.85), 1.0).outcome == NO_WORSE
    assert judge(delta(-1.2, -1.3, -1.1), 1.0).outcome == WORSE
    # The H200's synthetic MNIST: +8.06 pp, but an interval of -36.9 to +53.0 decides nothing.
    wide = judge(delta(8.06, -36.9, 53.0), 1.0)
    assert wide.outcome == INCONCLUSIVE and "spans -1 pp" in wide.why
    # A point estimate alone (one repeat) never decides, however good it looks.
    one = judge(Estimate.point(0.5), 1.0)
    assert one.outcome == INCONCLUSIVE and one.repeats_needed is None
    assert "one repeat" in one.text()
    # A gain is never worse.
    assert judge(delta(3.0, 2.5, 3.5), 1.0).outcome == NO_WORSE
    assert judge(None, 1.0) is None


def test_the_repeats_that_would_decide_come_from_the_spread():
    # Half-width 2 pp at n=3, the estimate 1 pp above -1 pp: (2/1)^2 * 3 = 12 repeats.
    spread = delta(0.0, -2.0, 2.0)
    assert repeats_to_decide(spread, 1.0) == 12
    assert judge(spread, 1.0).repeats_needed == 12
    assert "about 12 repeats would decide" in judge(spread, 1.0).text()
    # Right at the margin no number of repeats decides; far too many is said as "many more".
    assert repeats_to_decide(delta(-1.0, -3.0, 1.0), 1.0) is None
    assert "many more" in judge(delta(-0.99, -40.0, 38.0), 1.0).text()


def test_the_gate_asks_the_interval_to_lie_within_the_band():
    assert within(delta(0.0, -0.1, 0.1), 0.15) == NO_WORSE
    assert within(delta(-0.3, -0.35, -0.25), 0.15) == WORSE
    assert within(delta(0.3, 0.25, 0.35), 0.15) == WORSE  # better by too much: not the same
    assert within(delta(0.0, -0.2, 0.2), 0.15) == INCONCLUSIVE
    assert within(Estimate.point(0.0), 0.15) == INCONCLUSIVE


# --- the verdicts --------------------------------------------------------------------------


# A GPU whose bf16 the policy table rates fast: a slow bf16 cell there needs another reason.
H100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", capability="9.0")


def repeats(bf16_accuracy: list[float], bf16_ms: float = 1.0, **bf16: object) -> list[CellRecord]:
    """Three repeats of torch/mnist_dense on an H100: float32 at 2 ms and 97 %, bf16 as given."""
    records = []
    for repeat, accuracy in enumerate(bf16_accuracy):
        float32 = record(
            "torch",
            "mnist_dense",
            "float32",
            median_ms=2.0,
            accuracy=0.97,
            repeat=repeat,
            device=H100,
        )
        records.append(float32)
        rec = record(
            "torch",
            "mnist_dense",
            "mixed_bfloat16",
            median_ms=bf16_ms,
            accuracy=accuracy,
            repeat=repeat,
            device=H100,
        )
        for name, value in bf16.items():
            setattr(rec, name, value)
        records.append(rec)
    return records


def bf16_verdict(records: list[CellRecord], **options: object):
    report = build_report(records, CompareOptions(**options))
    return report.sections[0].groups[0].comparisons["mixed_bfloat16"].verdict


def test_faster_is_recommended_only_where_accuracy_is_shown_no_worse():
    tight = bf16_verdict(repeats([0.9695, 0.9700, 0.9705]))
    assert tight.advice == RECOMMENDED
    assert tight.why == "accuracy no worse than float32 (95 % interval above -1 pp)"
    # The same speed, an accuracy that moves by points between repeats: undecided.
    loose = bf16_verdict(repeats([0.95, 0.99, 0.975]))
    assert loose.advice == UNDECIDED and loose.why.startswith("faster, but accuracy undecided")
    assert "repeats would decide" in loose.why


def test_the_margin_decides_what_no_worse_means():
    three_below = repeats([0.94, 0.94, 0.94])  # 3 pp below float32 in every repeat
    assert bf16_verdict(three_below).advice == CAREFUL
    assert bf16_verdict(three_below, accuracy_margin_pp=5.0).advice == RECOMMENDED


def test_the_runs_margin_reaches_compare_and_the_option_overrides_it(tmp_path: Path):
    from mpbench.compare.run import compare

    run_dir = write_run(tmp_path / "run", repeats([0.94, 0.94, 0.94]))
    run_json = {"run_id": "20260301-101500-cpu", "config": {"accuracy_margin": 5.0}}
    (run_dir / "run.json").write_text(json.dumps(run_json), encoding="utf-8")

    def margin(**options: object) -> tuple[float, str]:
        out = tmp_path / "report.json"
        compare(CompareOptions(paths=[run_dir], format="json", output=out, **options))
        report = json.loads(out.read_text(encoding="utf-8"))
        (bf16,) = [c for c in report["cells"] if c["policy"] == "mixed_bfloat16"]
        return report["thresholds"]["accuracy_margin_pp"], bf16["accuracy_vs_float32"]["outcome"]

    assert margin() == (5.0, NO_WORSE)
    assert margin(accuracy_margin_pp=1.0) == (1.0, WORSE)


# --- the speed-up ceiling ------------------------------------------------------------------


def test_a_policy_slower_than_float32_is_never_beyond_what_the_device_allows():
    # This CPU's measured peaks: fp16 at 2 % of float32's. A quiet fp16 cell at 0.17× used to
    # be called implausible (its speed-up above 1.5 × 0.0194).
    records = repeats([0.97] * 3, bf16_ms=11.8, measured_peak_tflops=0.05)
    for rec in records:
        if rec.policy == "float32":
            rec.measured_peak_tflops, rec.mfu_measured = 2.58, 0.02
    report = build_report(records, CompareOptions())
    comparison = report.sections[0].groups[0].comparisons["mixed_bfloat16"]
    assert comparison.speedup.value < 1 and comparison.distrust is None


def test_the_ceiling_is_the_peak_ratio_whatever_float32s_mfu():
    # The H200 run of issue 37's fleet table: float32 mnist_dense at 70.4 % of the fp32
    # datasheet peak (67 TFLOP/s), tf32 (494 TFLOP/s) 4.85× faster. An Amdahl bound over the
    # MFU allowed 3.83× and called a quiet GPU's speed-up implausible.
    def distrust(policy_ms: float) -> str | None:
        records = repeats([0.97] * 3, bf16_ms=policy_ms, peak_tflops=494.0)
        for rec in records:
            if rec.policy == "float32":
                rec.peak_tflops, rec.mfu = 67.0, 0.704
        report = build_report(records, CompareOptions())
        return report.sections[0].groups[0].comparisons["mixed_bfloat16"].distrust

    assert distrust(2.0 / 4.85) is None
    # 1.5 × 494 / 67 = 11.1×: 12× is beyond it, and says why
    reason = distrust(2.0 / 12)
    assert reason is not None and "beyond what the device allows (at most 11.1×" in reason
    assert "7.37× the float32 peak (datasheet), 2× fewer bytes" in reason


# --- what limited the step -----------------------------------------------------------------

LAUNCH = BottleneckStats(
    kind="launch-bound",
    evidence="CPU busy 31 % of the step; 0.4 % of the bf16 peak",
    remedy="a larger batch, --compile, fewer small kernels",
    source="process CPU time",
    host_busy_fraction=0.31,
)


def test_a_policy_that_gains_nothing_says_what_limited_its_step():
    records = repeats([0.97] * 3, bf16_ms=2.4, bottleneck=LAUNCH)
    verdict = bf16_verdict(records)
    assert verdict.advice == AVOID
    assert verdict.why == (
        "no gain: launch-bound (CPU busy 31 % of the step; 0.4 % of the bf16 peak); "
        "would help: a larger batch, --compile, fewer small kernels"
    )


def test_every_format_shows_the_diagnosis():
    records = repeats([0.97] * 3, bf16_ms=2.4, bottleneck=LAUNCH)
    records[-1].bottleneck = BottleneckStats("compute-bound", "81 % of the peak", None, "x")
    report = build_report(records, CompareOptions())
    table = section_table(report.sections[0], report.labeler)
    bound = table.headers.index("bound")
    assert [row[bound] for row in table.rows] == ["—", "launch 2/3"]
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    assert [r["bottleneck"] for r in rows] == ["", "launch-bound"]
    from mpbench.compare.render.json_report import render_json

    (bf16,) = [c for c in json.loads(render_json(report))["cells"] if c["policy"] != "float32"]
    assert bf16["bottleneck"]["kind"] == "launch-bound"
    assert (bf16["bottleneck"]["repeats_agreeing"], bf16["bottleneck"]["of"]) == (2, 3)


def test_a_table_without_diagnoses_has_no_bound_column():
    report = build_report(cpu_run(), CompareOptions())
    assert "bound" not in section_table(report.sections[0], report.labeler).headers


@pytest.mark.parametrize("kind", ["compute-bound", "unknown"])
def test_a_compute_bound_or_undiagnosed_cell_adds_no_reason(kind: str):
    found = BottleneckStats(kind, "evidence", None, "x")
    verdict = bf16_verdict(repeats([0.97] * 3, bf16_ms=2.4, bottleneck=found))
    assert verdict.advice == AVOID and verdict.why is None


# --- telemetry over short windows ----------------------------------------------------------

SHORT = "2 NVML readings in 0.31 s, 0 of them 1 s or more into it: too few for a mean (needs 5)"


def test_power_comes_from_the_energy_counter_and_a_dropped_mean_says_why():
    records = repeats([0.97] * 3, bf16_ms=1.0)
    for rec in records:
        rec.telemetry = TelemetryStats(
            side_file=None,
            numerics_points=0,
            numerics_stride=1,
            steps=50,
            skipped_steps=0,
            nonfinite_steps=0,
            mean_gpu_util_pct=None,
            mean_power_w=122.0,  # NVML's sampled mean: mostly idle readings
            unavailable={"mean_gpu_util_pct": SHORT},
        )
        rec.energy = EnergyStats(
            joules=395.0 * 1.2,
            joules_per_sample=0.01,
            source="NVML total energy counter",
            reason=None,
            window_s=1.2,
            window="steady window",
            steps=700,
            mean_power_w=395.0,
        )
    report = build_report(records, CompareOptions())
    cell = report.sections[0].groups[0].cells["float32"]
    assert (cell.power_w, cell.power_source) == (395.0, "energy counter")
    assert cell.telemetry_missing == {"mean_gpu_util_pct": SHORT}
    table = section_table(report.sections[0], report.labeler)
    notes = "\n".join(table.footnotes)
    assert "the energy counter's energy over the window" in notes
    assert f"GPU util: not measured: {SHORT}" in notes and "steady window" in notes
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    assert {r["power_source"] for r in rows} == {"energy counter"}
    assert {r["energy_window"] for r in rows} == {"steady window"}


def test_a_compute_bound_policy_whose_peak_is_below_float32s_says_so():
    # A CPU with avx512_bf16 whose measured bf16 peak is half its float32 peak: a compute-bound
    # bf16 cell is slower because its arithmetic is.
    records = repeats([0.97] * 3, bf16_ms=3.7)
    for rec in records:
        peak = 0.175 if rec.policy == "mixed_bfloat16" else 0.331
        rec.bottleneck = BottleneckStats(
            "compute-bound",
            "85 % of the measured peak",
            None,
            "process CPU time",
            peak_tflops=peak,
        )
    verdict = bf16_verdict(records)
    assert verdict.advice == AVOID
    assert verdict.why == (
        "no gain: compute-bound (85 % of the measured peak), and this device's peak for the "
        "policy is 0.53× float32's"
    )
