"""Every gate, passing and failing, on result files written in the real format."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from builders import (
    OTHER_CPU,
    OTHER_FINGERPRINT,
    cpu_run,
    record,
    slower,
    write_run,
)
from compare_helpers import run_inprocess

from mpbench.compare import CompareOptions, build_report
from mpbench.errors import InvalidInput
from mpbench.results import CellRecord, Status, load_record, read_records

F32 = "torch/mnist_dense/float32"


def _report(candidate: list[CellRecord], baseline: list[CellRecord] | None = None, **options):
    return build_report(candidate, CompareOptions(**options), baseline)


def _failed(report) -> dict[tuple[str, str], object]:
    return {(r.gate, r.cell): r for r in report.failures}


def _with(records: list[CellRecord], change, **where: str) -> list[CellRecord]:
    out = []
    for rec in records:
        rec = load_record(rec.to_dict())
        if all(getattr(rec, k) == v for k, v in where.items()):
            change(rec)
        out.append(rec)
    return out


# --- --max-slowdown ---------------------------------------------------------------------


def test_slowdown_beyond_the_limit_fails_and_names_the_cell() -> None:
    baseline = slower(
        cpu_run("base"), 1 / 1.2, framework="torch", workload="mnist_dense", policy="float32"
    )
    report = _report(cpu_run(), baseline, max_slowdown=0.10)
    assert report.exit_code == 1
    (failure,) = report.failures
    assert (failure.gate, failure.cell) == ("max-slowdown", F32)
    assert failure.value == pytest.approx(0.2)
    assert "2.40 ms vs baseline 2.00 ms: +20.0 % (limit +10 %)" in failure.message
    assert failure.estimate.kind == "within-run only" and failure.estimate.low > 0.10
    assert "(within-run only)" in failure.message and not failure.inconclusive


def test_slowdown_within_the_limit_passes() -> None:
    baseline = slower(cpu_run("base"), 1 / 1.05)  # every cell 5 % slower now
    report = _report(cpu_run(), baseline, max_slowdown=0.10)
    assert report.exit_code == 0
    checked = [r for r in report.results if r.gate == "max-slowdown"]
    assert len(checked) == 11  # every cell that finished in both
    assert all(r.value == pytest.approx(0.05) for r in checked)


def test_a_run_against_itself_passes_every_baseline_gate() -> None:
    report = _report(
        cpu_run(), cpu_run(), max_slowdown=0.0, max_memory_increase=0.0, max_accuracy_drop_pp=0.0
    )
    assert report.exit_code == 0 and report.results


def _repeats(medians: list[float], run_id: str) -> list[CellRecord]:
    return [
        record(
            "torch",
            "mnist_dense",
            "float32",
            median_ms=m,
            accuracy=0.97,
            rss_mib=600,
            repeat=i,
            run_id=run_id,
        )
        for i, m in enumerate(medians)
    ]


def _geomean(values: list[float]) -> float:
    return math.prod(values) ** (1 / len(values))


def test_a_slowdown_whose_interval_straddles_the_limit_is_inconclusive_and_passes() -> None:
    baseline = _repeats([2.0, 2.2, 2.7], "base")  # noisy repeats
    candidate = _repeats([2.5, 2.55, 2.6], "now")  # +11.7 %: past +10 %, not beyond doubt
    report = _report(candidate, baseline, max_slowdown=0.10)
    (result,) = [r for r in report.results if r.gate == "max-slowdown"]
    assert result.passed and result.inconclusive
    assert report.exit_code == 0
    assert result.value == pytest.approx(_geomean([2.5, 2.55, 2.6]) / _geomean([2.0, 2.2, 2.7]) - 1)
    assert result.estimate.kind == "repeats" and result.estimate.low < 0.10 < result.value
    assert "inconclusive — add repeats" in result.message
    assert "inconclusive — add repeats" in report.verdict
    unsure = report.inconclusive
    assert unsure == [result]


def test_require_conclusive_fails_an_inconclusive_gate() -> None:
    baseline = _repeats([2.0, 2.2, 2.7], "base")
    candidate = _repeats([2.5, 2.55, 2.6], "now")
    report = _report(candidate, baseline, max_slowdown=0.10, require_conclusive=True)
    (failure,) = report.failures
    assert failure.inconclusive and failure.gate == "max-slowdown"
    assert report.exit_code == 1
    assert "--require-conclusive" in failure.message


def test_the_same_slowdown_with_tight_repeats_fails() -> None:
    baseline = _repeats([2.18, 2.2, 2.22], "base")
    candidate = _repeats([2.5, 2.55, 2.6], "now")
    report = _report(candidate, baseline, max_slowdown=0.10)
    (failure,) = report.failures
    assert failure.gate == "max-slowdown" and not failure.inconclusive
    assert failure.estimate.low > 0.10 and failure.estimate.n == 3
    assert report.exit_code == 1


def test_a_clear_pass_with_repeats_is_conclusive() -> None:
    baseline = _repeats([2.18, 2.2, 2.22], "base")
    candidate = _repeats([2.2, 2.21, 2.23], "now")
    report = _report(candidate, baseline, max_slowdown=0.10, require_conclusive=True)
    (result,) = [r for r in report.results if r.gate == "max-slowdown"]
    assert result.passed and not result.inconclusive and result.estimate.high < 0.10
    assert report.exit_code == 0
    assert not any("--repeat 3" in note for note in report.notes)  # 3 repeats: no warning


def test_gates_on_one_repeat_say_that_repeats_are_needed() -> None:
    report = _report(cpu_run(), min_speedup={"mixed_bfloat16": 1.5})
    assert any("mpbench run --repeat 3" in note for note in report.notes)


# --- --max-memory-increase --------------------------------------------------------------


def _training(mib: float):
    def change(rec: CellRecord) -> None:
        rec.memory.training_bytes = int(mib * 2**20)

    return change


def test_training_memory_increase_beyond_the_limit_fails() -> None:
    candidate = _with(
        cpu_run(), _training(36), framework="torch", workload="mnist_dense", policy="mixed_bfloat16"
    )
    report = _report(candidate, cpu_run("base"), max_memory_increase=0.10)
    (failure,) = report.failures
    assert (failure.gate, failure.cell) == (
        "max-memory-increase",
        "torch/mnist_dense/mixed_bfloat16",
    )
    assert failure.value == pytest.approx(36 / 31 - 1, rel=1e-4)
    assert (
        "training mem (process RSS sampled) 36.0 MiB vs baseline 31.0 MiB: +16.1 %"
        in failure.message
    )


def test_memory_increase_within_the_limit_passes() -> None:
    candidate = _with(
        cpu_run(), _training(32), framework="torch", workload="mnist_dense", policy="mixed_bfloat16"
    )
    report = _report(candidate, cpu_run("base"), max_memory_increase=0.10)
    assert report.exit_code == 0
    gates = {r.cell: r for r in report.results if r.gate == "max-memory-increase"}
    assert len(gates) == 11  # every cell that finished in both was checked
    changed = gates["torch/mnist_dense/mixed_bfloat16"]
    assert changed.passed and changed.value == pytest.approx(32 / 31 - 1, rel=1e-4)


def test_memory_of_different_kinds_is_never_compared() -> None:
    # the baseline's old records carry only process peaks; this run's, training memory
    with pytest.raises(InvalidInput, match="--max-memory-increase: nothing comparable"):
        _report(cpu_run(), cpu_run("base", v1=True), max_memory_increase=0.10)


def test_old_v1_baselines_still_compare_on_step_time_and_accuracy(tmp_path: Path) -> None:
    old = write_run(tmp_path / "old", cpu_run("base", v1=True))
    lines = (old / "results.jsonl").read_text(encoding="utf-8")
    assert '"schema_version": 1' in lines and "training_bytes" in lines  # dataclass defaults
    raw = [json.loads(line) for line in lines.splitlines()]
    for rec in raw:  # a real v1 file has none of the v2 fields at all
        for name in ("measured_peak_tflops", "mfu_measured", "end_to_end", "threads"):
            rec.pop(name)
        for name in [k for k in rec["memory"] if k.startswith(("training", "sample", "dataset"))]:
            rec["memory"].pop(name)
        if rec["step_time"]:
            for name in ("first_half_median_s", "second_half_median_s", "drifting"):
                rec["step_time"].pop(name)
    (old / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw), encoding="utf-8")
    baseline = read_records(old)
    report = _report(cpu_run(), baseline, max_slowdown=0.10, max_accuracy_drop_pp=0.5)
    assert report.exit_code == 0
    for gate in ("max-slowdown", "max-accuracy-drop"):
        checked = [r for r in report.results if r.gate == gate]
        assert len(checked) == 11 and all(r.passed for r in checked), gate
    report = _report(baseline, min_speedup={"mixed_bfloat16": 1.5})  # v1 alone, too
    assert report.exit_code == 0
    speedups = [r for r in report.results if r.gate == "min-speedup"]
    assert len(speedups) == 4 and all(r.passed and r.value > 1.5 for r in speedups)


# --- --max-accuracy-drop ----------------------------------------------------------------


def _accuracy(value: float):
    def change(rec: CellRecord) -> None:
        rec.accuracy.test_accuracy = value

    return change


@pytest.mark.parametrize(("now", "fails"), [(0.9650, True), (0.9690, False), (0.9662, False)])
def test_accuracy_drop(now: float, fails: bool) -> None:
    # float32 had 97.12 %; 96.62 % is exactly 0.5 pp lower: at the limit passes
    candidate = _with(
        cpu_run(), _accuracy(now), framework="torch", workload="mnist_dense", policy="float32"
    )
    report = _report(candidate, cpu_run("base"), max_accuracy_drop_pp=0.5)
    assert report.exit_code == int(fails)
    (result,) = [r for r in report.results if r.gate == "max-accuracy-drop" and r.cell == F32]
    assert result.value == pytest.approx((0.9712 - now) * 100)


# --- status against the baseline --------------------------------------------------------


def test_a_cell_that_no_longer_finishes_fails_the_status_gate() -> None:
    def crash(rec: CellRecord) -> None:
        rec.status, rec.reason, rec.step_time = Status.ERROR, "RuntimeError: boom", None

    candidate = _with(
        cpu_run(), crash, framework="tensorflow", workload="mnist_dense", policy="mixed_bfloat16"
    )
    report = _report(candidate, cpu_run("base"))
    (failure,) = report.failures
    assert (failure.gate, failure.cell) == ("status", "tensorflow/mnist_dense/mixed_bfloat16")
    assert failure.message == "was ok in the baseline; now error: RuntimeError: boom"


def test_cells_failing_in_both_or_skipped_in_both_are_not_regressions() -> None:
    report = _report(cpu_run(), cpu_run("base"))  # tf32 skipped, TF cifar fp16 timed out
    assert report.exit_code == 0
    status = {r.cell: r for r in report.results if r.gate == "status"}
    assert len(status) == 11 and all(r.passed for r in status.values())
    assert "tensorflow/cifar10_cnn/mixed_float16" not in status  # failed in both: no gate
    assert not any(cell.endswith("/tf32") for cell in status)  # skipped in both: no gate


# --- matching ---------------------------------------------------------------------------


def test_different_hardware_is_invalid_input_unless_allowed() -> None:
    other = cpu_run("other", fingerprint=OTHER_FINGERPRINT, device=OTHER_CPU)
    with pytest.raises(InvalidInput, match=r"different hardware.*--allow-different-hardware"):
        _report(cpu_run(), other, max_slowdown=0.1)
    slow = slower(other, 1 / 1.5)  # that machine was 1.5x faster
    report = _report(cpu_run(), slow, max_slowdown=0.1, allow_different_hardware=True)
    assert report.exit_code == 1
    assert any("different hardware, compared anyway" in note for note in report.notes)


def test_a_different_config_is_nothing_comparable() -> None:
    baseline = cpu_run("base")
    for rec in baseline:
        rec.config["batch_size"] = 256
    with pytest.raises(InvalidInput, match="nothing comparable: no cell of this run matches"):
        _report(cpu_run(), baseline, max_slowdown=0.1)


def test_new_and_missing_cells_are_reported_not_gated() -> None:
    baseline = [r for r in cpu_run("base") if r.workload == "mnist_dense"]
    candidate = [r for r in cpu_run() if r.framework == "torch"]
    report = _report(candidate, baseline, max_slowdown=0.1)
    assert report.exit_code == 0
    assert "torch/cifar10_cnn/float32: not in the baseline (new cell, not gated)" in report.notes
    assert any(
        n.startswith("tensorflow/mnist_dense/float32: in the baseline but not")
        for n in report.notes
    )
    # The cells both sides have were gated, and passed; the new ones were not.
    gated = {r.cell: r.passed for r in report.results if r.gate == "max-slowdown"}
    assert gated and all(gated.values())
    assert {cell.split("/")[:2] == ["torch", "mnist_dense"] for cell in gated} == {True}


def test_baseline_gates_need_a_baseline(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", cpu_run())
    with pytest.raises(InvalidInput, match="need --baseline"):
        run_inprocess(run, max_slowdown=0.1)


# --- --min-speedup ----------------------------------------------------------------------


def test_min_speedup_bf16_passes_and_fp16_fails_on_this_cpu() -> None:
    report = _report(cpu_run(), min_speedup={"mixed_bfloat16": 1.5, "mixed_float16": 1.0})
    failed = _failed(report)
    assert {cell for gate, cell in failed if gate == "min-speedup"} == {
        "torch/mnist_dense/mixed_float16",
        "tensorflow/mnist_dense/mixed_float16",
        "torch/cifar10_cnn/mixed_float16",
        "tensorflow/cifar10_cnn/mixed_float16",  # timed out: cannot show any speed-up
    }
    fp16 = failed[("min-speedup", "torch/mnist_dense/mixed_float16")]
    assert fp16.value == pytest.approx(2.40 / 13.1)
    assert "speed-up vs float32 0.18×" in fp16.message and "minimum 1×" in fp16.message
    timeout = failed[("min-speedup", "tensorflow/cifar10_cnn/mixed_float16")]
    assert timeout.message.startswith("did not finish: timeout: cell exceeded")
    passed = [r for r in report.results if r.passed and r.cell.endswith("mixed_bfloat16")]
    assert len(passed) == 4


def test_min_speedup_on_a_skipped_policy_fails() -> None:
    report = _report(cpu_run(), min_speedup={"tf32": 1.0})
    assert len(report.failures) == 4
    assert all("did not finish: skipped: tf32 is unsupported" in r.message for r in report.failures)


def test_min_speedup_for_a_policy_nobody_ran_is_nothing_comparable() -> None:
    records = [r for r in cpu_run() if r.policy != "mixed_bfloat16"]
    with pytest.raises(
        InvalidInput, match="no framework and workload has both a float32 and a mixed_bf"
    ):
        _report(records, min_speedup={"mixed_bfloat16": 1.5})


def test_min_speedup_just_under_the_minimum_but_inside_the_interval_is_inconclusive() -> None:
    records = _repeats([2.0, 2.9, 3.2], "now") + [
        record(
            "torch",
            "mnist_dense",
            "mixed_bfloat16",
            median_ms=m,
            accuracy=0.97,
            rss_mib=600,
            repeat=i,
            run_id="now",
        )
        for i, m in enumerate([1.6, 2.0, 2.4])
    ]
    report = _report(records, min_speedup={"mixed_bfloat16": 1.5})
    (result,) = report.results
    # paired by repeat: 2.0/1.6, 2.9/2.0, 3.2/2.4 -> median 1.33x, below 1.5x
    assert result.value == pytest.approx(statistics.median([2.0 / 1.6, 2.9 / 2.0, 3.2 / 2.4]))
    assert result.passed and result.inconclusive
    assert result.estimate.high > 1.5
    strict = _report(records, min_speedup={"mixed_bfloat16": 1.5}, require_conclusive=True)
    assert strict.exit_code == 1


def test_min_speedup_clearly_below_with_repeats_fails() -> None:
    records = _repeats([2.0, 2.05, 2.1], "now") + [
        record("torch", "mnist_dense", "mixed_bfloat16", median_ms=m, accuracy=0.97,
               rss_mib=600, repeat=i, run_id="now")
        for i, m in enumerate([1.9, 1.95, 2.0])
    ]  # fmt: skip
    report = _report(records, min_speedup={"mixed_bfloat16": 1.5})
    (failure,) = report.failures
    assert failure.estimate.kind == "repeats" and failure.estimate.high < 1.5


def test_a_failed_float32_reference_fails_the_ratio_gate() -> None:
    def crash(rec: CellRecord) -> None:
        rec.status, rec.reason, rec.step_time = Status.OOM, "out of memory", None

    records = _with(cpu_run(), crash, framework="torch", workload="mnist_dense", policy="float32")
    report = _report(records, min_speedup={"mixed_bfloat16": 1.5})
    (failure,) = report.failures
    assert failure.cell == "torch/mnist_dense/mixed_bfloat16"
    assert failure.message == "the float32 reference did not finish: oom: out of memory"


# --- --max-accuracy-delta ---------------------------------------------------------------


def test_max_accuracy_delta_passes_within_the_limit() -> None:
    records = [r for r in cpu_run() if r.workload == "mnist_dense"]
    report = _report(records, max_accuracy_delta_pp=1.0)
    assert report.exit_code == 0
    assert len(report.results) == 4  # fp16 and bf16 of torch and TF; tf32 was skipped


def _accuracy_repeats(bf16: list[float], fp16: list[float]) -> list[CellRecord]:
    """Three repeats of tensorflow/mnist_dense: float32 at 97.08 %, the 16-bit policies at
    the accuracies given, repeat by repeat."""
    records = []
    for repeat in range(3):
        for rec in cpu_run():
            if (rec.framework, rec.workload) != ("tensorflow", "mnist_dense"):
                continue
            rec.repeat, rec.cell_id = repeat, rec.cell_id.replace("/r0", f"/r{repeat}")
            if rec.policy == "float32":
                rec.accuracy.test_accuracy = 0.9708
            elif rec.policy in ("mixed_bfloat16", "mixed_float16"):
                given = bf16 if rec.policy == "mixed_bfloat16" else fp16
                rec.accuracy.test_accuracy = given[repeat]
            records.append(rec)
    return records


def test_max_accuracy_delta_fails_an_interval_wholly_beyond_the_limit_either_way() -> None:
    # bf16 0.30 to 0.34 pp below float32, repeat by repeat: its whole interval is below
    # -0.15 pp. fp16 1.4 pp above: the two did not train the same thing either.
    records = _accuracy_repeats([0.9678, 0.9676, 0.9674], [0.9850, 0.9848, 0.9852])
    failed = _failed(_report(records, max_accuracy_delta_pp=0.15))
    assert set(failed) == {
        ("max-accuracy-delta", "tensorflow/mnist_dense/mixed_bfloat16"),
        ("max-accuracy-delta", "tensorflow/mnist_dense/mixed_float16"),
    }
    worse = failed[("max-accuracy-delta", "tensorflow/mnist_dense/mixed_bfloat16")]
    assert worse.value == pytest.approx(-0.32) and not worse.inconclusive
    assert "-0.32 pp (limit ±0.15 pp)" in worse.message
    gain = failed[("max-accuracy-delta", "tensorflow/mnist_dense/mixed_float16")]
    assert gain.value == pytest.approx(1.42)


def test_max_accuracy_delta_passes_an_interval_within_the_limit() -> None:
    records = _accuracy_repeats([0.9707, 0.9709, 0.9708], [0.9706, 0.9708, 0.9710])
    results = _report(records, max_accuracy_delta_pp=0.15).results
    assert results and all(r.passed and not r.inconclusive for r in results)


def test_max_accuracy_delta_is_inconclusive_where_the_interval_spans_the_limit() -> None:
    # bf16 -0.5, +0.3, -0.1 pp: the interval reaches below -0.15 pp and above it.
    records = _accuracy_repeats([0.9658, 0.9738, 0.9698], [0.9708] * 3)
    (result,) = [r for r in _report(records, max_accuracy_delta_pp=0.15).results if "bf" in r.cell]
    assert result.passed and result.inconclusive
    strict = _report(records, max_accuracy_delta_pp=0.15, require_conclusive=True)
    assert ("max-accuracy-delta", "tensorflow/mnist_dense/mixed_bfloat16") in _failed(strict)


def test_one_repeat_never_fails_the_accuracy_gate_on_its_point() -> None:
    records = _with(
        [r for r in cpu_run() if r.workload == "mnist_dense"],
        _accuracy(0.9000),  # 7 pp below float32, once: no interval
        framework="tensorflow",
        policy="mixed_bfloat16",
    )
    (result,) = [
        r
        for r in _report(records, max_accuracy_delta_pp=0.15).results
        if r.cell == "tensorflow/mnist_dense/mixed_bfloat16"
    ]
    assert result.passed and result.inconclusive


def test_a_diverged_cell_fails_the_accuracy_delta_gate() -> None:
    def diverge(rec: CellRecord) -> None:
        rec.status, rec.reason, rec.step_time = Status.DIVERGED, "loss became nan at step 12", None

    records = _with(
        [r for r in cpu_run() if r.workload == "mnist_dense"],
        diverge,
        framework="torch",
        policy="mixed_float16",
    )
    report = _report(records, max_accuracy_delta_pp=1.0)
    (failure,) = report.failures
    assert failure.cell == "torch/mnist_dense/mixed_float16"
    assert "diverged: loss became nan at step 12" in failure.message


def test_config_variants_get_labels_that_tell_them_apart(tmp_path: Path) -> None:
    small = cpu_run()
    large = cpu_run("big", config_overrides={"batch_size": 256})
    report = _report(small + large, min_speedup={"mixed_float16": 1.0})
    cells = {r.cell for r in report.failures}
    assert "torch/mnist_dense/mixed_float16 [batch_size=128]" in cells
    assert "torch/mnist_dense/mixed_float16 [batch_size=256]" in cells


def test_reads_the_records_it_wrote(tmp_path: Path) -> None:
    # the gates see exactly what the real reader returns from the real writer's files
    run = write_run(tmp_path / "run", cpu_run())
    report = _report(read_records(run), min_speedup={"mixed_bfloat16": 1.5})
    assert report.exit_code == 0
