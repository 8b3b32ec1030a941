"""A verdict per framework × workload: what each policy buys on this machine, and the advice.

Built from the numbers (speed-up with its 95 % interval, accuracy delta, training memory) and
from the device's rating of the policy (mpbench.policies), so that "0.18×" comes with the why
("this CPU has no fp16 arithmetic"). Evidence that does not decide is said to be inconclusive.
"""

from __future__ import annotations

from dataclasses import dataclass

from mpbench.compare.render import fmt
from mpbench.compare.summary.cells import CellSummary, PolicyGroup, is_training_memory, row_policy
from mpbench.compare.summary.estimate import WITHIN_RUN, Estimate
from mpbench.policies import BASELINE, POLICIES, DeviceTraits, Rating, rate, resolve

# An accuracy drop beyond this many points (point estimate) turns "recommended" into "use with
# care": the speed is real, the model is worse.
ACCURACY_COST_PP = 1.0

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


def short(row: str) -> str:
    """`mixed_float16 [loss scale 1024]` -> `fp16 [loss scale 1024]` (rows: summary/cells.py;
    the short name is the policy's, mpbench.policies). A name that is no policy stays."""
    policy, _, variant = row.partition(" ")
    known = POLICIES.get(policy)
    name = known.short if known is not None else policy
    return f"{name} {variant}" if variant else name


@dataclass
class PolicyVerdict:
    policy: str
    evidence: str  # "2.45× faster (95 % 2.41–2.52), -0.13 pp accuracy, -35 % training memory"
    advice: str  # one of the constants above
    why: str | None = None  # the device's reason, when it explains the advice

    def text(self) -> str:
        """`bf16: 2.45× faster (95 % 2.41–2.52), ... → recommended here`."""
        text = f"{short(self.policy)}: {self.evidence} → {self.advice}"
        return f"{text} ({self.why})" if self.why else text


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
    """One verdict per policy other than float32, in the group's order."""
    return [policy_verdict(group, policy) for policy in group.cells if policy != BASELINE]


def policy_verdict(group: PolicyGroup, policy: str) -> PolicyVerdict:
    cell = group.cells[policy]
    traits = traits_of(cell)
    rating = rate(row_policy(policy), traits) if traits is not None else None
    if not cell.ok:
        why = rating.reason if rating and rating.rating is Rating.UNSUPPORTED else cell.reason
        story = fallback_story(group, policy)
        if story is not None:
            return PolicyVerdict(policy, story, FELL_BACK, why)
        return PolicyVerdict(policy, f"{cell.status}, no numbers", NOT_MEASURED, why)
    if group.emulated(policy):
        return emulated_verdict(group, policy)
    if group.reference is None:
        return PolicyVerdict(policy, _measured(cell, "no float32 cell to compare with"), NO_RATIO)
    speedup = group.speedup(policy)
    if speedup is None:
        why = "no step times paired with float32's"
        return PolicyVerdict(policy, _measured(cell, why), NO_RATIO)
    parts = [_speed(speedup)]
    if cell.fp8 is not None:
        parts.append(f"fp8 in {cell.fp8.coverage()}")
    accuracy = group.accuracy_delta_pp(policy)
    if accuracy is not None:
        parts.append(f"{fmt.points(accuracy.value)} accuracy")
    memory = group.memory_ratio(policy)
    if memory is not None and is_training_memory(cell.memory_kind):
        parts.append(f"{fmt.percent_change(memory.value - 1)} training memory")
    advice = _advice(speedup, accuracy)
    why = None
    if advice == AVOID and rating is not None and rating.rating is not Rating.FAST:
        why = rating.reason
    elif advice == UNDECIDED:
        why = "the 95 % interval includes 1×: more repeats would decide"
    elif advice == CAREFUL:
        why = f"accuracy drops more than {ACCURACY_COST_PP:g} pp"
    distrust = group.distrust(policy)
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
    and never a speed-up (`emulated, fp8 in 2 of 3 layers, 98 % of FLOPs; -0.05 pp accuracy vs
    fp32 (...); ...; step time 3.1× float32's: the cost of emulation`)."""
    cell = group.cells[policy]
    assert cell.fp8 is not None
    parts = [f"emulated, fp8 in {cell.fp8.coverage()}"]
    # float32, then the policy it builds on (float8's: bf16), its nearest accuracy reference.
    base = resolve(row_policy(policy)).base
    for against in [BASELINE] if base is None else [BASELINE, base]:
        delta = group.accuracy_delta_pp(policy, against) if against in group.cells else None
        if delta is not None:
            parts.append(f"{fmt.points_interval(delta)} accuracy vs {short(against)}")
    cost = group.emulation_cost(policy)
    if cost is not None:
        parts.append(f"step time {fmt.ratio(cost.value)} float32's: the cost of emulation")
    # Why it was emulated, and how its GEMMs ran as the record says (derived from what ran,
    # never assumed here: torchao and Keras emulate in different dtypes).
    why = "; ".join(x for x in (cell.fp8.why, cell.fp8.gemm) if x)
    return PolicyVerdict(policy, "; ".join(parts), NUMERICS_ONLY, why)


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
        speedup = group.speedup(row)
        result = other.status if speedup is None else f"{other.status}, {fmt.ratio(speedup.value)}"
        return f"diverged{where} → {short(row)}: {result}"
    return None


def _speed(speedup: Estimate) -> str:
    value = speedup.value
    if value >= 1:
        text = f"{fmt.ratio(value)} faster"
    else:  # 1 / 0.0031 = 323× slower (0.0031×), never (0.00×)
        text = f"{fmt.significant(1 / value, decimals=1)}× slower ({fmt.ratio(value)})"
    if speedup.has_interval:
        mark = fmt.WITHIN_RUN_MARK if speedup.kind == WITHIN_RUN else ""
        text += f", 95 % {fmt.ratio_range(speedup.low, speedup.high)}{mark}"
    else:
        text += ", no interval"
    return text


def _advice(speedup: Estimate, accuracy: Estimate | None) -> str:
    low, high = (speedup.low, speedup.high) if speedup.has_interval else (speedup.value,) * 2
    if high < 1:
        return AVOID
    if low <= 1:
        return UNDECIDED
    if accuracy is not None and accuracy.value < -ACCURACY_COST_PP:
        return CAREFUL
    return RECOMMENDED
