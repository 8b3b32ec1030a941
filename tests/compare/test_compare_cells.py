"""From records to cells: repeats, spreads, identity, memory kind, ratios to float32."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from compare_records import CPU_FINGERPRINT, cpu_run, record, write_run

from mpbench.compare.cells import build_sections, cell_key, summarize_all
from mpbench.compare.estimate import Estimate, differs, median_interval
from mpbench.results import Status, read_records


def test_committed_fixture_reads_back_as_every_cell_of_the_matrix(cpu_run_dir: Path) -> None:
    records = read_records(cpu_run_dir)
    sections = build_sections(summarize_all(records))
    assert [s.workload for s in sections] == ["mnist_dense", "cifar10_cnn"]
    for section in sections:
        assert [g.key.framework for g in section.groups] == ["torch", "tensorflow"]
        for group in section.groups:
            assert list(group.cells) == ["float32", "tf32", "mixed_float16", "mixed_bfloat16"]


def test_repeats_use_the_median_of_medians_and_report_their_spread(tmp_path: Path) -> None:
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
    assert cell.step_time_s == Estimate(0.0023, 0.0020, 0.0026, 3)
    assert cell.accuracy.value == pytest.approx(0.971)
    assert (cell.accuracy.low, cell.accuracy.high) == pytest.approx((0.970, 0.972))
    # p10/p90 describe single steps, pooled over every repeat
    raw = sorted(t for r in records for t in r.step_time.raw_s)
    assert cell.p10_s == pytest.approx(statistics.quantiles(raw, n=10, method="inclusive")[0])


def test_single_repeat_spread_is_the_interval_of_its_median() -> None:
    rec = record("torch", "mnist_dense", "float32", median_ms=2.4, accuracy=0.97, rss_mib=600)
    (cell,) = summarize_all([rec]).values()
    step = cell.step_time_s
    assert step.value == pytest.approx(0.0024)
    assert step.low < step.value < step.high
    # the interval of a median is much narrower than the spread of single steps
    assert cell.p10_s < step.low and step.high < cell.p90_s


def test_median_interval_follows_a_rescaled_median() -> None:
    samples = [1.0, 1.1, 0.9, 1.2, 0.8, 1.05, 0.95, 1.0, 1.15, 0.85]
    low, high = median_interval(samples, 1.0)
    scaled_low, scaled_high = median_interval(samples, 2.0)  # stats rescaled, raw not
    assert (scaled_low, scaled_high) == pytest.approx((2 * low, 2 * high))
    assert median_interval([0.5, 0.7], 0.6) == pytest.approx((0.5, 0.7))  # few samples: range


def test_differs_when_the_candidate_median_leaves_the_baseline_spread() -> None:
    base = Estimate(2.2, 2.0, 2.7, 3)
    assert not differs(Estimate(2.55, 2.5, 2.6, 3), base)  # 2.55 lies inside 2.0-2.7
    assert differs(Estimate(2.8, 2.75, 2.9, 3), base)
    assert differs(Estimate(2.8, 2.1, 2.9, 3), base)  # the candidate's own spread is not used
    assert not differs(Estimate(2.7, 2.7, 2.7), base)  # at the edge: still inside


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


def test_device_memory_is_preferred_over_host_rss() -> None:
    rec = record(
        "torch", "mnist_dense", "float32", median_ms=2.0, accuracy=0.9, rss_mib=900, device_mib=300
    )
    (cell,) = summarize_all([rec]).values()
    assert cell.memory_source == "device"
    assert cell.memory_bytes.value == 300 * 2**20


def test_ratios_against_float32_of_the_same_group() -> None:
    (section, *_) = build_sections(summarize_all(cpu_run()))
    torch = section.groups[0]
    assert torch.key.fingerprint == CPU_FINGERPRINT
    assert torch.speedup("mixed_bfloat16").value == pytest.approx(2.40 / 0.98)
    assert torch.speedup("mixed_float16").value == pytest.approx(2.40 / 13.1)
    assert torch.memory_ratio("mixed_bfloat16").value == pytest.approx(604 / 612, rel=1e-6)
    assert torch.accuracy_delta_pp("mixed_bfloat16").value == pytest.approx(-0.13)
    assert torch.speedup("tf32") is None  # skipped: no ratio, never a zero


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
    assert cell.step_time_s.repeats == 1  # numbers come from the repeat that finished


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
