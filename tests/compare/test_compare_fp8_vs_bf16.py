"""compare and fp8 on fp8 hardware (issue 36): fp8 against bf16, the policy it builds on, with
or without float32 beside them; the gain its GEMMs predicted and why it lost; which side was
compiled; a --min-speedup gate against bf16. The records are an H100's, as the torch backend
writes them (tests/builders.py); no GPU is needed to read them."""

from __future__ import annotations

import csv
import io
import json

import pytest
from builders import fp8_stats, record

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.csv_report import render_csv
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.markdown import render_markdown
from mpbench.compare.summary.verdict import AVOID, NO_RATIO, RECOMMENDED, group_verdicts
from mpbench.errors import InvalidInput
from mpbench.parsers import parse_min_speedup
from mpbench.results import CompileStats, DeviceInfo, Fp8Stats
from mpbench.results.schema import BottleneckStats, Fp8GemmRow, Fp8Prediction

H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "9.0", 0)
# mnist_dense at batch 8192 on the H200 of the first GPU run: bf16 2.12 ms, fp8 eager 6.02 ms.
SLOW_FP8 = {"float32": 19.2, "mixed_bfloat16": 2.12, "float8": 6.02}
FAST_FP8 = {"float32": 19.2, "mixed_bfloat16": 2.12, "float8": 1.6}


def _prediction(gain: float) -> Fp8Prediction:
    """Two rows of mnist_dense's first layer, K = 784: the smallest dimension is the reason."""
    rows = [
        Fp8GemmRow("0", "forward", 8192, 784, 4096, 0.05, 0.04, 0.06, 0.5),
        Fp8GemmRow("0", "grad_weight", 4096, 8192, 784, 0.05, 0.04, 0.06, 0.5),
    ]
    return Fp8Prediction(rows, gain, 3500.0, "torch.mm bf16 vs torch._scaled_mm tensorwise")


def _fp8(gain: float | None, compiled: bool) -> Fp8Stats:
    return fp8_stats(
        skipped_layers={"4": "out 10 not a multiple of 16"},
        compiled=compiled,
        prediction=_prediction(gain) if gain is not None else None,
    )


def _run(
    ms: dict[str, float],
    policies=("float32", "mixed_bfloat16", "float8"),
    gain: float | None = 0.46,
    fp8_compiled: bool = True,
) -> list:
    records = []
    for repeat in range(3):
        for policy in policies:
            rec = record(
                "torch",
                "mnist_dense",
                policy,
                median_ms=ms[policy] * (1 + 0.01 * repeat),
                accuracy=0.97 - 0.001 * repeat,
                device_mib=900,
                training_mib=500,
                repeat=repeat,
                device=H100,
            )
            if policy == "float8":
                rec.fp8 = _fp8(gain, fp8_compiled)
                if fp8_compiled:  # a compiled cell's record holds its compile time
                    rec.compile = CompileStats("inductor", 12.5, 0, 2, 1)
            records.append(rec)
    return records


def _report(records, **options):
    report = build_report(records, CompareOptions(**options))
    return report, report.sections[0].groups[0]


def _verdicts(group):
    return {v.policy: v for v in group_verdicts(group)}


def test_fp8_slower_than_bf16_is_avoided_with_its_prediction_as_the_reason():
    _, group = _report(_run(SLOW_FP8))
    against = group.comparisons["float8"].vs_base
    assert against is not None and against.base == "mixed_bfloat16"
    assert 0.34 < against.speedup.value < 0.36 and against.speedup.has_interval
    verdict = _verdicts(group)["float8"]
    assert verdict.advice == AVOID
    assert verdict.evidence.startswith("2.8× slower than bf16 (0.35×), 95 % ")
    assert "3.19× float32's speed (fp8 compiled, fp32 eager)" in verdict.evidence
    assert verdict.why.startswith(
        "fp8 loses here: its GEMMs are too small (predicted 0.46× on its layers, measured 0.35×"
    )
    assert "smallest dimension 784" in verdict.why
    # fp8 compiled, bf16 eager: said, with what would make them alike
    assert against.compiled == "fp8 compiled, bf16 eager"
    assert "fp8 compiled, bf16 eager: add --compile to compile bf16 too" in verdict.why


def test_fp8_faster_than_bf16_is_recommended_and_the_prediction_agrees():
    _, group = _report(_run(FAST_FP8, gain=1.3, fp8_compiled=False))
    verdict = _verdicts(group)["float8"]
    assert verdict.advice == RECOMMENDED
    assert verdict.evidence.startswith("1.32× faster than bf16")
    assert "fp8 should gain 1.30× on these layers (measured 1.32×)" in verdict.why
    assert group.comparisons["float8"].vs_base.compiled is None  # both eager


def test_without_float32_fp8_is_still_judged_against_bf16():
    records = _run(SLOW_FP8, policies=("mixed_bfloat16", "float8"))
    report, group = _report(records)
    verdicts = _verdicts(group)
    assert verdicts["mixed_bfloat16"].advice == NO_RATIO  # bf16 has only float32 to beat
    assert verdicts["float8"].advice == AVOID
    assert "float32's speed" not in verdicts["float8"].evidence
    text = render_markdown(report)
    assert "fp8 against bf16: mnist_dense" in text and "fp8 GEMMs: mnist_dense" in text
    row = next(line for line in text.splitlines() if line.startswith("| torch fp8 | hardware"))
    assert "yes / no" in row and "0.35×" in row and "0.46×" in row
    shape = next(line for line in text.splitlines() if line.startswith("| torch fp8 | 8192×784"))
    assert "1 (forward)" in shape and "0.50×" in shape


def test_the_fp8_gate_against_bf16_fails_passes_and_needs_the_reference():
    records = _run(SLOW_FP8, policies=("mixed_bfloat16", "float8"))
    gate = parse_min_speedup(["fp8:bf16=1.1"])
    assert gate == {"float8:mixed_bfloat16": 1.1}
    report, _ = _report(records, min_speedup=gate)
    (failure,) = report.failures
    assert failure.gate == "min-speedup" and "speed-up vs bf16 0.35×" in failure.message
    report, _ = _report(records, min_speedup=parse_min_speedup(["fp8:bf16=0.3"]))
    assert report.failures == []
    # against float32, which did not run: nothing comparable, one line
    with pytest.raises(InvalidInput, match="no framework and workload has both a float32"):
        _report(records, min_speedup=parse_min_speedup(["fp8=1.1"]))


def test_a_reference_that_is_no_base_is_refused():
    with pytest.raises(InvalidInput, match="measured against fp32 or bf16, not 'fp16'"):
        parse_min_speedup(["fp8:fp16=1.1"])
    with pytest.raises(InvalidInput, match="bf16's speed-up is measured against fp32, not"):
        parse_min_speedup(["bf16:fp8=1.1"])
    assert parse_min_speedup(["fp8:fp32=1.1"]) == {"float8": 1.1}  # the plain gate


def test_json_and_csv_carry_fp8_against_bf16_and_the_prediction():
    report, _ = _report(_run(SLOW_FP8))
    cells = json.loads(render_json(report))["cells"]
    fp8 = next(c for c in cells if c["policy"] == "float8")["fp8"]
    assert fp8["compiled"] is True and fp8["predicted_gain_vs_bfloat16"] == 0.46
    assert 0.34 < fp8["vs_bfloat16"]["speedup"]["value"] < 0.36
    assert fp8["vs_bfloat16"]["compiled"] == "fp8 compiled, bf16 eager"
    assert fp8["prediction"]["rows"][0]["k"] == 784
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    row = next(r for r in rows if r["policy"] == "float8")
    assert row["fp8_compiled"] == "True" and row["fp8_predicted_gain_vs_bfloat16"] == "0.46"
    assert 0.34 < float(row["fp8_speedup_vs_bfloat16"]) < 0.36


def test_a_launch_bound_step_says_the_gemms_do_not_set_its_pace():
    # The H200's transformer_lm at the accelerator preset, compiled: fp8 as fast as bf16
    # (1.00×) although its GEMMs predicted 0.52×, both steps bound by kernel launches.
    launch = BottleneckStats(
        kind="launch-bound",
        evidence="device busy 31 % of the step",
        remedy="a larger batch, CUDA graphs",
        source="torch.profiler CUDA kernel time over 5 steps",
    )
    records = _run({**SLOW_FP8, "float8": 2.12}, gain=0.52)
    for rec in records:
        rec.bottleneck = launch
    _, group = _report(records)
    verdict = _verdicts(group)["float8"]
    assert "predicted 0.52× on its layers, measured 1.00×" in verdict.why
    assert (
        "the step is launch-bound (device busy 31 % of the step); would help: a larger batch"
        in (verdict.why)
    )


def test_without_bf16_a_compiled_fp8_against_eager_float32_says_so():
    records = _run(FAST_FP8, policies=("float32", "float8"), gain=1.3)
    _, group = _report(records)
    verdict = _verdicts(group)["float8"]
    assert group.comparisons["float8"].vs_base is None  # no bf16 cell: against float32
    assert verdict.evidence.startswith("12.0× faster")
    assert verdict.why.endswith("fp8 compiled, fp32 eager: add --compile to compile fp32 too")
