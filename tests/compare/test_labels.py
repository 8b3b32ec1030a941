"""One name per group of cells, written the same way in every output.

A group is one framework × workload × config on one machine; its name is the framework and
what sets the group apart: the recipe it ran with (`torch [accumulate=2]`, `torch [compile]`;
nothing at the defaults) and any other config entry that differs between the report's groups
(`tf [loop=custom]`). The table, the markdown, the verdicts, the plot's legend and panel titles,
the drift lines, JSON and CSV all use that one string.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from builders import record, variant_run, write_run

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.run import render
from mpbench.compare.summary.verdict import FELL_BACK, NO_RATIO, NOT_MEASURED, group_verdicts
from mpbench.results import Status, StepTimeStats, read_records

GROUPS = ["torch", "torch [accumulate=2]", "torch [compile]"]


def _report(tmp_path: Path, records=None):
    """Through the real writer and reader, as `mpbench compare` reads a run."""
    run = write_run(tmp_path / "run", records if records is not None else variant_run())
    return build_report(read_records(run), CompareOptions())


def _row_names(markdown: str) -> list[str]:
    return [line.split(" | ")[0].removeprefix("| ") for line in markdown.splitlines()
            if line.startswith("| torch") or line.startswith("| tf")]  # fmt: skip


def _group_of(row: str) -> str:
    """The group part of a table row name: everything before the policy's short name."""
    words = row.split(" ")
    policy = next(i for i, w in enumerate(words) if w in ("fp32", "tf32", "fp16", "bf16"))
    return " ".join(words[:policy])


def test_each_group_has_one_name_in_the_table_verdicts_json_and_csv(tmp_path: Path) -> None:
    report = _report(tmp_path)
    assert [report.labeler.group(g.key) for g in report.sections[0].groups] == GROUPS

    for fmt in ("markdown", "table"):
        text = render(report, fmt, terminal=False)
        assert not re.search(r"\btorch [a-z]\b", text), fmt  # no `torch a`, `torch b`
        assert "compile=true" not in text and "accumulate=1" not in text, fmt
    markdown = render(report, "markdown", terminal=False)
    rows = _row_names(markdown)
    assert sorted({_group_of(row) for row in rows}) == GROUPS
    assert "torch [accumulate=2] fp32" in rows and "torch [compile] bf16" in rows
    assert "torch fp16 [loss scale 1024] @128" in rows and "torch bf16 @256" in rows
    assert "torch bf16 (fallback) @128" in rows
    # The legend under the table starts with the name it explains, and the verdicts use it.
    assert "\ntorch [accumulate=2]: batch 128, epochs 1" in markdown
    assert "\ntorch [compile]: batch 128, epochs 1" in markdown
    assert "- torch [compile] bf16: 2.59× faster" in markdown

    cells = json.loads(render(report, "json", terminal=False))["cells"]
    assert [c["group"] for c in cells if c["policy"] == "float32"] == GROUPS
    by_cell = {c["cell"]: c for c in cells}
    assert by_cell["torch/mnist_dense/mixed_bfloat16 [compile]"]["group"] == "torch [compile]"
    assert by_cell["torch/mnist_dense/float32 [accumulate=2]"]["variant"] == "[accumulate=2]"
    assert by_cell["torch/mnist_dense/mixed_bfloat16 @256"]["variant"] == "@256"
    assert by_cell["torch/mnist_dense/mixed_bfloat16 (fallback)"]["variant"] == "(fallback)"
    assert by_cell["torch/mnist_dense/float32"]["variant"] is None

    rows = list(csv.DictReader(io.StringIO(render(report, "csv", terminal=False))))
    assert {r["cell"]: r["group"] for r in rows} == {c["cell"]: c["group"] for c in cells}


def test_the_plot_names_the_groups_as_the_table_does(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from mpbench.compare.plot.figure import build_figure

    report = _report(tmp_path)
    fig = build_figure(report)
    legend = [t.get_text() for sub in fig.subfigs for lg in sub.legends for t in lg.texts]
    assert legend == GROUPS
    losses = [ax.get_title() for ax in fig.axes if "training loss" in ax.get_title()]
    assert [" ".join(t.split("\ntraining loss")[0].split()) for t in losses] == GROUPS


def test_drift_lines_spell_the_group_as_every_other_output(tmp_path: Path) -> None:
    records = variant_run()
    compiled = next(r for r in records if r.cell_id.endswith("mixed_bfloat16@compiled/r0"))
    compiled.step_time = StepTimeStats.from_samples([0.0008] * 25 + [0.0011] * 25, 5)
    report = _report(tmp_path, records)
    text = " ".join(render(report, "markdown", terminal=False).split())
    assert "drift: torch/mnist_dense/mixed_bfloat16 [compile] (run 20260305-120000-cpu" in text
    cell = next(c for c in json.loads(render(report, "json", terminal=False))["cells"]
                if c["drifting"])  # fmt: skip
    assert cell["cell"] == "torch/mnist_dense/mixed_bfloat16 [compile]"


def test_a_config_entry_that_differs_between_runs_is_named_by_its_value(tmp_path: Path) -> None:
    def tf(policy: str, ms: float, loop: str, run_id: str):
        return record("tensorflow", "mnist_dense", policy, median_ms=ms, accuracy=0.97,
                      rss_mib=1400, run_id=run_id, config_overrides={"loop": loop})  # fmt: skip

    records = [tf(p, ms, loop, f"run-{loop}") for loop in ("fit", "custom")
               for p, ms in (("float32", 3.0), ("mixed_bfloat16", 1.4))]  # fmt: skip
    report = _report(tmp_path, records)
    names = [report.labeler.group(g.key) for g in report.sections[0].groups]
    assert names == ["tf [loop=custom]", "tf [loop=fit]"]
    rows = _row_names(render(report, "markdown", terminal=False))
    assert sorted({_group_of(row) for row in rows}) == names
    cells = json.loads(render(report, "json", terminal=False))["cells"]
    assert "tensorflow/mnist_dense/float32 [loop=custom]" in {c["cell"] for c in cells}


def test_a_counted_figure_is_no_setting_and_names_no_row(tmp_path: Path) -> None:
    """A user workload's FLOPs per micro-batch (and how they were counted) sit in its config
    beside its settings: they follow the batch, and a count may differ between cells of one
    config. Neither names a row nor splits a group (issue 55: `torch
    [batch_size=128, flops_per_micro_batch=1.5e+09] fp32`, and a bf16 cell with no speed-up)."""

    def cell(policy: str, batch: int, flops: float):
        counted = {"batch_size": batch, "flops_per_micro_batch": flops,
                   "flops_source": "counted (forward + backward, float32)"}  # fmt: skip
        made = record("torch", "mnist_dense", policy, median_ms=2.4 * batch / 128,
                      accuracy=0.97, rss_mib=600, config_overrides=counted)  # fmt: skip
        made.cell_id = made.cell_id.replace("/r0", f"@b{batch}/r0")
        return made

    records = [cell(policy, batch, 1.5e9 * batch / 128) for batch in (128, 256)
               for policy in ("float32", "mixed_bfloat16")]  # fmt: skip
    records[-1] = cell("mixed_bfloat16", 256, 2.9e9)  # counted apart from its float32 twin
    report = _report(tmp_path, records)
    groups = report.sections[0].groups
    assert [report.labeler.group(g.key) for g in groups] == [
        "torch [batch_size=128]",
        "torch [batch_size=256]",
    ]
    assert all(set(g.cells) == {"float32", "mixed_bfloat16"} for g in groups)
    for fmt in ("markdown", "table", "json", "csv"):
        text = render(report, fmt, terminal=False)
        assert "flops_per_micro_batch" not in text and "counted (" not in text, fmt


def test_a_diverged_cell_stays_in_its_own_group_and_tells_of_its_fallback(tmp_path: Path) -> None:
    """It never loaded more than its siblings, yet it belongs with the plain cells it ran
    beside, not with the accumulating or compiled ones."""
    report = _report(tmp_path)
    plain, accumulating, compiled = report.sections[0].groups
    assert "mixed_float16 [loss scale 1e+30]" in plain.cells
    assert not any("loss scale" in row for g in (accumulating, compiled) for row in g.cells)
    verdict = {v.policy: v for v in group_verdicts(plain)}["mixed_float16 [loss scale 1e+30]"]
    assert verdict.advice == FELL_BACK
    assert verdict.evidence.startswith("diverged at step 20 (skipped_fraction) → bf16 (fallback)")


def test_a_fallback_without_float32_was_measured(tmp_path: Path) -> None:
    """`--policy fp16 --on-diverge fallback`: no float32 cell ran, so there is no ratio; the
    fallback still ran, and its verdict says so instead of `not measured`."""
    records = [r for r in variant_run() if "1e+30" in r.cell_id]
    report = _report(tmp_path, records)
    (group,) = report.sections[0].groups
    verdicts = {v.policy: v for v in group_verdicts(group)}
    fallback = verdicts["mixed_bfloat16 (fallback)"]
    assert fallback.advice == NO_RATIO != NOT_MEASURED
    assert fallback.evidence.startswith("ran ok: 1.00 ms a step")
    assert "no float32 cell" in fallback.evidence
    assert verdicts["mixed_float16 [loss scale 1e+30]"].advice == FELL_BACK
    markdown = render(report, "markdown", terminal=False)
    assert "→ not measured" not in markdown


def test_a_skipped_cell_still_joins_the_group_it_would_have_run_in(tmp_path: Path) -> None:
    """A skipped cell lacks the data kind; it joins the one group that agrees on the rest."""
    records = [
        *variant_run(),
        record(
            "torch",
            "mnist_dense",
            "tf32",
            status=Status.SKIPPED,
            reason="no TF32 here",
            run_id="20260305-120000-cpu",
        ),
    ]
    report = _report(tmp_path, records)
    (home,) = [g for g in report.sections[0].groups if "tf32" in g.cells]
    assert report.labeler.group(home.key) == "torch"
