"""`mpbench run --repeat auto`: Stein's two-stage rule (runner/adaptive.py), its settings, its
progress lines, compare's note, and one real run."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path

import pytest
from builders import record, run_options, write_run
from cli import run_mpbench

from mpbench.compare import CompareOptions, compare
from mpbench.errors import InvalidInput
from mpbench.policies import DeviceTraits
from mpbench.results import Status
from mpbench.results.stats import t_quantile
from mpbench.runner.adaptive import (
    AdaptiveRepeats,
    budget_allows,
    cell_label,
    decide,
    half_widths,
    log_speedups,
    pilot_rounds,
    required_rounds,
    stop_reason,
)
from mpbench.runner.config import (
    RunConfig,
    RunOptions,
    build_config,
    contradictions,
    parse_file,
)
from mpbench.runner.matrix import expand
from mpbench.runner.progress import pilot_line, round_line

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QUICK = CONFIGS / "quick.toml"
H = math.log(1.05)
T4 = t_quantile(0.975, 4)  # 2.776: the pilot of 5 rounds has 4 degrees of freedom
BF16 = "torch/mnist_dense/mixed_bfloat16"
FP16 = "torch/mnist_dense/mixed_float16"


def spread(s: float, n: int = 5) -> list[float]:
    """n log speed-ups around ln 2 whose sample standard deviation is exactly s."""
    base = [i - (n - 1) / 2 for i in range(n)]
    scale = s / math.sqrt(sum(b * b for b in base) / (n - 1))
    return [math.log(2) + b * scale for b in base]


# --- the rule ------------------------------------------------------------------------------


def test_a_known_spread_gives_the_known_number_of_rounds():
    # (t · s0 / h)² = (2.776 · 0.05 / ln 1.05)² = 8.10 -> 9
    assert required_rounds(0.05, 5, 0.05) == math.ceil((T4 * 0.05 / H) ** 2) == 9
    assert required_rounds(0.08, 5, 0.05) == 21  # more than the cap: decide() clamps it
    assert required_rounds(0.05, 5, 0.10) == 3  # a looser target needs fewer
    decision = decide({BF16: spread(0.05)}, precision=0.05, max_repeats=10)
    assert (decision.n0, decision.planned) == (5, 9)
    assert decision.s0[BF16] == pytest.approx(0.05)
    assert decision.needed == {BF16: 9}
    assert BF16 in decision.reason and "needs 9" in decision.reason


def test_a_narrow_pilot_still_runs_the_pilot_and_the_widest_cell_decides():
    assert decide({BF16: spread(0.01)}, 0.05, 10).planned == 5  # clamp(1, n0, max) = n0
    decision = decide({BF16: spread(0.01), FP16: spread(0.05)}, 0.05, 10)
    assert decision.planned == 9 and FP16 in decision.reason
    assert decide({}, 0.05, 10).planned == 5  # only float32 ran: nothing to size


def test_the_cap_binds_and_says_so():
    decision = decide({BF16: spread(0.08)}, 0.05, 10)
    assert decision.planned == 10 and decision.needed[BF16] == 21
    assert decision.capped(10) and "capped at --max-repeats 10" in decision.reason
    widths = half_widths(decision, {BF16: spread(0.08, 10)})
    assert widths[BF16] > 0.05  # the interval is wider than asked, and says by how much
    assert stop_reason(decision, 10, 10, False, widths) == (
        f"max-repeats reached (widest ±{widths[BF16] * 100:.1f} %)"
    )


def test_a_small_max_repeats_shortens_the_pilot():
    assert pilot_rounds(10) == 5 and pilot_rounds(3) == 3
    decision = decide({BF16: spread(0.01, 3)}, 0.05, 3)
    assert (decision.n0, decision.planned) == (3, 3)
    # The pilot's degrees of freedom are those of its ratios: t_{0.975, 2} = 4.30.
    assert decision.needed[BF16] == math.ceil((t_quantile(0.975, 2) * 0.01 / H) ** 2)


def test_a_cell_with_fewer_than_two_ratios_needs_max_repeats_and_is_named():
    decision = decide({BF16: spread(0.01), FP16: [math.log(3)]}, 0.05, 10)
    assert decision.planned == 10 and decision.unsized == [FP16]
    assert f"{FP16}: 1 ratio in the pilot, too few to size it" in decision.reason
    assert stop_reason(decision, 10, 10, False, {}) == (
        f"max-repeats reached ({FP16} could not be sized)"
    )


def test_stein_half_width_uses_the_pilot_spread_not_the_final_one():
    decision = decide({BF16: spread(0.05)}, 0.05, 10)
    final = spread(0.05) + [math.log(2)] * 4  # 9 ratios, the last ones all alike
    width = half_widths(decision, {BF16: final})[BF16]
    assert width == pytest.approx(math.expm1(T4 * 0.05 / 3))  # t_{4} · s0 / √9
    assert width <= 0.05  # what the rule promises when the cap does not bind
    assert stop_reason(decision, 10, 9, False, {BF16: width}) == "planned repeats reached"


def test_the_budget_stops_only_a_round_that_would_end_past_it():
    assert budget_allows(100.0, 2, 160.0)  # 2 rounds took 100 s: the 3rd ends near 150 s
    assert not budget_allows(100.0, 2, 140.0)
    assert budget_allows(1e9, 0, 1.0)  # the first round always runs: nothing to estimate from
    assert budget_allows(1e9, 5, None)
    assert stop_reason(None, 10, 3, True, {}) == "time budget reached after 3 rounds"


# --- from records to ratios ----------------------------------------------------------------


def _cell(policy: str, median_ms: float | None, **more):
    """A record whose median step is exactly `median_ms` (None: an error, no numbers)."""
    if median_ms is None:
        return record("torch", "mnist_dense", policy, status=Status.ERROR, reason="boom", **more)
    rec = record("torch", "mnist_dense", policy, median_ms=median_ms, **more)
    rec.step_time = dataclasses.replace(rec.step_time, median_s=median_ms / 1000)
    return rec


def _round(repeat: int, bf16_ms: float | None, fp32_ms: float = 2.0) -> list:
    return [
        _cell("float32", fp32_ms, repeat=repeat),
        _cell("mixed_bfloat16", bf16_ms, repeat=repeat),
        record("torch", "mnist_dense", "tf32", status=Status.SKIPPED, repeat=repeat, reason="no"),
    ]


def test_log_speedups_pair_by_repeat_and_leave_out_what_cannot_be_measured():
    records = _round(0, 1.0) + _round(1, None) + _round(2, 0.8)
    found = log_speedups(records)
    # tf32 is skipped in every round: no number of rounds would measure it.
    assert set(found) == {BF16}
    assert found[BF16] == pytest.approx({0: math.log(2.0), 2: math.log(2.5)})
    # A fallback of a diverged cell was not asked for: it is not sized.
    fallback = _cell("mixed_bfloat16", 1.0, repeat=3)
    fallback.fallback_of = "torch/mnist_dense/mixed_float16/r3"
    assert 3 not in log_speedups([*records, *_round(3, None)[:1], fallback])[BF16]
    assert cell_label("torch/mnist_dense/mixed_float16@ls1024@acc4/r12") == (
        "torch/mnist_dense/mixed_float16@ls1024@acc4"
    )


def test_a_larger_16_bit_batch_is_compared_per_sample():
    base = dict(config_overrides={"batch_size": 256, "reference_batch_size": 128})
    records = [_cell("float32", 2.0), _cell("mixed_bfloat16", 2.0, recipe="@bs2", **base)]
    # Twice the samples in the same time: twice the throughput.
    assert log_speedups(records) == {f"{BF16}@bs2": {0: pytest.approx(math.log(2))}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _runs(adaptive: AdaptiveRepeats, rounds: list[list], clock: Clock, round_s: float) -> list:
    records: list = []
    for index, cells in enumerate(rounds):
        if not adaptive.may_start(index):
            break
        records += cells
        clock.now += round_s
        adaptive.round_done(index, records)
    adaptive.finish(records)
    return records


def test_a_run_stops_at_the_planned_rounds_and_never_looks_again():
    # Pilot log speed-ups with s0 = 0.05 plan 9 rounds; the rounds after it are all alike,
    # which a rule that re-checked would take as a reason to stop at once.
    logs = spread(0.05) + [math.log(2.0)] * 5
    rounds = [_round(r, 2.0 / math.exp(v)) for r, v in enumerate(logs)]
    clock = Clock()
    adaptive = AdaptiveRepeats(0.05, 10, clock=clock)
    _runs(adaptive, rounds, clock, 60.0)
    assert adaptive.decision is not None and adaptive.decision.planned == 9
    assert adaptive.ran == 9 and adaptive.stopped == "planned repeats reached"
    block = adaptive.block()
    assert block["rule"] == "stein two-stage"
    assert (block["pilot"], block["planned"], block["ran"], block["precision"]) == (5, 9, 9, 0.05)
    assert block["half_width"][BF16] == pytest.approx(math.expm1(T4 * 0.05 / 3), abs=1e-5)
    assert block["s0"][BF16] == pytest.approx(0.05)


def test_the_time_budget_stops_before_a_round_that_would_not_fit():
    logs = spread(0.05) + [math.log(2.0)] * 5
    rounds = [_round(r, 2.0 / math.exp(v)) for r, v in enumerate(logs)]
    clock = Clock()
    # 60 s a round, 400 s allowed: 6 rounds end at 360 s, a 7th would end at 420 s.
    adaptive = AdaptiveRepeats(0.05, 10, budget_s=400.0, clock=clock)
    _runs(adaptive, rounds, clock, 60.0)
    assert adaptive.ran == 6 and adaptive.stopped == "time budget reached after 6 rounds"
    assert adaptive.block()["planned"] == 9
    # A resumed run counts the time its finished cells took before.
    resumed = AdaptiveRepeats(0.05, 10, budget_s=400.0, prior_s=360.0, clock=clock)
    assert not resumed.may_start(6)


def test_the_budget_can_stop_the_pilot_and_then_nothing_was_planned():
    rounds = [_round(r, 1.0 + 0.01 * r) for r in range(10)]
    clock = Clock()
    adaptive = AdaptiveRepeats(0.05, 10, budget_s=100.0, clock=clock)
    _runs(adaptive, rounds, clock, 40.0)
    assert adaptive.ran == 2 and adaptive.decision is None
    block = adaptive.block()
    assert block["planned"] is None and block["stopped"] == "time budget reached after 2 rounds"
    assert block["half_width"][BF16] is not None  # the t-interval of the two rounds


# --- what the user sees --------------------------------------------------------------------


def test_the_progress_lines():
    assert round_line(3, None, 10, (BF16, 0.079), 0.05) == (
        f"round 3/≤10, widest ±7.9 % ({BF16}), target ±5 %"
    )
    assert round_line(6, 7, 10, (BF16, 0.041), 0.025) == (
        f"round 6/7, widest ±4.1 % ({BF16}), target ±2.5 %"
    )
    assert "no interval yet" in round_line(1, None, 10, None, 0.05)
    line = pilot_line(decide({BF16: spread(0.05)}, 0.05, 10), 10)
    assert line.startswith("pilot of 5 rounds done: planned 9 of at most 10 rounds (4 more")


# --- settings ------------------------------------------------------------------------------


def _config(**options) -> RunConfig:
    return build_config(RunOptions(config=QUICK, **options))


def test_auto_and_its_settings_from_the_command_line_and_the_file(tmp_path):
    config = _config(repeat="auto", precision="2.5%", max_repeats=8, time_budget="10m")
    assert (config.repeat, config.precision, config.max_repeats) == ("auto", 0.025, 8)
    assert config.time_budget == 600.0 and config.rounds == 8
    assert _config(repeat="auto", precision="0.05", time_budget="90").time_budget == 90.0
    assert _config(repeat="3").repeat == 3  # the CLI's text
    path = tmp_path / "auto.toml"
    path.write_text(
        '[run]\nrepeat = "auto"\nprecision = "5%"\nmax_repeats = 6\ntime_budget = "1.5h"\n'
    )
    config = build_config(RunOptions(config=path))
    assert (config.repeat, config.precision, config.max_repeats) == ("auto", 0.05, 6)
    assert config.time_budget == 5400.0
    path.write_text("[run]\nrepeat = 'auto'\nprecision = 0.1\ntime_budget = 30\n")
    assert (build_config(RunOptions(config=path)).precision, parse_file(path)["run"]) == (
        0.1,
        {"repeat": "auto", "precision": 0.1, "time_budget": 30.0},
    )
    stored = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert stored == config


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"precision": "0"}, "--precision '0': must be above 0"),
        ({"precision": "0%"}, "--precision '0%': must be above 0"),
        ({"precision": "5"}, "--precision '5' is ambiguous: write 5% .* or 0.05"),
        ({"precision": "abc"}, "--precision 'abc': expected a percentage"),
        ({"precision": "150%"}, "--precision 1.5: must be at most 1"),
        ({"max_repeats": 0}, "--max-repeats 0: must be at least 2"),
        ({"max_repeats": 5000}, "--max-repeats 5000: must be at most 1000"),
        ({"time_budget": "soon"}, "--time-budget 'soon': must be seconds, or a number with"),
        ({"time_budget": "0m"}, "--time-budget '0m': must be above 0 seconds"),
        ({"seed": 2**32 - 5}, "with 10 repeats reaches"),  # max-repeats rounds of seeds
    ],
)
def test_bad_auto_settings_are_one_line(options, message):
    with pytest.raises(InvalidInput, match=message):
        _config(repeat="auto", **options)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[run]\nrepeat = 'sometimes'\n", "repeat = 'sometimes': must be a whole number or 'auto'"),
        ("[run]\nrepeat = true\n", "repeat = True: must be a whole number or 'auto'"),
        ("[run]\nprecision = '-5%'\n", "precision = '-5%': must not be negative"),
        ("[run]\nmax_repeats = 1\n", "max_repeats = 1: must be at least 2"),
        ("[run]\ntime_budget = -1\n", "time_budget = -1: must be above 0 seconds"),
    ],
)
def test_bad_auto_settings_in_the_file(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=message):
        parse_file(path)


def test_auto_only_options_without_auto_are_refused():
    with pytest.raises(InvalidInput, match="--max-repeats: applies to --repeat auto only"):
        _config(repeat=3, max_repeats=5)
    with pytest.raises(InvalidInput, match=r"--precision: .* \(this run has --repeat 4\)"):
        _config(repeat=4, precision="5%")


def test_resuming_an_auto_run_keeps_its_settings():
    stored = RunConfig.from_dict(
        json.loads(json.dumps(_config(repeat="auto", max_repeats=8).to_dict()))
    )
    assert contradictions(stored, RunOptions()) == []
    assert contradictions(stored, RunOptions(repeat="auto", max_repeats=8)) == []
    assert contradictions(stored, RunOptions(repeat="3")) == ["--repeat 3 (the run has auto)"]
    assert contradictions(stored, RunOptions(max_repeats=6)) == ["--max-repeats 6 (the run has 8)"]
    assert contradictions(stored, RunOptions(precision="10%")) == [
        "--precision 0.1 (the run has 0.05)"
    ]
    fixed = _config(repeat=3)
    with pytest.raises(InvalidInput, match="applies to --repeat auto only"):
        contradictions(fixed, RunOptions(time_budget="10m"))
    assert contradictions(fixed, RunOptions(repeat="auto")) == ["--repeat auto (the run has 3)"]


class Report:
    """A DetectReport with one CPU and nothing else (tests/runner/test_cells.py has more)."""

    gpus: tuple = ()
    nvidia_device_files_present = False

    def device_traits(self, kind: str, index: int | None = None) -> DeviceTraits | None:
        return DeviceTraits("cpu", "AMD EPYC", cpu_flags=frozenset({"avx512_bf16"}))


def test_auto_expands_max_repeats_rounds_with_the_round_outermost():
    options = dict(frameworks=["torch"], workloads=["mnist_dense"], policies=["fp32", "bf16"])
    config = _config(repeat="auto", max_repeats=4, **options)
    _, _, cells = expand(config, Report(), "run-1")
    assert [c.spec.cell_id for c in cells[:4]] == [
        "torch/mnist_dense/float32/r0",
        "torch/mnist_dense/mixed_bfloat16/r0",
        "torch/mnist_dense/float32/r1",
        "torch/mnist_dense/mixed_bfloat16/r1",
    ]
    assert len(cells) == 8 and [c.spec.seed for c in cells[::2]] == [0, 1, 2, 3]
    fixed = _config(repeat=2, **{**options, "workloads": ["mnist_dense", "cifar10_cnn"]})
    _, _, cells = expand(fixed, Report(), "run-1")  # a fixed count keeps its order
    assert [c.spec.cell_id for c in cells[:3]] == [
        "torch/mnist_dense/float32/r0",
        "torch/mnist_dense/mixed_bfloat16/r0",
        "torch/mnist_dense/float32/r1",
    ]


# --- compare -------------------------------------------------------------------------------


def test_compare_says_why_an_auto_run_stopped(tmp_path):
    run_dir = write_run(tmp_path / "run", [*_round(0, 1.0), *_round(1, 1.1)])
    block = {
        "rule": "stein two-stage",
        "pilot": 5,
        "planned": 7,
        "ran": 6,
        "precision": 0.05,
        "stopped": "time budget reached after 6 rounds",
        "half_width": {BF16: 0.031},
    }
    run_id = "20260301-101500-cpu"
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "adaptive": block}))
    out = io.StringIO()
    compare(CompareOptions(paths=[run_dir]), stdout=out)
    text = " ".join(out.getvalue().split())
    assert (
        f"run {run_id}: --repeat auto stopped after 6 rounds: time budget reached after 6 "
        f"rounds (stein two-stage: pilot 5, planned 7; widest ±3.1 % in {BF16}, target ±5 %)"
    ) in text
    out = io.StringIO()
    compare(CompareOptions(paths=[run_dir], format="json"), stdout=out)
    data = json.loads(out.getvalue())
    assert data["adaptive_repeats"] == {run_id: block}
    assert any("time budget reached" in note for note in data["notes"])


# --- a real run ----------------------------------------------------------------------------

TINY = [
    "-f",
    "torch",
    "-p",
    "fp32",
    "-p",
    "bf16",
    *run_options(units=16, max_steps=4, warmup_steps=1, repeat=None),
]


# The progress lines hold "≤": stdout in UTF-8 whatever the locale (a new interpreter).
UTF8 = {"PYTHONIOENCODING": "utf-8"}


@pytest.mark.torch
@pytest.mark.slow
def test_repeat_auto_runs_rounds_records_why_it_stopped_and_compare_says_it(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    result = run_mpbench(
        "run", *TINY, "--repeat", "auto", "--max-repeats", "3", "--out", str(out), env=UTF8
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["policy"], r["repeat"]) for r in lines) == [
        (p, r) for p in ("float32", "mixed_bfloat16") for r in range(3)
    ]
    assert all(r["status"] == "ok" for r in lines), [r["reason"] for r in lines]
    # Rounds: both policies of round 0, then of round 1, ...
    assert [r["repeat"] for r in lines] == [0, 0, 1, 1, 2, 2]

    stdout = " ".join(result.stdout.split())
    assert "round 1/≤3, no interval yet" in stdout
    assert "round 2/≤3, widest ±" in stdout and f"({BF16}), target ±5 %" in stdout
    assert "pilot of 3 rounds done: planned 3 of at most 3 rounds" in stdout

    state = json.loads((out / "run.json").read_text())
    assert state["config"]["repeat"] == "auto" and state["config"]["max_repeats"] == 3
    block = state["adaptive"]
    assert block["rule"] == "stein two-stage"
    assert (block["pilot"], block["planned"], block["ran"]) == (3, 3, 3)
    assert block["precision"] == 0.05
    stopped = block["stopped"]
    assert stopped == "planned repeats reached" or stopped.startswith("max-repeats reached (widest")
    assert f"--repeat auto stopped after 3 rounds: {block['stopped']}" in stdout
    assert set(block["half_width"]) == {BF16} and block["half_width"][BF16] > 0

    compared = run_mpbench("compare", str(out), env=UTF8)
    assert compared.returncode == 0, compared.stderr
    assert f"--repeat auto stopped after 3 rounds: {block['stopped']}" in " ".join(
        compared.stdout.split()
    )

    # --resume of the finished run: nothing runs again, and it stops for the same reason.
    resumed = run_mpbench("run", "--out", str(out), "--resume", env=UTF8)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("already done (--resume)") == 6
    assert json.loads((out / "run.json").read_text())["adaptive"] == block
