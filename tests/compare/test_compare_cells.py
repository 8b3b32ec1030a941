"""From records to cells: repeats, intervals, identity, memory kind, ratios to float32."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
from builders import CPU_FINGERPRINT, MIB, cpu_run, record, write_run

from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import cell_key, summarize_all
from mpbench.compare.summary.estimate import (
    REPEATS,
    WITHIN_RUN,
    Estimate,
    Verdict,
    judge,
    step_time,
)
from mpbench.results import Status, StepTimeStats, read_records
from mpbench.results.stats import log_ratio_interval, mean_interval


def test_committed_fixture_reads_back_as_every_cell_of_the_matrix(cpu_run_dir: Path) -> None:
    records = read_records(cpu_run_dir)
    sections = build_sections(summarize_all(records))
    assert [s.workload for s in sections] == ["mnist_dense", "cifar10_cnn"]
    for section in sections:
        assert [g.key.framework for g in section.groups] == ["torch", "tensorflow"]
        for group in section.groups:
            assert list(group.cells) == ["float32", "tf32", "mixed_float16", "mixed_bfloat16"]


def test_repeats_give_a_geometric_mean_with_a_t_interval(tmp_path: Path) -> None:
    medians = [2.0, 2.6, 2.3]
    records = [
        record(
            "torch",
            "mnist_dense",
            "float32",
            median_ms=m,
            accuracy=0.97 + i / 1000,
            rss_mib=600 + i,
            repeat=i,
        )
        for i, m in enumerate(medians)
    ]
    write_run(tmp_path, records)
    (cell,) = summarize_all(read_records(tmp_path)).values()
    assert cell.repeats == 3
    step = cell.step_time_s
    assert (step.kind, step.n) == (REPEATS, 3)
    expected = log_ratio_interval([m / 1000 for m in medians])
    assert (step.value, step.low, step.high) == pytest.approx(expected)
    assert step.value == pytest.approx(math.prod(medians) ** (1 / 3) / 1000)
    assert cell.accuracy.value == pytest.approx(0.971)
    assert (cell.accuracy.low, cell.accuracy.high) == pytest.approx(
        mean_interval([0.970, 0.971, 0.972])[1:]
    )
    assert cell.accuracy.kind == REPEATS
    # p10/p90 describe single steps, pooled over every repeat
    raw = sorted(t for r in records for t in r.step_time.raw_s)
    assert cell.p10_s == pytest.approx(statistics.quantiles(raw, n=10, method="inclusive")[0])


def test_single_repeat_interval_is_within_run_only() -> None:
    rec = record("torch", "mnist_dense", "float32", median_ms=2.4, accuracy=0.97, rss_mib=600)
    (cell,) = summarize_all([rec]).values()
    step = cell.step_time_s
    assert step.value == pytest.approx(0.0024)
    assert step.low < step.value < step.high
    assert (step.kind, step.n) == (WITHIN_RUN, 1)
    # the interval of a median is much narrower than the spread of single steps
    assert cell.p10_s < step.low and step.high < cell.p90_s
    # one repeat has one accuracy and one memory figure: values, no interval
    assert cell.accuracy.kind is None and cell.memory_bytes.kind is None


def test_within_run_interval_follows_a_rescaled_median() -> None:
    samples = [1.0, 1.1, 0.9, 1.2, 0.8, 1.05, 0.95, 1.0, 1.15, 0.85]
    stats = StepTimeStats.from_samples(samples, 0)
    once = step_time([stats])
    stats.median_s *= 2  # statistics rescaled, raw steps not (a derived baseline)
    twice = step_time([stats])
    assert (twice.value, twice.low, twice.high) == pytest.approx(
        (2 * once.value, 2 * once.low, 2 * once.high)
    )


@pytest.mark.parametrize(
    ("estimate", "verdict"),
    [
        (Estimate(0.20, 0.15, 0.25, REPEATS, 3), Verdict.FAIL),  # all of it past +10 %
        (Estimate(0.12, 0.05, 0.19, REPEATS, 3), Verdict.INCONCLUSIVE),  # value past, not all
        (Estimate(0.08, 0.01, 0.15, REPEATS, 3), Verdict.PASS),  # value within the limit
        (Estimate(0.10, 0.10, 0.10), Verdict.PASS),  # exactly at the limit passes
        (Estimate.point(0.11), Verdict.FAIL),  # a single value is judged on itself
    ],
)
def test_a_gate_fails_only_when_the_whole_interval_is_past_its_limit(estimate, verdict):
    assert judge(estimate, maximum=0.10) is verdict
    # the same rule mirrored for a minimum (--min-speedup): 1 - x below 0.9
    assert judge(estimate.scaled(-1).shifted(1), minimum=0.9) is verdict


def test_seed_is_not_identity_but_the_data_used_is() -> None:
    a = record("torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=1)
    b = record(
        "torch",
        "mnist_dense",
        "float32",
        median_ms=2.0,
        accuracy=0.9,
        rss_mib=1,
        config_overrides={"seed": 7, "data": "auto"},
    )
    assert cell_key(a) == cell_key(b)
    c = record("torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=1)
    c.data.name, c.data.source = "mnist", "real"
    assert cell_key(c) != cell_key(a)
    d = record(
        "torch",
        "mnist_dense",
        "float32",
        median_ms=2.0,
        accuracy=0.9,
        rss_mib=1,
        config_overrides={"batch_size": 256},
    )
    assert cell_key(d) != cell_key(a)


def test_the_same_record_read_twice_counts_once(tmp_path: Path) -> None:
    records = cpu_run()
    cells = summarize_all(records + records)
    assert all(c.repeats == 1 for c in cells.values())


def test_training_memory_is_preferred_over_process_peaks() -> None:
    rec = record(
        "torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=900,
        device_mib=300, training_mib=120,
    )  # fmt: skip
    (cell,) = summarize_all([rec]).values()
    assert cell.memory_kind == "training mem (cuda allocator)"
    assert cell.memory_bytes.value == 120 * MIB


def test_old_records_fall_back_to_process_peaks_labelled_as_such() -> None:
    old = dict(accuracy=0.9, rss_mib=900, v1=True)
    device = record("torch", "mnist_dense", "float32", median_ms=2.0, device_mib=300, **old)
    (cell,) = summarize_all([device]).values()
    assert cell.memory_kind == "peak mem (device, whole process)"
    assert cell.memory_bytes.value == 300 * MIB
    host = record("torch", "mnist_dense", "float32", median_ms=2.0, **old)
    (cell,) = summarize_all([host]).values()
    assert cell.memory_kind == "peak mem (host RSS, whole process)"


def test_memory_ratios_are_never_taken_between_kinds() -> None:
    ref = record("torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=900,
                 training_mib=100)  # fmt: skip
    old = record("torch", "mnist_dense", "mixed_bfloat16", median_ms=1.0, accuracy=0.9,
                 rss_mib=800, v1=True)  # fmt: skip
    (section,) = build_sections(summarize_all([ref, old]))
    (group,) = section.groups
    assert group.comparisons["mixed_bfloat16"].memory_ratio is None
    assert group.comparisons["mixed_bfloat16"].speedup is not None  # the rest still compares


def test_ratios_against_float32_of_the_same_group() -> None:
    (section, *_) = build_sections(summarize_all(cpu_run()))
    torch = section.groups[0]
    assert torch.key.fingerprint == CPU_FINGERPRINT
    assert torch.comparisons["mixed_bfloat16"].speedup.value == pytest.approx(2.40 / 0.98)
    assert torch.comparisons["mixed_float16"].speedup.value == pytest.approx(2.40 / 13.1)
    assert torch.comparisons["mixed_bfloat16"].memory_ratio.value == pytest.approx(
        31 / 48, rel=1e-6
    )
    assert torch.comparisons["mixed_bfloat16"].end_to_end_speedup.value == pytest.approx(
        2.40 / 0.98
    )
    assert torch.comparisons["mixed_bfloat16"].accuracy_delta_pp.value == pytest.approx(-0.13)
    assert torch.comparisons["tf32"].speedup is None  # skipped: no ratio, never a zero


def test_status_of_a_cell_with_failed_repeats() -> None:
    ok = record("torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=1)
    boom = record(
        "torch",
        "mnist_dense",
        "float32",
        status=Status.ERROR,
        repeat=1,
        reason="RuntimeError: boom",
    )
    (cell,) = summarize_all([ok, boom]).values()
    assert cell.ok and not cell.all_ok and cell.failed
    assert cell.status == "error"
    assert cell.reason == "RuntimeError: boom"
    assert cell.step_time_s.n == 1  # numbers come from the repeat that finished


def test_a_cell_skipped_before_loading_data_joins_its_siblings() -> None:
    auto = {"data": "auto"}
    ran = record("torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=1,
                 config_overrides=auto)  # fmt: skip
    ran.data.name, ran.data.source = "mnist", "real"
    skipped = record("torch", "mnist_dense", "tf32", status=Status.SKIPPED, reason="no TF32",
                     config_overrides=auto)  # fmt: skip
    assert skipped.data is None
    (section,) = build_sections(summarize_all([ran, skipped]))
    (group,) = section.groups
    assert list(group.cells) == ["float32", "tf32"]
    assert group.data_names == ["mnist"]
