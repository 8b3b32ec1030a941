"""A verdict per framework × workload: what each policy buys on this machine, and the advice.

Built from the numbers (speed-up with its 95 % interval, accuracy delta, training memory) and
from the device's rating of the policy (mpbench.policies), so that "0.18×" comes with the why
("this CPU has no fp16 arithmetic"). Evidence that does not decide is said to be inconclusive.
"""

from __future__ import annotations

import math

from mpbench.compare.summary import fmt
from mpbench.compare.summary.accuracy import INCONCLUSIVE, WORSE, AccuracyVerdict
from mpbench.compare.summary.cells import CellSummary, PolicyGroup, is_training_memory
from mpbench.compare.summary.comparison import PolicyVerdict, compile_said, short
from mpbench.compare.summary.estimate import MIN_STEPS, WITHIN_RUN, Estimate
from mpbench.fp8_gemms import explain
from mpbench.policies import BASELINE, DeviceTraits, Rating, rate

RECOMMENDED = "recommended here"
AVOID = "avoid"
CAREFUL = "use with care"
UNDECIDED = "inconclusive"
NOT_MEASURED = "not measured"
# Measured, but there is nothing to divide by: no finished float32 cell in the group, or no
# repeat of it to pair with (a `--policy fp16 --on-diverge fallback` run has no float32).
NO_RATIO = "measured, no ratio to float32"
FELL_BACK = "fell back"  # diverged, and --on-diverge fallback ran it one step down
REMEASURE = "re-measure on a quiet machine"  # contended or implausible evidence decides nothing
# An emulated fp8 cell (docs/policies.md): its accuracy is fp8's, its step time emulation's.
NUMERICS_ONLY = "numerics only: fp8 emulated, no speed measured"
# What decides a speed-up whose interval could not be taken (estimate.TOO_FEW_STEPS).
MORE_STEPS = (
    f"time at least {MIN_STEPS} steps per cell (--max-steps, --warmup-steps) or run --repeat 3"
)


def traits_of(cell: CellSummary) -> DeviceTraits | None:
    """The device as the policy table rates it, rebuilt from what the records say."""
    record = next(iter(cell.records), None)
    if record is None:
        return None
    device = record.device
    if device.kind == "cpu":
        # The runner records the CPU's precision flags as its capability (none: no flag).
        flags = frozenset(filter(None, (device.capability or "").split(",")))
        return DeviceTraits(kind="cpu", name=device.name, cpu_flags=flags)
    if device.kind == "cuda" and device.capability:
        major, _, minor = device.capability.partition(".")
        if major.isdigit() and minor.isdigit():
            cc = (int(major), int(minor))
            return DeviceTraits(kind="cuda", name=device.name, compute_capability=cc)
    return DeviceTraits(kind=device.kind, name=device.name)


def group_verdicts(group: PolicyGroup) -> list[PolicyVerdict]:
    """One verdict per policy other than float32, in the group's order, as summary/build.py
    made them."""
    verdicts = (c.verdict for row, c in group.comparisons.items() if row != BASELINE)
    return [v for v in verdicts if v is not None]


def policy_verdict(group: PolicyGroup, policy: str) -> PolicyVerdict:
    """The verdict of a row from its group's estimates (group.comparisons, taken first by
    summary/build.py, which stores what this returns)."""
    cell, comparison = group.cells[policy], group.comparisons[policy]
    traits = traits_of(cell)
    # The rating of this framework's cells (policies.rate): fp16 on one CPU can be slow in
    # TensorFlow for a reason that is not torch's.
    framework = group.key.framework
    rating = rate(cell.row.policy, traits, framework) if traits is not None else None
    if not cell.ok:
        why = rating.reason if rating and rating.rating is Rating.UNSUPPORTED else cell.reason
        story = fallback_story(group, policy)
        if story is not None:
            return PolicyVerdict(policy, story, FELL_BACK, why)
        return PolicyVerdict(policy, f"{cell.status}, no numbers", NOT_MEASURED, why)
    if comparison.emulated:
        return emulated_verdict(group, policy)
    against = comparison.vs_base
    if cell.fp8 is not None and against is not None and against.speedup is not None:
        return fp8_verdict(group, policy)
    if group.reference is None:
        return PolicyVerdict(policy, _measured(cell, "no float32 cell to compare with"), NO_RATIO)
    speedup = comparison.speedup
    if speedup is None:
        why = "no step times paired with float32's"
        return PolicyVerdict(policy, _measured(cell, why), NO_RATIO)
    parts = [_speed(speedup)]
    if cell.fp8 is not None:
        parts.append(cell.fp8.coverage())
    accuracy, judged = comparison.accuracy_delta_pp, comparison.accuracy
    if accuracy is not None:
        # The outcome beside the point, in every verdict (a re-measure one too): the point
        # alone decides nothing (summary/accuracy.py).
        said = f" ({judged.word})" if judged is not None else ""
        parts.append(f"{fmt.points(accuracy.value)} accuracy{said}")
    memory = comparison.memory_ratio
    if memory is not None and is_training_memory(cell.memory_kind):
        parts.append(f"{fmt.percent_change(memory.value - 1)} training memory")
    advice = _advice(speedup, judged)
    why = None
    limit = _limit(cell, group.reference)
    if advice == AVOID and rating is not None and rating.rating is not Rating.FAST:
        why = rating.reason  # the device lacks the arithmetic: that says it all
    elif advice == AVOID and limit is not None:
        why = f"no gain: {limit}"
    elif advice == UNDECIDED and speedup.no_interval:
        why = f"{speedup.no_interval}: {MORE_STEPS}"
        if rating is not None and rating.rating is not Rating.FAST:
            why += f"; {rating.reason}"
    elif advice == UNDECIDED and _faster(speedup) and judged is not None:
        why = f"faster, but {judged.text()}"  # the speed is settled; accuracy is not
    elif advice == UNDECIDED:
        why = "the 95 % interval includes 1×: more repeats would decide"
        why += f"; {limit}" if limit is not None else ""
    elif advice in (CAREFUL, RECOMMENDED) and judged is not None:
        why = f"accuracy {judged.text()}"
    if comparison.compiled:  # a float8 cell compiles by default: its gain holds compile's
        remedy = f"add --compile to compile {short(BASELINE)} too"
        said = compile_said(comparison.compiled, remedy, comparison.compile_ran)
        why = f"{why}; {said}" if why else said
    distrust = comparison.distrust
    if distrust is not None:
        # A busy machine or an impossible figure: neither a recommendation nor a warning.
        return PolicyVerdict(policy, ", ".join(parts), REMEASURE, distrust)
    if speedup.kind == WITHIN_RUN and advice != UNDECIDED:
        # One process's steps say little about the next process (docs/measurement.md): say so.
        caution = "one repeat: within-run interval only, confirm with --repeat 3"
        why = f"{why}; {caution}" if why else caution
    return PolicyVerdict(policy, ", ".join(parts), advice, why)


def emulated_verdict(group: PolicyGroup, policy: str) -> PolicyVerdict:
    """An emulated fp8 cell: its accuracy against float32 and bf16, what the emulation cost,
    and never a speed-up (`emulated, fp8 covers 98 % of the step's matmul FLOPs; -0.05 pp
    accuracy vs fp32 (...); ...; step time 3.1× float32's: the cost of emulation`)."""
    cell, comparison = group.cells[policy], group.comparisons[policy]
    assert cell.fp8 is not None
    parts = [f"emulated, {cell.fp8.coverage()}"]
    # float32, then the policy it builds on (float8's: bf16), its nearest accuracy reference.
    vs_base = comparison.vs_base
    deltas = [(BASELINE, comparison.accuracy_delta_pp)]
    if vs_base is not None:
        deltas.append((vs_base.base, vs_base.accuracy_delta_pp))
    for against, delta in deltas:
        if delta is not None:
            parts.append(f"{fmt.points_interval(delta)} accuracy vs {short(against)}")
    cost = comparison.emulation_cost
    if cost is not None:
        parts.append(f"step time {fmt.ratio(cost.value)} float32's: the cost of emulation")
    # Why it was emulated, and how its GEMMs ran as the record says (derived from what ran,
    # never assumed here: torchao and Keras emulate in different dtypes).
    why = "; ".join(x for x in (cell.fp8.why, cell.fp8.gemm) if x)
    return PolicyVerdict(policy, "; ".join(parts), NUMERICS_ONLY, why)


def fp8_verdict(group: PolicyGroup, policy: str) -> PolicyVerdict:
    """A float8 cell that ran fp8 GEMMs, judged against bf16, the policy it builds on: every
    op but its GEMMs runs in bf16, so fp8 is worth having only where it beats bf16 (`0.35×
    bf16's speed ..., fp8 loses here: its GEMMs are too small (predicted 0.80× on its
    layers, measured 0.35×)`). Its speed-up over float32, where float32 ran, is said too."""
    cell, comparison = group.cells[policy], group.comparisons[policy]
    against = comparison.vs_base
    assert cell.fp8 is not None and against is not None and against.speedup is not None
    base = short(against.base)
    parts = [_speed(against.speedup, f"than {base}")]
    if comparison.speedup is not None:
        said = f" ({comparison.compiled})" if comparison.compiled else ""
        parts.append(f"{fmt.ratio(comparison.speedup.value)} float32's speed{said}")
    parts.append(cell.fp8.coverage())
    judged = against.accuracy
    if against.accuracy_delta_pp is not None:
        said = f" ({judged.word})" if judged is not None else ""
        parts.append(f"{fmt.points(against.accuracy_delta_pp.value)} accuracy vs {base}{said}")
    memory = against.memory_ratio
    if memory is not None and is_training_memory(cell.memory_kind):
        parts.append(f"{fmt.percent_change(memory.value - 1)} training memory vs {base}")
    advice = _advice(against.speedup, judged)
    reasons = [explain(cell.fp8.prediction, against.speedup.value)]
    if against.speedup.no_interval:
        reasons.append(f"{against.speedup.no_interval}: {MORE_STEPS}")
    found = cell.bottleneck
    if found is not None and found.kind in _NOT_ARITHMETIC:
        # the GEMMs' prediction says nothing of a step they do not set the pace of
        reasons.append(f"the step is {_limit(cell, group.cells.get(against.base))}")
    if against.compiled:
        remedy = f"add --compile to compile {base} too"
        reasons.append(compile_said(against.compiled, remedy, against.compile_ran))
    if advice == CAREFUL and judged is not None:
        reasons.append(f"accuracy {judged.text()}")
    why = "; ".join(r for r in reasons if r) or None
    if against.distrust is not None:
        return PolicyVerdict(policy, ", ".join(parts), REMEASURE, against.distrust)
    return PolicyVerdict(policy, ", ".join(parts), advice, why)


def _measured(cell: CellSummary, why: str) -> str:
    """`ran ok: 1.00 ms a step, 128,000 samples/s; no float32 cell to compare with`."""
    figures = []
    if cell.step_time_s is not None:
        figures.append(f"{fmt.ms(cell.step_time_s.value)} ms a step")
    if cell.throughput is not None:
        figures.append(f"{fmt.throughput(cell.throughput)} samples/s")
    done = "ran ok" if cell.all_ok else f"ran ok in {len(cell.ok_records)} of {cell.repeats}"
    done += f": {', '.join(figures)}" if figures else ""
    return f"{done}; {why}"


def fallback_story(group: PolicyGroup, policy: str) -> str | None:
    """For a diverged cell that --on-diverge fallback ran again: `diverged at step 20
    (skipped_fraction) → bf16 (fallback): ok, 1.9×`; None where no fallback ran."""
    cell = group.cells[policy]
    ids = {r.cell_id for r in cell.records}
    diverged = [r for r in cell.records if r.divergence is not None]
    for row, other in group.cells.items():
        if not any(r.fallback_of in ids for r in other.records):
            continue
        where = ""
        if diverged:
            first = diverged[0].divergence
            where = f" at step {first.step} ({first.signal})"
        speedup = group.comparisons[row].speedup
        result = other.status if speedup is None else f"{other.status}, {fmt.ratio(speedup.value)}"
        return f"diverged{where} → {short(row)}: {result}"
    return None


def _speed(speedup: Estimate, than: str = "") -> str:
    """`2.45× faster, 95 % 2.41–2.49×`; `than`: what it is faster than (`than bf16`)."""
    value = speedup.value
    than = f" {than}" if than else ""
    # the value as its interval writes it (fmt.significant_triple), so it never reads outside
    ratio, bounds = fmt.ratio_parts(value, speedup.low, speedup.high)
    if value >= 1:
        text = f"{ratio} faster{than}"
    else:  # 1 / 0.0031 = 323× slower (0.0031×), never (0.00×)
        text = f"{fmt.significant(1 / value, decimals=1)}× slower{than} ({ratio})"
    if speedup.has_interval:
        mark = fmt.WITHIN_RUN_MARK if speedup.kind == WITHIN_RUN else ""
        text += f", 95 % {bounds}×{mark}"
    else:
        text += f", {speedup.no_interval or 'no interval'}"
    return text


# What a cell's diagnosis says when a policy gains nothing: a step not limited by arithmetic
# cannot be sped up much by cheaper arithmetic (docs/measurement.md, "What limits a step").
_NOT_ARITHMETIC = ("launch-bound", "input-bound", "memory-bound")


def _limit(cell: CellSummary, reference: CellSummary | None) -> str | None:
    """`launch-bound (device busy 14 % of the step ...); would help: a larger batch, ...`;
    for a compute-bound cell, only where the policy's peak is below float32's on this device
    (then its arithmetic is the slower one); None where undiagnosed or unknown."""
    found = cell.bottleneck
    if found is None:
        return None
    if found.kind in _NOT_ARITHMETIC:
        text = f"{found.kind} ({found.evidence})"
        return f"{text}; would help: {found.remedy}" if found.remedy else text
    base = reference.bottleneck if reference is not None else None
    peak, base_peak = found.peak_tflops, base.peak_tflops if base is not None else None
    if found.kind == "compute-bound" and peak and base_peak and peak < base_peak:
        return (
            f"compute-bound ({found.evidence}), and this device's peak for the policy is "
            f"{fmt.ratio(peak / base_peak)} float32's"
        )
    return None


def _bounds(speedup: Estimate) -> tuple[float, float]:
    """Where the speed-up may lie: its interval; a single value where there is nothing more
    to know; anywhere where its interval could not be taken (too few timed steps), so that
    no advice rests on a point estimate alone."""
    if speedup.has_interval:
        return speedup.low, speedup.high
    if speedup.no_interval:
        return 0.0, math.inf
    return (speedup.value,) * 2


def _faster(speedup: Estimate) -> bool:
    return _bounds(speedup)[0] > 1


def _advice(speedup: Estimate, accuracy: AccuracyVerdict | None) -> str:
    """Speed first (its interval against 1×), then accuracy by its interval at the margin
    (summary/accuracy.py): a faster policy is recommended only where its accuracy is shown no
    worse, never on a point estimate. Without an accuracy figure the speed decides."""
    low, high = _bounds(speedup)
    if high < 1:
        return AVOID
    if low <= 1:
        return UNDECIDED
    if accuracy is not None and accuracy.outcome == WORSE:
        return CAREFUL
    if accuracy is not None and accuracy.outcome == INCONCLUSIVE:
        return UNDECIDED
    return RECOMMENDED
