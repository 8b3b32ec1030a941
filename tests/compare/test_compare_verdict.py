"""The verdict per policy: advice from the speed-up's interval, the accuracy cost and the
device's rating of the policy."""

from __future__ import annotations

from builders import cpu_run, record

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.summary.verdict import (
    AVOID,
    CAREFUL,
    NOT_MEASURED,
    UNDECIDED,
    group_verdicts,
    traits_of,
)
from mpbench.results import DeviceInfo


def verdicts(records) -> dict[str, object]:
    report = build_report(records, CompareOptions())
    group = report.sections[0].groups[0]
    return {v.policy: v for v in group_verdicts(group)}


def test_the_one_repeat_cpu_run_finds_bf16_faster_and_says_why_fp16_is_slow() -> None:
    found = verdicts(cpu_run())
    bf16, fp16, tf32 = found["mixed_bfloat16"], found["mixed_float16"], found["tf32"]
    # Faster beyond doubt, but one repeat's accuracy is a point: it decides nothing.
    assert bf16.advice == UNDECIDED and bf16.evidence.startswith("2.45× faster, 95 % 2.41")
    assert "-35.4 % training memory" in bf16.evidence and "-0.13 pp accuracy" in bf16.evidence
    assert bf16.why == (
        "faster, but accuracy undecided at a 1 pp margin: one repeat, so no interval: "
        "--repeat 3 gives one"
    )
    assert fp16.advice == AVOID and fp16.evidence.startswith("5.5× slower (0.18×)")
    assert "fp16 works but is emulated" in fp16.why
    assert tf32.advice == NOT_MEASURED and "NVIDIA GPU math mode" in tf32.why
    assert "float32" not in found  # the reference has no verdict of its own


def _repeats(bf16_ms: list[float], bf16_accuracy: float = 0.97) -> list:
    records = []
    for repeat, bf16 in enumerate(bf16_ms):
        records.append(
            record(
                "torch",
                "mnist_dense",
                "float32",
                median_ms=2.0,
                accuracy=0.97,
                rss_mib=600,
                repeat=repeat,
            )
        )
        records.append(
            record(
                "torch",
                "mnist_dense",
                "mixed_bfloat16",
                median_ms=bf16,
                accuracy=bf16_accuracy,
                rss_mib=600,
                repeat=repeat,
            )
        )
    return records


def test_an_interval_that_includes_one_is_inconclusive() -> None:
    bf16 = verdicts(_repeats([1.6, 2.5, 1.9]))["mixed_bfloat16"]
    assert bf16.advice == UNDECIDED and "includes 1×" in bf16.why


def test_a_clear_speed_up_that_costs_accuracy_is_to_be_used_with_care() -> None:
    bf16 = verdicts(_repeats([1.0, 1.02, 0.98], bf16_accuracy=0.94))["mixed_bfloat16"]
    assert bf16.advice == CAREFUL and "-3.00 pp accuracy" in bf16.evidence
    # Three repeats, each 3 pp below: the interval lies below -1 pp.
    assert bf16.why == "accuracy worse than float32 by more than 1 pp (95 % interval below -1 pp)"


def test_gpu_traits_come_from_the_recorded_capability() -> None:
    report = build_report(cpu_run(), CompareOptions())
    cell = report.sections[0].groups[0].cells["float32"]
    cell.records[0].device = DeviceInfo(kind="cuda", name="NVIDIA A100", capability="8.0")
    traits = traits_of(cell)
    assert traits.kind == "cuda" and traits.compute_capability == (8, 0)
