"""--batch-scale-16bit in compare: the 16-bit cells at K x the batch join float32's group,
the speed-up becomes a throughput ratio, and the row names the batch."""

from __future__ import annotations

import pytest
from compare_records import record

from mpbench.compare.cells import build_sections, summarize_all
from mpbench.compare.labels import Labeler
from mpbench.compare.rows import section_table

SCALED = {"batch_scale_16bit": 2, "reference_batch_size": 128}


def _records(bf16_ms: float) -> list:
    return [
        record(
            "torch",
            "mnist_dense",
            "float32",
            median_ms=10.0,
            rss_mib=300,
            training_mib=10,
            config_overrides=SCALED,
        ),
        record(
            "torch",
            "mnist_dense",
            "mixed_bfloat16",
            median_ms=bf16_ms,
            rss_mib=300,
            training_mib=12,
            config_overrides={**SCALED, "batch_size": 256},
        ),
    ]


@pytest.mark.parametrize(("bf16_ms", "throughput_ratio"), [(10.0, 2.0), (20.0, 1.0), (40.0, 0.5)])
def test_speedup_is_the_throughput_ratio_at_the_larger_batch(bf16_ms, throughput_ratio):
    (section,) = build_sections(summarize_all(_records(bf16_ms)))
    (group,) = section.groups  # one group although the batch sizes differ
    assert group.speedup("mixed_bfloat16").value == pytest.approx(throughput_ratio, rel=0.02)
    assert group.memory_ratio("mixed_bfloat16").value == pytest.approx(1.2, rel=0.02)


def test_rows_mark_each_cells_batch():
    (section,) = build_sections(summarize_all(_records(10.0)))
    table = section_table(section, Labeler(g.key for g in section.groups))
    labels = [row[0] for row in table.rows]
    assert labels == ["torch fp32 @128", "torch bf16 @256"]
    assert any("throughput ratio" in note for note in table.footnotes)
