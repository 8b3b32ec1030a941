"""A busy machine and impossible figures (issue 22): contended cells are marked, no verdict
rests on them, timing gates on them are inconclusive, and implausible figures are named."""

from __future__ import annotations

from builders import BUSY, QUIET, record

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.tables import section_table, status_text
from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import summarize_all
from mpbench.compare.summary.labels import Labeler
from mpbench.compare.summary.verdict import RECOMMENDED, REMEASURE, group_verdicts
from mpbench.results import CellRecord, ContentionStats


def _run(bf16_ms: list[float], contention: ContentionStats | None = None) -> list[CellRecord]:
    records = []
    for i, (f32, bf16) in enumerate(zip([2.4, 2.5, 2.45], bf16_ms, strict=True)):
        for policy, ms in (("float32", f32), ("mixed_bfloat16", bf16)):
            rec = record(
                "torch", "mnist_dense", policy, median_ms=ms, accuracy=0.97, rss_mib=600, repeat=i
            )
            rec.contention = contention
            records.append(rec)
    return records


def _verdicts(records: list[CellRecord]):
    (section,) = build_sections(summarize_all(records))
    (group,) = section.groups
    return group, group_verdicts(group)


def test_a_quiet_run_is_recommended_and_not_marked() -> None:
    group, (verdict,) = _verdicts(_run([1.0, 1.02, 0.99], QUIET))
    assert verdict.advice == RECOMMENDED
    assert "contended" not in status_text(group.cells["mixed_bfloat16"])


def test_contended_cells_are_marked_and_get_no_recommendation() -> None:
    records = _run([1.0, 1.02, 0.99], QUIET)
    records[0].contention = BUSY  # one float32 repeat ran beside something else
    group, (verdict,) = _verdicts(records)
    assert verdict.advice == REMEASURE
    assert "machine busy in 1 of 3 repeats" in verdict.why
    assert "other processes used 1.01 of 2 cores" in verdict.why
    assert "contended" in status_text(group.cells["float32"])
    table = section_table(build_sections(summarize_all(records))[0], Labeler([]))
    assert any("re-measure on a quiet machine" in note for note in table.footnotes)


def test_a_gate_on_contended_cells_is_inconclusive_and_require_conclusive_fails_it() -> None:
    records = _run([3.0, 3.1, 2.9], BUSY)  # bf16 clearly slower than the 1.5x asked for
    report = build_report(records, CompareOptions(min_speedup={"mixed_bfloat16": 1.5}))
    (result,) = report.results
    assert result.inconclusive and result.passed
    assert "re-measure on a quiet machine" in result.message
    assert report.verdict == (
        "PASS: all 1 gate checks passed (1 inconclusive — re-measure on a quiet machine)"
    )
    strict = build_report(
        records,
        CompareOptions(min_speedup={"mixed_bfloat16": 1.5}, require_conclusive=True),
    )
    assert strict.exit_code == 1


def test_the_same_gate_on_a_quiet_machine_fails() -> None:
    records = _run([3.0, 3.1, 2.9], QUIET)
    report = build_report(records, CompareOptions(min_speedup={"mixed_bfloat16": 1.5}))
    assert report.exit_code == 1


def test_a_speedup_beyond_any_device_is_implausible() -> None:
    # The busy-machine case of the issue: 307x on a CPU, where no peak table allows it.
    _, (verdict,) = _verdicts(_run([0.0078, 0.0081, 0.0080], QUIET))
    assert verdict.advice == REMEASURE
    assert "beyond what the device allows" in verdict.why


def test_the_any_device_ceiling_follows_the_peak_table() -> None:
    from mpbench.compare.summary.build import ANY_DEVICE_RATIO
    from mpbench.detect.peaks import _TABLE

    ratios = [max(p.fp16 or 0, p.bf16 or 0) / p.fp32 for _, p in _TABLE]
    assert max(ratios) == ANY_DEVICE_RATIO


def test_a_speedup_beyond_the_peak_ratio_of_the_datasheet_is_implausible() -> None:
    records = _run([0.4, 0.41, 0.39], QUIET)  # 6x
    for rec in records:
        rec.peak_tflops = 19.5 if rec.policy == "float32" else 39.0  # a 2x peak ratio
    _, (verdict,) = _verdicts(records)
    assert verdict.advice == REMEASURE
    assert "2× the float32 peak (datasheet)" in verdict.why


def test_mfu_above_the_datasheet_peak_is_implausible() -> None:
    records = _run([1.0, 1.02, 0.99], QUIET)
    for rec in records:
        rec.mfu = 1.4
    group, (verdict,) = _verdicts(records)
    assert verdict.advice == REMEASURE
    assert "MFU 140 %" in verdict.why
    assert "implausible" in status_text(group.cells["float32"])
