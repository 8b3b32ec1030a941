"""A cell stopped because it could not pay (status `stopped`, docs/measurement.md) in compare:
shown with its status and reason where skipped and failed cells are, its measured ratio in
the JSON report, and never the source of a speed-up, an accuracy or a gate's figure."""

from __future__ import annotations

import json

from builders import cpu_run, slower, stopped

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.tables import section_table
from mpbench.results import CellRecord, Status

FP16 = dict(framework="tensorflow", workload="mnist_dense", policy="mixed_float16")


def with_fp16_stopped() -> list[CellRecord]:
    """The CPU run with TensorFlow's fp16 mnist_dense cell 70× slower, stopped there."""
    records = slower(cpu_run(), 70.0, **FP16)
    (float32,) = [
        r
        for r in records
        if (r.framework, r.workload, r.policy) == ("tensorflow", "mnist_dense", "float32")
    ]
    out = []
    for rec in records:
        if all(getattr(rec, k) == v for k, v in FP16.items()):
            rec = stopped(rec, float32_step_s=float32.step_time.median_s)
        out.append(rec)
    return out


def fp16_group(report):
    (group,) = [
        g
        for s in report.sections
        for g in s.groups
        if (g.key.framework, g.key.workload) == ("tensorflow", "mnist_dense")
    ]
    return group


def test_a_stopped_cell_shows_its_status_and_reason_and_gives_no_ratio():
    report = build_report(with_fp16_stopped(), CompareOptions())
    group = fp16_group(report)
    cell = group.cells["mixed_float16"]
    assert cell.status == Status.STOPPED.value and not cell.ok and not cell.failed
    comparison = group.comparisons["mixed_float16"]
    assert comparison.speedup is None and comparison.accuracy_delta_pp is None
    assert comparison.verdict.advice != "recommended"
    (section,) = [s for s in report.sections if any(g is group for g in s.groups)]
    table = section_table(section, report.labeler)
    status = table.headers.index("status")
    assert [r for r in table.rows if r[status].startswith("stopped")]
    notes = "\n".join(table.footnotes)
    assert "× slower than float32 after 3 steps; would have taken" in notes


def test_the_json_report_carries_the_status_and_the_measured_ratio():
    report = build_report(with_fp16_stopped(), CompareOptions())
    cells = json.loads(render_json(report))["cells"]
    (fp16,) = [
        c for c in cells if (c["framework"], c["workload"], c["policy"]) == tuple(FP16.values())
    ]
    assert fp16["status"] == "stopped" and fp16["reason"].startswith("stopped: ")
    assert fp16["speedup_vs_float32"] is None and fp16["test_accuracy"] is None
    (repeat,) = fp16["stopped"]
    assert repeat["rule"] == "slower than float32" and repeat["steps"] == 3
    assert repeat["slower_than_float32"] > 10
    others = [c for c in cells if c["status"] != "stopped"]
    assert others and all(c["stopped"] == [] for c in others)


def test_no_gate_takes_a_figure_from_a_stopped_cell():
    options = CompareOptions(min_speedup={"mixed_float16": 0.01}, max_accuracy_delta_pp=5.0)
    report = build_report(with_fp16_stopped(), options)
    label = report.labeler.cell(fp16_group(report).cells["mixed_float16"].key)
    mine = [r for r in report.results if r.cell == label]
    # No speed-up was measured: the speed-up gate says it did not finish, with why, and the
    # accuracy gate has nothing to judge.
    assert [(r.gate, r.passed) for r in mine] == [("min-speedup", False)]
    assert mine[0].message.startswith("did not finish: stopped: ")
    assert mine[0].value is None
