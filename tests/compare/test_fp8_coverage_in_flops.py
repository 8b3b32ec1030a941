"""A float8 cell's coverage is the share of the step's matmul FLOPs its fp8 GEMMs take, from the
record's `fp8.flop_share_fp8`, never a count of layers (issue 41: Hugging Face GPT-2's one
converted layer, its tied head, read "fp8 in 1 of 3 layers" while its Conv1D projections, 86 %
of the FLOPs, stayed in bf16). Where the share is unknown the verdict says so, with the record's
reason; the layers mpbench swapped for an nn.Linear so that fp8 could take them (schema 13)
are listed where compare lists fp8's details."""

from __future__ import annotations

import csv
import io
import json

from builders import record

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.csv_report import render_csv
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.report_tables import report_tables
from mpbench.compare.summary.verdict import group_verdicts
from mpbench.results import DeviceInfo, Fp8Stats

H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "9.0", 0)
MS = {"float32": 19.2, "mixed_bfloat16": 2.12, "float8": 1.6}
CONV1D = "transformers Conv1D -> nn.Linear (the same weight, transposed)"
UNKNOWN = "a user workload's FLOPs per sample are not known"


def _fp8(share: float | None, mode: str = "hardware", swapped: dict | None = None) -> Fp8Stats:
    """A GPT-2-like cell: one layer converted, two kept, whatever their FLOPs."""
    return Fp8Stats(
        mode=mode,
        why="fp8 Tensor Cores" if mode == "hardware" else "no CPU has fp8 matrix units",
        requested="auto",
        backend="torchao 0.18.0 float8 training",
        gemm="torch._scaled_mm (cuBLASLt)",
        recipe="tensorwise",
        scaling="dynamic, per tensor",
        formats={"input": "float8_e4m3fn"},
        base_policy="mixed_bfloat16",
        layers_fp8=["lm_head"],
        skipped_layers={"wte": "embedding", "h.0.mlp.c_fc": "out 8 not a multiple of 16"},
        flop_share_fp8=share,
        flop_share_note=None if share is not None else UNKNOWN,
        swapped_layers=swapped or {},
    )


def _report(fp8: Fp8Stats):
    records = []
    for repeat in range(3):
        for policy, ms in MS.items():
            rec = record(
                "torch",
                "mnist_dense",
                policy,
                median_ms=ms * (1 + 0.01 * repeat),
                accuracy=0.97,
                device_mib=900,
                training_mib=500,
                repeat=repeat,
                device=H100,
            )
            if policy == "float8":
                rec.fp8 = fp8
            records.append(rec)
    return build_report(records, CompareOptions())


def _fp8_verdict(report):
    return {v.policy: v for v in group_verdicts(report.sections[0].groups[0])}["float8"]


def test_the_verdict_gives_the_share_of_the_steps_matmul_flops():
    evidence = _fp8_verdict(_report(_fp8(0.93))).evidence
    assert "fp8 covers 93 % of the step's matmul FLOPs" in evidence
    assert "layers" not in evidence and "1 of 3" not in evidence


def test_an_unknown_share_is_said_with_the_records_reason_never_as_a_layer_count():
    evidence = _fp8_verdict(_report(_fp8(None))).evidence
    assert f"fp8's share of the step's matmul FLOPs unknown: {UNKNOWN}" in evidence
    assert "layers" not in evidence


def test_an_emulated_cell_says_its_share_too():
    report = _report(_fp8(0.93, mode="emulated"))
    assert _fp8_verdict(report).evidence.startswith(
        "emulated, fp8 covers 93 % of the step's matmul FLOPs"
    )


def test_the_fp8_table_lists_the_share_and_the_swapped_layers():
    swapped = {f"h.{i}.attn.c_attn": CONV1D for i in range(6)}
    report = _report(_fp8(0.93, swapped=swapped))
    table = next(t for t in report_tables(report) if t.title.startswith("fp8 against bf16"))
    (row,) = table.rows
    assert row[table.headers.index("fp8 FLOPs")] == "93 %"
    assert (
        "torch fp8: 6 layers swapped for an equivalent nn.Linear so that fp8 could take them: "
        f"{CONV1D} (h.0.attn.c_attn, h.1.attn.c_attn, h.2.attn.c_attn, h.3.attn.c_attn and 2 "
        "more)"
    ) in table.footnotes
    fp8 = next(c for c in json.loads(render_json(report))["cells"] if c["policy"] == "float8")
    assert fp8["fp8"]["flop_share"] == 0.93 and fp8["fp8"]["swapped_layers"] == swapped


def test_an_unknown_share_in_the_table_json_and_csv():
    report = _report(_fp8(None))
    table = next(t for t in report_tables(report) if t.title.startswith("fp8 against bf16"))
    (row,) = table.rows
    assert row[table.headers.index("fp8 FLOPs")] == "unknown [1]"
    assert f"[1] fp8's share of the step's matmul FLOPs unknown: {UNKNOWN}" in table.footnotes
    assert not any("swapped" in line for line in table.footnotes)
    fp8 = next(c for c in json.loads(render_json(report))["cells"] if c["policy"] == "float8")
    assert fp8["fp8"]["flop_share"] is None and fp8["fp8"]["flop_share_note"] == UNKNOWN
    rows = csv.DictReader(io.StringIO(render_csv(report)))
    csv_row = next(r for r in rows if r["policy"] == "float8")
    assert csv_row["fp8_flop_share"] == "" and csv_row["fp8_flop_share_note"] == UNKNOWN
