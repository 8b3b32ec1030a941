"""compare and the float8 policy: an emulated cell shows its numerics (accuracy against
float32 and bf16, test loss) and what emulation cost, never a speed-up; a hardware cell is
compared like any other policy, with its fp8 coverage."""

from __future__ import annotations

import csv
import io
import json

import pytest
from builders import record

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.csv_report import render_csv
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.markdown import render_markdown
from mpbench.compare.summary.verdict import NUMERICS_ONLY, RECOMMENDED, group_verdicts
from mpbench.errors import InvalidInput
from mpbench.results import DeviceInfo, Fp8Stats

H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "9.0", 0)
# An emulated torch cell's fp8.gemm, as backends/torch/fp8.py records it on a CPU.
TORCH_GEMM = (
    "emulated (torchao emulate=True): fp8-rounded operands multiplied in float32, "
    "the product cast to bfloat16"
)
MS = {"float32": 2.0, "mixed_bfloat16": 0.8, "float8": 6.0}  # emulated fp8: 3× float32
ACCURACY = {"float32": 0.970, "mixed_bfloat16": 0.968, "float8": 0.966}


def _fp8(mode: str) -> Fp8Stats:
    return Fp8Stats(
        mode=mode,
        why="no CPU has fp8 matrix units" if mode == "emulated" else "fp8 Tensor Cores",
        requested="auto",
        backend="torchao 0.18.0 float8 training",
        gemm=TORCH_GEMM if mode == "emulated" else "torch._scaled_mm (cuBLASLt)",
        recipe="tensorwise",
        scaling="dynamic, per tensor",
        formats={"input": "float8_e4m3fn", "weight": "float8_e4m3fn", "grad_output": "float8_e5m2"},
        base_policy="mixed_bfloat16",
        layers_fp8=["0", "2"],
        skipped_layers={"4": "out 10 not a multiple of 16"},
        flop_share_fp8=0.985,
    )


def _run(mode: str = "emulated", repeats: int = 3, ms: dict | None = None, **where) -> list:
    ms = ms or MS
    records = []
    for repeat in range(repeats):
        for policy in ("float32", "mixed_bfloat16", "float8"):
            rec = record(
                "torch",
                "mnist_dense",
                policy,
                median_ms=ms[policy] * (1 + 0.01 * repeat),
                accuracy=ACCURACY[policy] + 0.001 * repeat,
                rss_mib=600,
                repeat=repeat,
                **where,
            )
            if policy == "float8":
                rec.fp8 = _fp8(mode)
            records.append(rec)
    return records


def _group(records, **options):
    report = build_report(records, CompareOptions(**options))
    return report, report.sections[0].groups[0]


def test_an_emulated_cell_has_no_speed_up_and_says_what_emulation_cost():
    _, group = _run_report()
    assert (
        group.comparisons["float8"].speedup is None
        and group.comparisons["float8"].end_to_end_speedup is None
    )
    assert group.comparisons["float8"].memory_ratio is None
    cost = group.comparisons["float8"].emulation_cost
    assert cost is not None and 2.9 < cost.value < 3.1 and cost.has_interval
    verdict = {v.policy: v for v in group_verdicts(group)}["float8"]
    assert verdict.advice == NUMERICS_ONLY
    # Why it was emulated, then how its GEMMs ran: the record's words, none of compare's own.
    assert verdict.why == f"no CPU has fp8 matrix units; {TORCH_GEMM}"
    assert verdict.evidence.startswith("emulated, fp8 covers 98 % of the step's matmul FLOPs")
    assert "-0.40 pp" in verdict.evidence and "accuracy vs fp32" in verdict.evidence
    assert "-0.20 pp" in verdict.evidence and "accuracy vs bf16" in verdict.evidence
    assert "step time 3.00× float32's: the cost of emulation" in verdict.evidence
    assert "faster" not in verdict.evidence and "slower" not in verdict.evidence
    # bf16 beside it is still judged on its speed.
    assert {v.policy: v for v in group_verdicts(group)}["mixed_bfloat16"].advice == RECOMMENDED


def _run_report(**options):
    return _group(_run(), **options)


def test_the_table_says_emulated_where_the_speed_up_would_be():
    report, _ = _run_report()
    text = render_markdown(report)
    row = next(line for line in text.splitlines() if "fp8" in line and "emulated" in line)
    assert "×" not in row.split("emulated")[0].split("|")[-1]  # no ratio before the mark
    assert "the cost of emulation, not fp8's: no speed-up or memory ratio is shown" in text


def test_json_and_csv_carry_the_mode_the_cost_and_the_bf16_delta():
    report, _ = _run_report()
    cells = json.loads(render_json(report))["cells"]
    fp8 = next(c for c in cells if c["policy"] == "float8")
    assert fp8["speedup_vs_float32"] is None
    assert fp8["fp8"]["mode"] == "emulated" and fp8["fp8"]["flop_share"] == 0.985
    assert fp8["fp8"]["gemm"] == TORCH_GEMM
    assert 2.9 < fp8["fp8"]["emulation_cost_vs_float32"]["value"] < 3.1
    assert round(fp8["fp8"]["vs_bfloat16"]["accuracy_delta_pp"]["value"], 2) == -0.2
    assert fp8["test_loss"] is not None
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    row = next(r for r in rows if r["policy"] == "float8")
    assert row["fp8_mode"] == "emulated" and row["speedup_vs_float32"] == ""
    assert 2.9 < float(row["fp8_emulation_cost_vs_float32"]) < 3.1
    assert next(r for r in rows if r["policy"] == "float32")["fp8_mode"] == ""


def test_a_speed_up_gate_on_emulated_fp8_is_refused_and_the_accuracy_gate_runs():
    with pytest.raises(InvalidInput) as refused:
        _run_report(min_speedup={"float8": 1.2})
    assert "fp8 ran emulated here" in str(refused.value)
    assert "--max-accuracy-delta" in str(refused.value)
    report, _ = _run_report(max_accuracy_delta_pp=0.3)
    (failure,) = report.failures  # -0.40 pp against float32
    assert failure.gate == "max-accuracy-delta" and "float8" in failure.cell


def test_a_hardware_cell_is_judged_on_its_speed_with_its_fp8_coverage():
    ms = {"float32": 2.0, "mixed_bfloat16": 0.5, "float8": 0.4}
    _, group = _group(_run("hardware", ms=ms, device=H100))
    speedup = group.comparisons["float8"].speedup
    assert speedup is not None and 4.9 < speedup.value < 5.1
    assert group.comparisons["float8"].emulation_cost is None
    verdict = {v.policy: v for v in group_verdicts(group)}["float8"]
    assert verdict.advice == RECOMMENDED
    assert "faster" in verdict.evidence
    assert "fp8 covers 98 % of the step's matmul FLOPs" in verdict.evidence


def test_one_emulated_repeat_makes_the_cell_emulated():
    records = _run("hardware", device=H100)
    last = [r for r in records if r.policy == "float8"][-1]
    last.fp8 = _fp8("emulated")
    _, group = _group(records)
    assert group.emulated("float8") and group.comparisons["float8"].speedup is None


def test_the_verdict_says_how_each_backend_emulated_from_its_record():
    """torchao and Keras emulate in different dtypes: compare repeats each record's gemm and
    claims no dtype of its own (issue 33 item 6: it said "multiplied in float32" for both)."""
    keras_gemm = (
        "emulated (Keras float8 quantise-dequantise): fp8-rounded operands multiplied in bfloat16"
    )
    records = _run()
    for rec in records:
        if rec.fp8 is not None:
            rec.fp8.gemm = keras_gemm
    _, group = _group(records)
    verdict = {v.policy: v for v in group_verdicts(group)}["float8"]
    assert verdict.why == f"no CPU has fp8 matrix units; {keras_gemm}"
    assert "float32" not in verdict.why
