"""`mpbench run --repeat auto`: how many rounds to run, by Stein's two-stage rule.

A round runs every cell of the matrix once (framework × workload × policy × recipe), each
its own process. Stopping "as soon as the interval is narrow enough" would stop more often
when the sample spread happens to underestimate the true one, so the intervals of the runs
that stop early would be too short (benchmarks/stopping_rule.py: 91.0-94.4 % coverage for a
nominal 95 %, against 94.8-95.3 % for this rule). Stein's rule (1945) keeps it honest:

1. run a pilot of n0 = 5 rounds (fewer when --max-repeats is smaller);
2. for every requested policy other than float32, in every framework × workload × recipe
   group, s0 = the sample standard deviation of the pilot's per-round log speed-ups
   ln(median step of float32 / median step of the policy), paired by round;
3. N = clamp(ceil((t_{0.975, n0-1} · s0 / h)²), n0, max_repeats) with h = ln(1 + precision),
   the largest N over all of them;
4. run N − n0 more rounds without looking at the data again. The only early stop is the time
   budget: a round that would end past it (estimated from the rounds so far) does not start.

The interval that keeps the coverage is mean(all N) ± t_{0.975, n0-1} · s0 / √N (s0, not
the final spread), recorded per cell in run.json as `half_width` (relative: 0.031 = ±3.1 %).

Everything here is a pure function of numbers or records, except `AdaptiveRepeats`, which
keeps the state of one run and reads a clock that tests can replace.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mpbench.policies import BASELINE
from mpbench.results import CellRecord, Status
from mpbench.results.identity import cell_key, timed_step_samples
from mpbench.results.run_json import AdaptiveBlock
from mpbench.results.stats import CONFIDENCE, t_quantile

RULE = "stein two-stage"
PILOT = 5  # rounds: enough for a spread to size N from (t(0.975, 4) = 2.78)


def pilot_rounds(max_repeats: int) -> int:
    """n0: five rounds, or all of them when --max-repeats allows fewer."""
    return min(PILOT, max_repeats)


def _t(ratios: int) -> float:
    """t_{0.975, k-1} for k ratios (k >= 2)."""
    return t_quantile(0.5 + CONFIDENCE / 2, ratios - 1)


def required_rounds(s0: float, ratios: int, precision: float) -> int:
    """ceil((t_{0.975, ratios-1} · s0 / ln(1 + precision))²), not clamped: the rounds a
    pilot of `ratios` log speed-ups with spread s0 asks for."""
    if ratios < 2:
        raise ValueError("a spread needs at least 2 ratios")
    need = (_t(ratios) * s0 / math.log1p(precision)) ** 2
    return max(1, math.ceil(need - 1e-9))  # 9.000000001 from rounding is 9


@dataclass
class Decision:
    """What the pilot decided: the rounds to run in all, and why."""

    n0: int  # pilot rounds
    s0: dict[str, float | None]  # cell -> pilot spread of its log speed-ups; None: < 2 ratios
    ratios: dict[str, int]  # cell -> how many ratios the pilot had (s0's degrees of freedom + 1)
    needed: dict[str, int | None]  # cell -> unclamped N; None: could not be sized
    planned: int  # N
    reason: str  # why N, in words

    @property
    def unsized(self) -> list[str]:
        """Cells with fewer than 2 pilot ratios: treated as needing --max-repeats."""
        return [label for label, s in self.s0.items() if s is None]

    def capped(self, max_repeats: int) -> bool:
        """Some cell needed more rounds than --max-repeats allows (or could not be sized)."""
        return any(n is None or n > max_repeats for n in self.needed.values())


def decide(pilot: Mapping[str, Sequence[float]], precision: float, max_repeats: int) -> Decision:
    """Stein's N from the pilot's log speed-ups (cell label -> one per round that has one)."""
    if max_repeats < 2:
        raise ValueError("--repeat auto needs --max-repeats of at least 2")
    n0 = pilot_rounds(max_repeats)
    s0: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    needed: dict[str, int | None] = {}
    for label, logs in pilot.items():
        counts[label] = len(logs)
        if len(logs) < 2:
            s0[label], needed[label] = None, None
            continue
        s0[label] = statistics.stdev(logs)
        needed[label] = required_rounds(s0[label], len(logs), precision)
    if not needed:
        reason = "no speed-up to size (no policy beside float32 ran)"
        return Decision(n0, s0, counts, needed, n0, reason)
    unsized = [label for label, n in needed.items() if n is None]
    if unsized:
        label = unsized[0]
        reason = (
            f"{label}: {_count(counts[label])} in the pilot, too few to size it, so "
            f"--max-repeats {max_repeats}"
        )
        return Decision(n0, s0, counts, needed, max_repeats, reason)
    label = max(needed, key=lambda name: (needed[name], name))
    need = needed[label]
    assert need is not None
    planned = min(max(need, n0), max_repeats)
    reason = f"{label} needs {need} (pilot s0 {s0[label]:.4f} over {_count(counts[label])})"
    if need > max_repeats:
        reason += f", capped at --max-repeats {max_repeats}"
    return Decision(n0, s0, counts, needed, planned, reason)


def _count(ratios: int) -> str:
    return f"{ratios} ratio{'' if ratios == 1 else 's'}"


def t_half_width(logs: Sequence[float]) -> float | None:
    """The relative half-width of the ordinary t-interval of these log speed-ups
    (t_{0.975, n-1} · s / √n, as exp(·) − 1); None below 2 values. What compare shows."""
    if len(logs) < 2:
        return None
    return math.expm1(_t(len(logs)) * statistics.stdev(logs) / math.sqrt(len(logs)))


def stein_half_width(s0: float, pilot_ratios: int, ratios: int) -> float:
    """The relative half-width of Stein's interval: t_{0.975, n0-1} · s0 / √N, exp(·) − 1."""
    return math.expm1(_t(pilot_ratios) * s0 / math.sqrt(ratios))


def half_widths(
    decision: Decision | None, logs: Mapping[str, Sequence[float]]
) -> dict[str, float | None]:
    """Each cell's relative half-width after the run: Stein's where the pilot sized it, else
    the ordinary t-interval's (a run the budget stopped in its pilot, a cell the pilot could
    not size); None where a cell has fewer than 2 ratios."""
    found: dict[str, float | None] = {}
    for label, values in logs.items():
        s0 = decision.s0.get(label) if decision is not None else None
        if decision is not None and s0 is not None and values:
            found[label] = stein_half_width(s0, decision.ratios[label], len(values))
        else:
            found[label] = t_half_width(values)
    return found


def widest(widths: Mapping[str, float | None]) -> tuple[str, float] | None:
    """The cell with the widest interval, and its half-width; None if none has one."""
    known = [(value, label) for label, value in widths.items() if value is not None]
    if not known:
        return None
    value, label = max(known)
    return label, value


def percent(half_width: float) -> str:
    """0.079 -> '±7.9 %'."""
    return f"±{half_width * 100:.1f} %"


def budget_allows(elapsed_s: float, rounds_done: int, budget_s: float | None) -> bool:
    """Whether another round, as long as the rounds so far on average, ends within the budget.
    The first round always runs: there is nothing to estimate it from."""
    if budget_s is None or rounds_done == 0:
        return True
    return elapsed_s + elapsed_s / rounds_done <= budget_s


def stop_reason(
    decision: Decision | None,
    max_repeats: int,
    ran: int,
    budget_stopped: bool,
    widths: Mapping[str, float | None],
) -> str:
    """Why the run stopped, as run.json and compare say it."""
    if budget_stopped:
        return f"time budget reached after {ran} round{'s' if ran != 1 else ''}"
    if decision is not None and decision.capped(max_repeats):
        if decision.unsized:
            return f"max-repeats reached ({decision.unsized[0]} could not be sized)"
        top = widest(widths)
        return "max-repeats reached" + (f" (widest {percent(top[1])})" if top else "")
    return "planned repeats reached"


# --- from records ---------------------------------------------------------------------------


def cell_label(cell_id: str) -> str:
    """The cell without its repeat: `torch/mnist_dense/mixed_bfloat16@acc4/r2` ->
    `torch/mnist_dense/mixed_bfloat16@acc4`."""
    head, _, tail = cell_id.rpartition("/")
    return head if tail.startswith("r") and tail[1:].isdigit() else cell_id


def log_speedups(records: Iterable[CellRecord]) -> dict[str, dict[int, float]]:
    """cell label -> {repeat: ln(speed-up against float32)}, for every cell of a policy other
    than float32 (fallbacks of diverged cells left out: they were not asked for).

    Pairs as compare does: the float32 cell of the same group (the cell identity both use,
    results/identity.py: machine, framework, workload and config) and the same run and
    repeat; per sample where the batches differ (--batch-scale-16bit). A repeat that is not
    ok on either side has no ratio. A cell skipped or stopped in every repeat (unsupported
    here, framework missing, too slow to pay) is left out: more rounds cannot measure it."""
    records = [r for r in records if r.fallback_of is None]
    reference: dict[tuple[Any, str, int], float] = {}
    for record in records:
        if record.policy == BASELINE and _timed(record):
            key = (cell_key(record).group, record.run_id, record.repeat)
            reference[key] = _per_sample(record)
    found: dict[str, dict[int, float]] = {}
    statuses: dict[str, set[Status]] = {}
    for record in records:
        if record.policy == BASELINE:
            continue
        label = cell_label(record.cell_id)
        statuses.setdefault(label, set()).add(record.status)
        ratios = found.setdefault(label, {})
        if not _timed(record):
            continue
        ref = reference.get((cell_key(record).group, record.run_id, record.repeat))
        if ref is not None:
            ratios[record.repeat] = math.log(ref) - math.log(_per_sample(record))
    unmeasurable = {Status.SKIPPED, Status.STOPPED}
    return {label: v for label, v in found.items() if not statuses[label] <= unmeasurable}


def _timed(record: CellRecord) -> bool:
    return (
        record.status is Status.OK
        and record.step_time is not None
        and bool(record.step_time.median_s)
        and record.step_time.median_s > 0
    )


def _per_sample(record: CellRecord) -> float:
    assert record.step_time is not None and record.step_time.median_s
    samples = timed_step_samples(record.config)
    return record.step_time.median_s / samples if samples else record.step_time.median_s


def in_rounds(speedups: Mapping[str, Mapping[int, float]], rounds: int) -> dict[str, list[float]]:
    """The log speed-ups of rounds 0 .. rounds-1, in round order."""
    return {
        label: [by_round[r] for r in sorted(by_round) if r < rounds]
        for label, by_round in speedups.items()
    }


# --- one run ----------------------------------------------------------------------------------


@dataclass
class AdaptiveRepeats:
    """The state of one `--repeat auto` run: rounds run, the pilot's decision, the stop.

    `prior_s`: seconds the run's cells took before this invocation (a resumed run), counted
    against the budget with the time since this object was made."""

    precision: float
    max_repeats: int
    budget_s: float | None = None
    prior_s: float = 0.0
    clock: Callable[[], float] = time.monotonic
    decision: Decision | None = None
    ran: int = 0
    stopped: str | None = None
    budget_stopped: bool = False
    widths: dict[str, float | None] = field(default_factory=dict)
    _started: float | None = None

    def __post_init__(self) -> None:
        self._started = self.clock()

    @property
    def n0(self) -> int:
        return pilot_rounds(self.max_repeats)

    @property
    def target(self) -> int:
        """The rounds to run: the pilot until it decided, then N."""
        return self.decision.planned if self.decision is not None else self.n0

    def elapsed_s(self) -> float:
        assert self._started is not None
        return self.prior_s + self.clock() - self._started

    def may_start(self, index: int) -> bool:
        """Whether round `index` (0-based) runs: it is planned, and it fits the budget."""
        if index >= self.target:
            return False
        if not budget_allows(self.elapsed_s(), index, self.budget_s):
            self.budget_stopped = True
            return False
        return True

    def round_done(self, index: int, records: Iterable[CellRecord]) -> bool:
        """Round `index` has finished; True when this was the pilot's last round (decided)."""
        self.ran = index + 1
        speedups = log_speedups(records)
        decided = False
        if self.decision is None and self.ran >= self.n0:
            self.decision = decide(in_rounds(speedups, self.n0), self.precision, self.max_repeats)
            decided = True
        # Shown, never decided from: the pilot's t-interval so far, then Stein's with the
        # rounds so far (the interval the run will report).
        self.widths = half_widths(self.decision, in_rounds(speedups, self.ran))
        return decided

    def finish(self, records: Iterable[CellRecord]) -> str:
        """The stop reason, once no further round starts; the final half-widths."""
        logs = in_rounds(log_speedups(records), self.ran)
        self.widths = half_widths(self.decision, logs)
        self.stopped = stop_reason(
            self.decision, self.max_repeats, self.ran, self.budget_stopped, self.widths
        )
        return self.stopped

    def block(self) -> dict[str, Any]:
        """run.json's `adaptive` entry, as its format in results/run_json.py writes it."""
        decision = self.decision
        entry = AdaptiveBlock(
            rule=RULE,
            pilot=self.n0,
            planned=decision.planned if decision is not None else None,
            ran=self.ran,
            precision=self.precision,
            max_repeats=self.max_repeats,
            time_budget_s=self.budget_s,
            stopped=self.stopped,
            decision=decision.reason if decision is not None else None,
            s0=dict(decision.s0) if decision is not None else {},
            half_width={k: _rounded(v) for k, v in self.widths.items()},
        )
        return entry.to_dict()


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 5)
