"""The CI gates: against a baseline (absolute, same machine) and within one run (ratios).

Every gate returns one `GateResult` per cell it checked, passed or failed, with the numbers
that decided it. The rule is `estimate.judge`: a gate fails only when the whole 95 % interval
is past its limit; a value past the limit whose interval straddles it is *inconclusive* and
passes, unless --require-conclusive (docs/compare.md, "Intervals and inconclusive gates").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from mpbench.compare.options import CompareOptions
from mpbench.compare.summary import fmt
from mpbench.compare.summary.accuracy import INCONCLUSIVE, NO_WORSE, WORSE
from mpbench.compare.summary.accuracy import within as accuracy_within
from mpbench.compare.summary.cells import (
    CellKey,
    CellSummary,
    PolicyGroup,
    Section,
    memory_mismatch,
)
from mpbench.compare.summary.estimate import (
    Estimate,
    Verdict,
    judge,
    step_change,
    two_sample_difference,
    two_sample_ratio,
)
from mpbench.compare.summary.labels import Labeler
from mpbench.compare.summary.scaling import ScalingRow, all_scaling_rows
from mpbench.errors import InvalidInput
from mpbench.parsers import split_reference, split_world
from mpbench.policies import BASELINE, POLICIES
from mpbench.results.contention import busy_margin
from mpbench.results.identity import Row

ADD_REPEATS = "inconclusive — add repeats"
MORE_STEPS = "inconclusive — time more steps or add repeats"  # no interval (too few steps)
REMEASURE = "inconclusive — re-measure on a quiet machine"
MIN_SCALING = "min-scaling-efficiency"
_MINIMA = ("min-speedup", MIN_SCALING)  # gates with a lower limit


@dataclass
class GateResult:
    gate: str  # the option's name without dashes: max-slowdown, min-speedup, ..., status
    cell: str  # the cell's label
    passed: bool
    message: str  # the numbers that decided it
    value: float | None = None  # in the gate's unit (fraction, ratio or pp)
    limit: float | None = None
    inconclusive: bool = False  # past the limit, but the interval reaches back across it
    estimate: Estimate | None = None  # the value with its interval, in the gate's unit
    remeasure: bool = False  # inconclusive because the timing is not trusted (busy machine)
    # The busy machine a timing gate decided despite (its interval cleared the limit by more
    # than the condition can move it: _despite_busy), in words; None when it ran quiet.
    decided_under: str | None = None

    def pressure(self) -> float | None:
        """How close the value came to the limit: 1.0 at the limit, above 1 beyond it."""
        if self.value is None or self.limit is None:
            return None
        if self.gate in _MINIMA:
            return self.limit / self.value if self.value > 0 else math.inf
        value = abs(self.value) if self.gate == "max-accuracy-delta" else self.value
        if self.limit == 0:
            return math.inf if value > 0 else 0.0
        return value / self.limit


def _result(
    gate: str,
    label: str,
    estimate: Estimate,
    numbers: str,
    options: CompareOptions,
    minimum: float | None = None,
    maximum: float | None = None,
    distrust: str | None = None,
    verdict: Verdict | None = None,
    limit: float | None = None,
    busy_share: float | None = None,
) -> GateResult:
    """Judge `estimate` against its limit and say why, with the interval, in one message.
    `distrust`: why the timing cannot be trusted (a busy machine, an impossible figure):
    then the gate is inconclusive, unless a busy machine is the only doubt (`busy_share`, the
    CPU time others took) and the interval clears the limit by more than that can move it.
    `verdict` and `limit`: a gate judged by a rule of its own (the accuracy gate's
    non-inferiority), with the limit it reports."""
    verdict = verdict or judge(estimate, minimum, maximum)
    if limit is None:
        limit = maximum if maximum is not None else minimum
    message = f"{numbers}; {interval_text(gate, estimate)}"
    decided = None
    if distrust is not None:
        decided = _despite_busy(gate, estimate, minimum, maximum, busy_share)
    if decided is not None:
        verdict, margin = decided
        side = "past" if verdict is Verdict.FAIL else "within"
        message += (
            f": decided on a busy machine ({distrust}): widened by ±{margin * 100:.1f} % for "
            f"the {(busy_share or 0.0) * 100:.1f} % of CPU time others took, the interval "
            f"still lies {side} the limit"
        )
    elif distrust is not None:
        verdict = Verdict.INCONCLUSIVE
        message += f": {REMEASURE} ({distrust})"
    elif verdict is Verdict.INCONCLUSIVE and estimate.no_interval:
        message += f": {MORE_STEPS}"
    elif verdict is Verdict.INCONCLUSIVE:
        message += f": {ADD_REPEATS}"
    inconclusive = verdict is Verdict.INCONCLUSIVE
    if inconclusive and options.require_conclusive:
        message += " (--require-conclusive)"
    passed = verdict is Verdict.PASS or (inconclusive and not options.require_conclusive)
    return GateResult(
        gate,
        label,
        passed,
        message,
        estimate.value,
        limit,
        inconclusive,
        estimate,
        remeasure=distrust is not None and decided is None,
        decided_under=distrust if decided is not None else None,
    )


def _despite_busy(
    gate: str,
    estimate: Estimate,
    minimum: float | None,
    maximum: float | None,
    busy_share: float | None,
) -> tuple[Verdict, float] | None:
    """A timing gate's verdict on a busy machine, with the margin it allowed: its interval
    widened by as far as the CPU time others took can move the figure (contention.busy_margin,
    measured) must lie wholly past the limit (FAIL) or wholly on the right side of it (PASS).
    None: no decision (an implausible figure, a share beyond the measured, no interval, or
    the widened interval straddles the limit)."""
    if busy_share is None or estimate.no_interval:
        return None
    margin = busy_margin(busy_share)
    if margin is None:
        return None
    # Widened on the ratio's scale: --max-slowdown judges the ratio minus 1.
    offset = 1.0 if gate == "max-slowdown" else 0.0
    low = (estimate.low + offset) / (1 + margin) - offset
    high = (estimate.high + offset) * (1 + margin) - offset
    if (maximum is not None and low > maximum) or (minimum is not None and high < minimum):
        return Verdict.FAIL, margin
    if (maximum is None or high <= maximum) and (minimum is None or low >= minimum):
        return Verdict.PASS, margin
    return None


def interval_text(gate: str, estimate: Estimate) -> str:
    """`95 % interval +17.6 to +22.5 % (within-run only)` in the gate's unit."""
    if estimate.no_interval:
        return estimate.no_interval
    if not estimate.has_interval:
        return "a single value per side, no interval"
    if gate == "min-speedup":
        span = fmt.ratio_range(estimate.low, estimate.high)
    elif gate == MIN_SCALING:
        span = fmt.efficiency_range(estimate.low, estimate.high)
    elif gate == "max-accuracy-drop":  # judged as a drop, shown as the change it is
        span = f"{fmt.points(-estimate.high)} to {fmt.points(-estimate.low)}"
    elif gate == "max-accuracy-delta":
        span = f"{fmt.points(estimate.low)} to {fmt.points(estimate.high)}"
    else:
        span = f"{fmt.percent_change(estimate.low)} to {fmt.percent_change(estimate.high)}"
    return f"95 % interval {span} ({fmt.interval_kind(estimate)})"


@dataclass
class BaselineMatch:
    """A cell of this run and the same cell (same machine unless allowed) in the baseline."""

    key: CellKey
    label: str
    candidate: CellSummary
    baseline: CellSummary

    @property
    def comparable(self) -> bool:
        return self.candidate.all_ok and self.baseline.all_ok

    def step_change(self) -> Estimate | None:
        """Candidate / baseline step time."""
        base = list(self.baseline.step_times().values())
        cand = list(self.candidate.step_times().values())
        return step_change(base, cand) if self.comparable and base and cand else None

    def memory_change(self) -> Estimate | None:
        """Candidate / baseline memory, the same kind of memory only (memory_refused)."""
        if not self.comparable or self.candidate.memory_kind != self.baseline.memory_kind:
            return None
        base = [float(b) for b in self.baseline.memory_values().values()]
        cand = [float(b) for b in self.candidate.memory_values().values()]
        if not base or not cand or min(base) <= 0 or min(cand) <= 0:
            return None
        return two_sample_ratio(base, cand)

    @property
    def memory_refused(self) -> str | None:
        """Why the memory is not compared though both sides have a figure: they measure
        different things (an allocator's figure against a sampled RSS, ...)."""
        if not self.comparable:
            return None
        return memory_mismatch(self.baseline, "the baseline", self.candidate, "this run")

    def accuracy_change_pp(self) -> Estimate | None:
        """Candidate - baseline test accuracy, in points."""
        base = list(self.baseline.accuracies().values())
        cand = list(self.candidate.accuracies().values())
        if not self.comparable or not base or not cand:
            return None
        return two_sample_difference(base, cand).scaled(100)


def _status(cell: CellSummary) -> str:
    reason = cell.reason
    return f"{cell.status}: {reason}" if reason else cell.status


# --- against a baseline -------------------------------------------------------------------


@dataclass(frozen=True)
class BaselineGate:
    """One gate against the baseline, as a row of BASELINE_GATES: the option it answers to,
    what it measures, and how the candidate's change from the baseline is judged."""

    gate: str  # the option's name without dashes
    measure: str  # what both sides must have finished with, in the refusal's words
    limit: Callable[[CompareOptions], float | None]  # the option's value; None: not asked
    change: Callable[[BaselineMatch], Estimate | None]  # in the unit judged against the limit
    numbers: Callable[[BaselineMatch, Estimate, float], str | None]  # None: no figures
    # Only a step time moves when other work shares the machine: a timing gate on a cell
    # that ran contended (either side) is inconclusive, whatever its interval says.
    timing: bool = False
    # Why a match that has both figures is not judged (two kinds of memory), said as a note.
    refused: Callable[[BaselineMatch], str | None] = lambda match: None

    def check(self, match: BaselineMatch, options: CompareOptions) -> GateResult | None:
        limit = self.limit(options)
        change = self.change(match) if limit is not None else None
        if limit is None or change is None:
            return None
        numbers = self.numbers(match, change, limit)
        if numbers is None:
            return None
        distrust = _busy(match) if self.timing else None
        share = max(match.baseline.taken_share, match.candidate.taken_share)
        return _result(
            self.gate,
            match.label,
            change,
            numbers,
            options,
            maximum=limit,
            distrust=distrust,
            busy_share=share if distrust is not None else None,
        )


def _busy(match: BaselineMatch) -> str | None:
    """Why the step times of a match cannot be trusted (a contended side), or None."""
    busy = [
        f"{side}: {text}"
        for side, cell in (("baseline", match.baseline), ("now", match.candidate))
        if (text := cell.busy_text())
    ]
    return "; ".join(busy) if busy else None


def _slowdown(match: BaselineMatch) -> Estimate | None:
    ratio = match.step_change()
    return None if ratio is None else ratio.shifted(-1)


def _slowdown_numbers(match: BaselineMatch, change: Estimate, limit: float) -> str | None:
    cand, base = match.candidate.step_time_s, match.baseline.step_time_s
    if cand is None or base is None:
        return None
    return (
        f"median step {fmt.ms(cand.value)} ms vs baseline {fmt.ms(base.value)} ms: "
        f"{fmt.percent_change(change.value)} (limit +{fmt.limit_percent(limit)})"
    )


def _memory_increase(match: BaselineMatch) -> Estimate | None:
    ratio = match.memory_change()
    return None if ratio is None else ratio.shifted(-1)


def _memory_numbers(match: BaselineMatch, change: Estimate, limit: float) -> str | None:
    cand, base = match.candidate.memory_bytes, match.baseline.memory_bytes
    if cand is None or base is None:
        return None
    return (
        f"{match.candidate.memory_kind} {fmt.size(cand.value)} vs baseline "
        f"{fmt.size(base.value)}: {fmt.percent_change(change.value)} "
        f"(limit +{fmt.limit_percent(limit)})"
    )


def _accuracy_drop(match: BaselineMatch) -> Estimate | None:
    change = match.accuracy_change_pp()
    return None if change is None else change.scaled(-1)  # judged as a drop


def _accuracy_numbers(match: BaselineMatch, drop: Estimate, limit: float) -> str | None:
    cand, base = match.candidate.accuracy, match.baseline.accuracy
    if cand is None or base is None:
        return None
    return (
        f"test accuracy {fmt.accuracy(cand.value)} vs baseline {fmt.accuracy(base.value)}: "
        f"{fmt.points(-drop.value)} (limit -{limit:g} pp)"
    )


BASELINE_GATES = (
    BaselineGate(
        "max-slowdown",
        "step time",
        lambda options: options.max_slowdown,
        _slowdown,
        _slowdown_numbers,
        timing=True,
    ),
    BaselineGate(
        "max-memory-increase",
        "memory of the same kind",
        lambda options: options.max_memory_increase,
        _memory_increase,
        _memory_numbers,
        refused=lambda match: match.memory_refused,
    ),
    BaselineGate(
        "max-accuracy-drop",
        "test accuracy",
        lambda options: options.max_accuracy_drop_pp,
        _accuracy_drop,
        _accuracy_numbers,
    ),
)


def check_baseline(
    matches: list[BaselineMatch], options: CompareOptions
) -> tuple[list[GateResult], list[str]]:
    """Every baseline gate asked for, on every match; and a note for each match a gate
    could not judge though both sides finished (their memory figures measure different
    things)."""
    results: list[GateResult] = []
    notes: list[str] = []
    counted = {gate.gate: 0 for gate in BASELINE_GATES}
    for match in matches:
        status = _status_gate(match)
        if status is not None:
            results.append(status)
        if not match.comparable:
            continue
        for gate in BASELINE_GATES:
            result = gate.check(match, options)
            if result is not None:
                counted[gate.gate] += 1
                results.append(result)
            refused = gate.refused(match) if gate.limit(options) is not None else None
            if refused:
                notes.append(f"--{gate.gate} not checked for {match.label}: {refused}")
    for gate in BASELINE_GATES:
        limit = gate.limit(options)
        if limit is not None and counted[gate.gate] == 0:
            refused = next((n for n in notes if n.startswith(f"--{gate.gate} ")), None)
            raise InvalidInput(
                f"--{gate.gate}: nothing comparable: no cell finished with a {gate.measure} "
                "in both this run and the baseline"
                + (f" ({refused.split(': ', 1)[1]})" if refused else "")
            )
    return results, notes


def _status_gate(match: BaselineMatch) -> GateResult | None:
    """A cell that finished in the baseline and no longer does is a regression by itself."""
    base, cand = match.baseline, match.candidate
    if base.failed or not base.ok:
        return None  # nothing to regress from
    if cand.all_ok:
        return GateResult("status", match.label, True, "ok in both")
    message = f"was ok in the baseline; now {_status(cand)}"
    return GateResult("status", match.label, False, message)


# --- within one run -----------------------------------------------------------------------


def check_ratios(
    sections: list[Section], options: CompareOptions, labeler: Labeler
) -> tuple[list[GateResult], list[str]]:
    """--min-speedup and --max-accuracy-delta, each cell against float32 of its own group
    (a --min-speedup `fp8:bf16` against bf16 of its group)."""
    results: list[GateResult] = []
    notes: list[str] = []
    groups = [g for s in sections for g in s.groups]
    for key, minimum in options.min_speedup.items():
        named, world = split_world(key)
        assert named is not None
        policy, reference = split_reference(named)
        checked = 0
        for group in groups:
            if world is not None and group.key.layout().world_size != world:
                continue
            # Every row of the policy (fp16 and fp16 [loss scale 1024]); the policy itself
            # where the group has none, so the note says what is missing.
            rows = [row for row in group.cells if row.policy == policy] or [Row(policy)]
            for row in rows:
                result = _min_speedup_gate(group, row, minimum, labeler, notes, options, reference)
                if result is not None:
                    checked += 1
                    results.append(result)
        emulated = any(g.emulated(row) for g in groups for row in g.cells)
        if checked == 0 and emulated and POLICIES[policy].fp8:
            raise InvalidInput(
                f"--min-speedup {key}={minimum:g}: fp8 ran emulated here (no fp8 GEMMs on "
                "this device), so its step time is the cost of emulation, not a speed-up; "
                "gate its numerics with --max-accuracy-delta"
            )
        if checked == 0:
            where = f" at world size {world}" if world is not None else ""
            raise InvalidInput(
                f"--min-speedup {key}={minimum:g}: nothing comparable: no framework and "
                f"workload has both a {reference} and a {policy} cell{where} (--policy auto "
                f"runs only the policies rated fast on the device: name {policy} with -p, or "
                "in [run] policies, to run it there)"
            )
    if options.min_scaling_efficiency:
        found, found_notes = check_scaling(sections, options, labeler)
        results += found
        notes += found_notes
    limit = options.max_accuracy_delta_pp
    if limit is not None:
        checked = 0
        for group in groups:
            for policy in group.cells:
                if policy == BASELINE:
                    continue
                result = _accuracy_delta(group, policy, limit, labeler, notes, options)
                if result is not None:
                    checked += 1
                    results.append(result)
        if checked == 0:
            raise InvalidInput(
                f"--max-accuracy-delta {limit:g}: nothing comparable: no cell has a test "
                "accuracy next to a float32 cell of the same framework and workload"
            )
    return results, notes


def _reference_problem(
    group: PolicyGroup, policy: str, reference: str = BASELINE
) -> tuple[str, bool] | None:
    """Why the ratio cannot be taken: (message, is_failure), or None when it can."""
    ref, cell = group.cells.get(reference), group.cells.get(policy)
    if ref is None or cell is None:
        return f"this run has no {reference if ref is None else policy} cell there", False
    if not ref.ok and not ref.failed and not cell.ok and not cell.failed:
        return f"both {reference} and {policy} were skipped ({_status(cell)})", False
    if not ref.all_ok:
        return f"the {reference} reference did not finish: {_status(ref)}", True
    return None


def _min_speedup_gate(
    group: PolicyGroup,
    policy: str,
    minimum: float,
    labeler: Labeler,
    notes: list[str],
    options: CompareOptions,
    reference: str = BASELINE,
) -> GateResult | None:
    label = labeler.cell(CellKey(group.key, policy))
    problem = _reference_problem(group, policy, reference)
    if problem is not None:
        message, failure = problem
        if failure:
            return GateResult("min-speedup", label, False, message, None, minimum)
        notes.append(f"--min-speedup not checked for {label}: {message}")
        return None
    cell = group.cells[policy]
    if not cell.all_ok:
        return GateResult(
            "min-speedup", label, False, f"did not finish: {_status(cell)}", None, minimum
        )
    if group.emulated(policy):
        notes.append(
            f"--min-speedup not checked for {label}: fp8 ran emulated here, so its step time "
            "is the cost of emulation, not a speed-up"
        )
        return None
    comparison = group.comparisons[policy]
    # Against float32, or against the policy's base (fp8:bf16), as summary/build.py took it.
    against = comparison if reference == BASELINE else comparison.vs_base
    speedup = against.speedup if against is not None else None
    if speedup is None:
        notes.append(f"--min-speedup not checked for {label}: no step times")
        return None
    said = BASELINE if reference == BASELINE else POLICIES[reference].short
    numbers = f"speed-up vs {said} {fmt.ratio(speedup.value)} (minimum {minimum:g}×)"
    return _result(
        "min-speedup",
        label,
        speedup,
        numbers,
        options,
        minimum=minimum,
        distrust=against.distrust,
        busy_share=against.busy_share,
    )


def _accuracy_delta(
    group: PolicyGroup,
    policy: str,
    limit: float,
    labeler: Labeler,
    notes: list[str],
    options: CompareOptions,
) -> GateResult | None:
    label = labeler.cell(CellKey(group.key, policy))
    problem = _reference_problem(group, policy)
    if problem is not None:
        message, failure = problem
        if failure:
            return GateResult("max-accuracy-delta", label, False, message, None, limit)
        if group.cells.get(BASELINE) is not None:
            notes.append(f"--max-accuracy-delta not checked for {label}: {message}")
        return None
    cell = group.cells[policy]
    if cell.failed:
        return GateResult(
            "max-accuracy-delta", label, False, f"did not finish: {_status(cell)}", None, limit
        )
    if not cell.ok:
        return None  # skipped by design (the table says why): nothing to check
    delta = group.comparisons[policy].accuracy_delta_pp
    if delta is None:
        notes.append(f"--max-accuracy-delta not checked for {label}: no test accuracy")
        return None
    ref, acc = group.cells[BASELINE].accuracy, cell.accuracy
    assert ref is not None and acc is not None
    numbers = (
        f"test accuracy {fmt.accuracy(acc.value)} vs float32 {fmt.accuracy(ref.value)}: "
        f"{fmt.points(delta.value)} (limit ±{limit:g} pp)"
    )
    # By the interval, as the verdicts judge accuracy (summary/accuracy.py): pass when it lies
    # within ±limit, fail when it lies wholly beyond, else inconclusive, one repeat included.
    verdict = _ACCURACY_VERDICTS[accuracy_within(delta, limit)]
    return _result(
        "max-accuracy-delta", label, delta, numbers, options, verdict=verdict, limit=limit
    )


_ACCURACY_VERDICTS = {
    NO_WORSE: Verdict.PASS,
    WORSE: Verdict.FAIL,
    INCONCLUSIVE: Verdict.INCONCLUSIVE,
}


# --- across world sizes within one run -----------------------------------------------------


def check_scaling(
    sections: list[Section], options: CompareOptions, labeler: Labeler
) -> tuple[list[GateResult], list[str]]:
    """--min-scaling-efficiency: each data-parallel row at the world size named, against the
    world-size-1 row of the same framework, policy and config (scaling.py)."""
    results: list[GateResult] = []
    notes: list[str] = []
    rows = all_scaling_rows(sections)
    for key, minimum in options.min_scaling_efficiency.items():
        policy, world = split_world(key)
        checked = 0
        for row in rows:
            if row.world_size != world or (policy is not None and row.row.policy != policy):
                continue
            result = _min_scaling(row, minimum, labeler, notes, options)
            if result is not None:
                checked += 1
                results.append(result)
        if checked == 0:
            which = f"{policy} cell" if policy is not None else "cell"
            raise InvalidInput(
                f"--min-scaling-efficiency {key}={minimum:g}: nothing comparable: no {which} "
                f"at world size {world} has a world-size-1 cell of the same framework, "
                "workload and config"
            )
    return results, notes


def _min_scaling(
    row: ScalingRow,
    minimum: float,
    labeler: Labeler,
    notes: list[str],
    options: CompareOptions,
) -> GateResult | None:
    """As --min-speedup: a failed cell or reference fails, a missing or skipped pair is a note."""
    label = labeler.cell(row.key)
    cell, ref = row.cell, row.reference
    limit = f"(minimum {fmt.fraction_percent(minimum)})"
    if ref is None:
        notes.append(
            f"--min-scaling-efficiency not checked for {label}: this run has no world-size-1 "
            "cell of the same framework, policy and config"
        )
        return None
    if not ref.ok and not ref.failed and not cell.ok and not cell.failed:
        notes.append(
            f"--min-scaling-efficiency not checked for {label}: both it and its world-size-1 "
            f"reference were skipped ({_status(cell)})"
        )
        return None
    if not ref.all_ok:
        message = f"the world-size-1 reference did not finish: {_status(ref)}"
        return GateResult(MIN_SCALING, label, False, message, None, minimum)
    if not cell.all_ok:
        message = f"did not finish: {_status(cell)}"
        return GateResult(MIN_SCALING, label, False, message, None, minimum)
    efficiency = row.efficiency
    if efficiency is None:
        notes.append(
            f"--min-scaling-efficiency not checked for {label}: no repeat pairs with a "
            "throughput at both world sizes"
        )
        return None
    numbers = (
        f"weak-scaling efficiency {fmt.fraction_percent(efficiency.value)} at world size "
        f"{row.world_size} {limit}"
    )
    if row.note:
        numbers += f"; {row.devices} devices: {row.note}"
    return _result(
        MIN_SCALING,
        label,
        efficiency,
        numbers,
        options,
        minimum=minimum,
        distrust=row.distrust(),
        busy_share=row.busy_share(),
    )
