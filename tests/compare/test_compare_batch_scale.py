"""Recipe rows in compare (docs/recipes.md): the 16-bit cells at K x the batch and the fp16
cells at a static loss scale join float32's group as rows of their own; a batch-scaled
speed-up is a throughput ratio, and each row names its batch or scale."""

from __future__ import annotations

import json

import pytest
from builders import record

from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.tables import section_table
from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import summarize_all
from mpbench.compare.summary.labels import Labeler

# What the runner writes on a 16-bit cell at twice the batch of 128.
SCALED = {"batch_scale_16bit": 2, "reference_batch_size": 128, "batch_size": 256}


def _fp32(**kw):
    return record("torch", "mnist_dense", "float32", median_ms=10.0, rss_mib=300, **kw)


def _bf16(ms: float, recipe: str = "@bs2", **kw):
    return record(
        "torch",
        "mnist_dense",
        "mixed_bfloat16",
        median_ms=ms,
        rss_mib=300,
        training_mib=12,
        config_overrides=SCALED if recipe else None,
        recipe=recipe,
        **kw,
    )


def _records(bf16_ms: float) -> list:
    return [_fp32(training_mib=10), _bf16(bf16_ms)]


@pytest.mark.parametrize(("bf16_ms", "throughput_ratio"), [(10.0, 2.0), (20.0, 1.0), (40.0, 0.5)])
def test_speedup_is_the_throughput_ratio_at_the_larger_batch(bf16_ms, throughput_ratio):
    (section,) = build_sections(summarize_all(_records(bf16_ms)))
    (group,) = section.groups  # one group although the batch sizes differ
    assert list(group.cells) == ["float32", "mixed_bfloat16 @256"]
    assert group.comparisons["mixed_bfloat16 @256"].speedup.value == pytest.approx(
        throughput_ratio, rel=0.02
    )
    assert group.comparisons["mixed_bfloat16 @256"].memory_ratio.value == pytest.approx(
        1.2, rel=0.02
    )


def test_records_of_the_first_recipe_format_group_alike():
    """Runs of the first recipe release wrote the factor on float32's record too."""
    old_fp32 = _fp32(training_mib=10, config_overrides={**SCALED, "batch_size": 128})
    (section,) = build_sections(summarize_all([old_fp32, _bf16(20.0)]))
    (group,) = section.groups
    assert group.comparisons["mixed_bfloat16 @256"].speedup.value == pytest.approx(1.0, rel=0.02)


def test_two_batch_factors_are_two_rows_against_one_float32():
    records = [_fp32(training_mib=10), _bf16(5.0, recipe=""), _bf16(10.0)]
    (section,) = build_sections(summarize_all(records))
    (group,) = section.groups
    assert list(group.cells) == ["float32", "mixed_bfloat16", "mixed_bfloat16 @256"]
    assert group.comparisons["mixed_bfloat16"].speedup.value == pytest.approx(2.0, rel=0.02)
    assert group.comparisons["mixed_bfloat16 @256"].speedup.value == pytest.approx(2.0, rel=0.02)
    table = section_table(section, Labeler(g.key for g in section.groups))
    labels = [row[0] for row in table.rows]
    assert labels == ["torch fp32 @128", "torch bf16 @128", "torch bf16 @256"]
    assert any("throughput ratio" in note for note in table.footnotes)


def test_static_loss_scales_are_rows_of_fp16_against_one_float32():
    def fp16(ms, scale=None):
        recipe = f"@ls{scale:g}" if scale else ""
        overrides = {"loss_scale": scale} if scale else None
        return record(
            "torch",
            "mnist_dense",
            "mixed_float16",
            median_ms=ms,
            config_overrides=overrides,
            recipe=recipe,
        )

    records = [_fp32(), fp16(20.0), fp16(25.0, 1024.0), fp16(40.0, 1e30)]
    (section,) = build_sections(summarize_all(records))
    (group,) = section.groups
    rows = ["float32", "mixed_float16", "mixed_float16 [loss scale 1024]"]
    assert list(group.cells) == [*rows, "mixed_float16 [loss scale 1e+30]"]
    assert group.comparisons["mixed_float16 [loss scale 1024]"].speedup.value == pytest.approx(
        0.4, rel=0.02
    )
    table = section_table(section, Labeler(g.key for g in section.groups))
    assert [row[0] for row in table.rows][2] == "torch fp16 [loss scale 1024]"
    assert "loss scale 1024" in "\n".join(table.verdicts)


def test_json_names_the_policy_and_the_recipe_apart():
    from mpbench.compare.options import CompareOptions
    from mpbench.compare.report import build_report

    report = build_report(_records(10.0), CompareOptions())
    cells = {c["variant"]: c for c in json.loads(render_json(report))["cells"]}
    assert cells["@256"]["policy"] == "mixed_bfloat16"
    assert cells[None]["policy"] == "float32"
