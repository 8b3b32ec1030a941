"""Each training-memory figure says what it measures, and two figures that measure different
things are never divided (issue 41: Keras and torch training memory sat in one column though
one is TensorFlow's allocator, one torch's, and on a CPU a sampled process RSS). The sources
are the record's `memory.training_source`, as the backends write it."""

from __future__ import annotations

import csv
import io
import json

from builders import record

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.csv_report import render_csv
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.report_tables import report_tables
from mpbench.compare.summary.cells import MEMORY_MEANINGS, memory_text
from mpbench.compare.summary.verdict import group_verdicts
from mpbench.results import DeviceInfo
from mpbench.telemetry.memory import RSS_SOURCE

H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "9.0", 0)
MS = {"float32": 2.0, "mixed_bfloat16": 0.8}
TRAINING_MIB = {"float32": 300, "mixed_bfloat16": 200}


def _cell(framework: str, policy: str, source: str, **where):
    rec = record(
        framework,
        "mnist_dense",
        policy,
        median_ms=MS[policy],
        accuracy=0.97,
        training_mib=TRAINING_MIB[policy],
        **where,
    )
    rec.memory.training_source = source
    return rec


def _gpu_cell(framework: str, policy: str, source: str):
    return _cell(framework, policy, source, device_mib=900, device=H100)


def _cpu_cell(policy: str, source: str):
    return _cell("torch", policy, source, rss_mib=600)


def test_every_source_a_backend_writes_has_its_meaning():
    for source in ("cuda allocator", "tensorflow allocator", RSS_SOURCE, "process RSS sampled"):
        kind = f"training mem ({source})"
        assert memory_text(kind).startswith(f"{kind}: "), source
    # TF_GPU_ALLOCATOR names the allocator after the source (backends/tensorflow/device.py).
    assert memory_text("training mem (tensorflow allocator (cuda_malloc_async))").endswith(
        MEMORY_MEANINGS["tensorflow allocator"]
    )


def test_torch_and_keras_on_one_gpu_say_what_each_figure_measures():
    records = [
        _gpu_cell(framework, policy, source)
        for framework, source in (
            ("torch", "cuda allocator"),
            ("tensorflow", "tensorflow allocator"),
        )
        for policy in MS
    ]
    report = build_report(records, CompareOptions())
    table = report_tables(report)[0]
    memory = table.headers.index("train mem")
    marks = {row[0]: row[memory].split()[-1] for row in table.rows}
    assert marks["torch fp32"] == marks["torch bf16"] != marks["tf fp32"] == marks["tf bf16"]
    notes = "\n".join(table.footnotes)
    assert f"{marks['torch fp32']} memory: {memory_text('training mem (cuda allocator)')}" in notes
    assert (
        f"{marks['tf fp32']} memory: {memory_text('training mem (tensorflow allocator)')}" in notes
    )
    # Each framework's ratio is between two figures of its own allocator: it stands.
    for group in report.sections[0].groups:
        comparison = group.comparisons["mixed_bfloat16"]
        assert comparison.memory_ratio is not None and comparison.memory_refused is None


def test_one_source_is_said_once_under_the_table():
    records = [_cpu_cell(policy, RSS_SOURCE) for policy in MS]
    table = report_tables(build_report(records, CompareOptions()))[0]
    kind = f"training mem ({RSS_SOURCE})"
    assert f"train mem: {memory_text(kind)}" in table.footnotes
    assert "sampled every few ms" in memory_text(kind)


def test_a_ratio_across_two_sources_is_refused_with_the_reason_in_every_format():
    # float32 of an older mpbench (whole RSS) beside bf16 of today's (anonymous RSS).
    records = [_cpu_cell("float32", "process RSS sampled"), _cpu_cell("mixed_bfloat16", RSS_SOURCE)]
    report = build_report(records, CompareOptions())
    comparison = report.sections[0].groups[0].comparisons["mixed_bfloat16"]
    assert comparison.memory_ratio is None
    why = comparison.memory_refused
    assert why == (
        "no ratio: fp32's memory is training mem (process RSS sampled), bf16's training mem "
        f"({RSS_SOURCE}): two different measures"
    )
    table = report_tables(report)[0]
    ratio = table.rows[1][table.headers.index("mem ratio")]
    assert ratio.startswith("— [") and any(line.endswith(why) for line in table.footnotes)
    (verdict,) = group_verdicts(report.sections[0].groups[0])
    assert "training memory" not in verdict.evidence  # no change quoted from two measures
    bf16 = next(c for c in json.loads(render_json(report))["cells"] if c["policy"] != "float32")
    assert bf16["memory_vs_float32"] is None and bf16["memory_vs_float32_reason"] == why
    row = next(
        r for r in csv.DictReader(io.StringIO(render_csv(report))) if r["policy"] != "float32"
    )
    assert row["memory_vs_float32"] == "" and row["memory_vs_float32_reason"] == why


def _baseline_report(bf16_source: str, **options):
    """A baseline of today's sources, and a run whose bf16 memory has `bf16_source`."""
    base = [_cpu_cell(policy, RSS_SOURCE) for policy in MS]
    now = [_cpu_cell("float32", RSS_SOURCE), _cpu_cell("mixed_bfloat16", bf16_source)]
    for rec in now:
        rec.run_id = "20260302-101500-cpu"
    return build_report(now, CompareOptions(**options), baseline=base)


def test_a_baseline_of_another_source_is_not_compared_and_the_gate_says_so():
    report = _baseline_report("process RSS sampled", max_memory_increase=0.05)
    (checked,) = [r for r in report.results if r.gate == "max-memory-increase"]
    assert "float32" in checked.cell  # the cell whose figures are of one kind
    (skipped,) = [n for n in report.notes if n.startswith("--max-memory-increase not checked")]
    assert "mixed_bfloat16" in skipped and skipped.endswith("two different measures")
    table = next(t for t in report_tables(report) if t.title.startswith("Against the baseline"))
    bf16 = next(row for row in table.rows if "mixed_bfloat16" in row[0])
    assert "not compared [1]" in bf16[2]
    assert any(
        line.startswith("[1] no ratio: the baseline's memory is") for line in table.footnotes
    )
    baseline = json.loads(render_json(report))["baseline"]
    bf16_json = next(m for m in baseline if "mixed_bfloat16" in m["cell"])
    assert bf16_json["memory_ratio"] is None
    assert bf16_json["memory_ratio_reason"].endswith("two different measures")


def test_a_memory_gate_with_nothing_of_one_kind_names_the_reason():
    import pytest

    from mpbench.errors import InvalidInput

    base = [_cpu_cell("float32", "process RSS sampled")]
    now = [_cpu_cell("float32", RSS_SOURCE)]
    now[0].run_id = "20260302-101500-cpu"
    with pytest.raises(InvalidInput, match="two different measures"):
        build_report(now, CompareOptions(max_memory_increase=0.05), baseline=base)
