"""No interval compare prints excludes its own value, and a cell with too few timed steps gets
no interval but the words "too few timed steps for an interval", in every format (issue 41:
with 3 timed steps a within-run interval read `0.13× (0.038–0.13)`, its top the point itself,
where the bootstrap's own 97.5 % percentile had fallen below it)."""

from __future__ import annotations

import csv
import io
import json
import math
import random
import re

from builders import record

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.csv_report import render_csv
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.markdown import render_markdown
from mpbench.compare.render.report_tables import report_tables
from mpbench.compare.summary import fmt
from mpbench.compare.summary.estimate import (
    MIN_STEPS,
    TOO_FEW_STEPS,
    Estimate,
    Verdict,
    judge,
    of_repeats,
    paired_difference,
    step_change,
    step_ratio,
    step_time,
    two_sample_ratio,
)
from mpbench.compare.summary.verdict import UNDECIDED, group_verdicts
from mpbench.results import StepTimeStats
from mpbench.results import stats as st

# A CPU without bf16 arithmetic: bf16 several times slower than float32 (the case).
MS = {"float32": 2.4, "mixed_bfloat16": 18.0}


def _run(steps: int) -> list:
    return [
        record(
            "torch",
            "mnist_dense",
            policy,
            median_ms=ms,
            accuracy=0.97,
            rss_mib=600,
            training_mib=40,
            steps=steps,
            spread=0.5,
            config_overrides={"warmup_steps": 0},
        )
        for policy, ms in MS.items()
    ]


def _report(steps: int, **options):
    return build_report(_run(steps), CompareOptions(**options))


def test_the_minimum_is_what_the_median_interval_needs():
    # [min, max] of n values holds the median 1 - 2^(1-n) of the time: 94 % at 5, 97 % at 6.
    assert st.MIN_SAMPLES_FOR_MEDIAN_INTERVAL == st.min_samples_for_median_interval() == 6
    assert MIN_STEPS == st.MIN_SAMPLES_FOR_MEDIAN_INTERVAL


def test_three_timed_steps_give_no_interval_but_say_why_in_every_format():
    report = _report(3)
    group = report.sections[0].groups[0]
    speedup = group.comparisons["mixed_bfloat16"].speedup
    assert speedup is not None and not speedup.has_interval
    assert speedup.no_interval == TOO_FEW_STEPS
    assert speedup.low == speedup.high == speedup.value
    assert group.cells["mixed_bfloat16"].step_time_s.no_interval == TOO_FEW_STEPS

    table = report_tables(report)[0]
    row = next(r for r in table.rows if r[0].endswith("bf16"))
    assert f"0.13× ({TOO_FEW_STEPS})" in row
    assert any(line.startswith(f"{TOO_FEW_STEPS}: ") for line in table.footnotes)
    assert not any(line.startswith(fmt.WITHIN_RUN_MARK) for line in table.footnotes)

    markdown = render_markdown(report)
    assert f"| 0.13× ({TOO_FEW_STEPS}) |" in markdown
    assert "(0.038" not in markdown

    cells = json.loads(render_json(report))["cells"]
    bf16 = next(c for c in cells if c["policy"] == "mixed_bfloat16")
    assert bf16["speedup_vs_float32"]["interval"] is None
    assert bf16["speedup_vs_float32"]["no_interval"] == TOO_FEW_STEPS
    assert bf16["step_time_ms"]["no_interval"] == TOO_FEW_STEPS

    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    bf16_row = next(r for r in rows if r["policy"] == "mixed_bfloat16")
    assert bf16_row["speedup_vs_float32_interval"] == TOO_FEW_STEPS
    assert bf16_row["speedup_vs_float32_low"] == bf16_row["speedup_vs_float32_high"] == ""


def test_no_verdict_or_failed_gate_rests_on_a_speed_up_without_an_interval():
    report = _report(3, min_speedup={"mixed_bfloat16": 1.1})
    (verdict,) = group_verdicts(report.sections[0].groups[0])
    assert verdict.advice == UNDECIDED
    assert f"0.13×), {TOO_FEW_STEPS}" in verdict.evidence
    assert verdict.why.startswith(f"{TOO_FEW_STEPS}: time at least {MIN_STEPS} steps")
    (gate,) = report.results
    assert gate.passed and gate.inconclusive  # 0.13× is far below 1.1×, but on 3 steps
    assert TOO_FEW_STEPS in gate.message
    strict = _report(3, min_speedup={"mixed_bfloat16": 1.1}, require_conclusive=True)
    assert strict.exit_code == 1


def test_from_the_minimum_on_a_within_run_interval_is_given():
    speedup = _report(MIN_STEPS).sections[0].groups[0].comparisons["mixed_bfloat16"].speedup
    assert speedup.has_interval and speedup.no_interval is None
    assert speedup.low < speedup.value < speedup.high


def test_judge_never_fails_an_estimate_whose_interval_could_not_be_taken():
    lone = Estimate.point(0.13, TOO_FEW_STEPS)
    assert judge(lone, minimum=1.1) is Verdict.INCONCLUSIVE
    assert judge(Estimate.point(0.13), minimum=1.1) is Verdict.FAIL  # a plain single value
    assert judge(lone, minimum=0.1) is Verdict.PASS
    assert lone.scaled(2).no_interval == lone.shifted(1).no_interval == TOO_FEW_STEPS


# --- the property: every estimate holds its value, printed too -------------------------------


def _series(rng: random.Random) -> StepTimeStats:
    """Step times as a run can record them: any count, lognormal noise, ties, rare outliers."""
    count = rng.choice([1, 2, 3, 4, 5, 6, 7, 9, 15, 40])
    base = rng.choice([1e-5, 0.002, 0.3, 40.0])
    spread = rng.choice([0.0, 0.01, 0.3, 1.5])
    raw = [base * math.exp(rng.gauss(0.0, spread)) for _ in range(count)]
    if rng.random() < 0.2:
        raw[rng.randrange(count)] *= rng.choice([10.0, 0.1])
    if rng.random() < 0.1:
        raw = [round(t, 4) or base for t in raw]  # coarse clock: ties
    return StepTimeStats.from_samples(raw, warmup_steps=0)


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]\d+)?", text)]


def _printed_holds(text: str, has_interval: bool) -> None:
    """The value as printed lies within the interval as printed (each rounded on its own)."""
    numbers = _numbers(text.replace("–", " ").replace(" to ", " "))
    if not has_interval:
        assert len(numbers) == 1, text
        return
    value, low, high = numbers
    assert low <= value <= high, text


def _holds(estimate: Estimate | None) -> None:
    if estimate is None:
        return
    assert estimate.low <= estimate.value <= estimate.high, estimate
    if not all(map(math.isfinite, (estimate.value, estimate.low, estimate.high))):
        return
    has = estimate.has_interval
    if estimate.value > 0:
        _printed_holds(fmt.ratio_interval(estimate), has)
        _printed_holds(fmt.efficiency_interval(estimate), has)
    _printed_holds(fmt.change_interval(estimate), has)
    _printed_holds(fmt.points_interval(estimate), has)


def test_no_estimate_excludes_its_value_whatever_the_steps():
    rng = random.Random(41)
    for _ in range(200):
        a, b = _series(rng), _series(rng)
        pairs = [(_series(rng), _series(rng)) for _ in range(rng.choice([2, 3, 5]))]
        estimates = [
            step_time([a]),
            step_time([a, b]),
            step_ratio([(a, b)]),
            step_ratio(pairs),
            step_change([a], [b]),
            step_change([a, b], [x for x, _ in pairs]),
            two_sample_ratio([a.median_s], [b.median_s, *(y.median_s for _, y in pairs)]),
            of_repeats([s.median_s for s, _ in pairs]),
            paired_difference([(x.median_s, y.median_s) for x, y in pairs]),
        ]
        for estimate in estimates:
            _holds(estimate)
            if estimate is not None:
                _holds(estimate.scaled(rng.choice([-1.0, 100.0])))
                _holds(estimate.shifted(-1.0))
        few = min(a.count, b.count) < MIN_STEPS
        assert (step_ratio([(a, b)]).no_interval == TOO_FEW_STEPS) == few


def test_an_estimate_built_with_bounds_past_its_value_is_widened_to_hold_it():
    # What rescaling bounds onto a recorded median can do by a rounding error.
    estimate = Estimate(0.1349, 0.038, 0.1348, "within-run only")
    assert (estimate.low, estimate.high) == (0.038, 0.1349)
    assert fmt.ratio_interval(estimate) == "0.13× (0.038–0.13)†"
