"""The sections of a report, each row's comparison against float32 computed here once.

Every estimate compare shows against float32 (speed-up, emulation cost, memory ratio,
accuracy delta, end-to-end speed-up, why the evidence is distrusted) and the verdict are
taken in this module only and stored on the group (`group.comparisons[row]`); the gates,
tables, JSON, CSV, benchmark-action export and plot read them. Ratios pair repeats by
(run_id, repeat): float32 r0 with bf16 r0 of the same run, which the runner interleaved in
time; a repeat without a partner is left out (report.py notes it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from mpbench.compare.summary.accuracy import DEFAULT_MARGIN_PP
from mpbench.compare.summary.accuracy import judge as judge_accuracy
from mpbench.compare.summary.cells import (
    CellKey,
    CellSummary,
    PolicyGroup,
    RepeatKey,
    Section,
    group_sections,
    memory_mismatch,
    per_sample,
)
from mpbench.compare.summary.comparison import AgainstBase, Comparison, short
from mpbench.compare.summary.estimate import (
    Estimate,
    paired_difference,
    paired_ratio,
    step_ratio,
)
from mpbench.compare.summary.scaling import scaling_rows
from mpbench.compare.summary.verdict import policy_verdict
from mpbench.policies import BASELINE, FLOAT32, POLICIES
from mpbench.results.identity import Row

V = TypeVar("V")

# Speed-up ceilings (_speedup_ceiling). A policy also saves memory traffic, so it may beat the
# ratio of peaks a little; without peaks, the same room over the largest 16-bit/float32 ratio
# of any part in detect/peaks.py (B200: 30×; a test keeps the two in step).
SPEEDUP_ROOM = 1.5
ANY_DEVICE_RATIO = 30.0
ANY_DEVICE_SPEEDUP = SPEEDUP_ROOM * ANY_DEVICE_RATIO


def build_sections(
    cells: dict[CellKey, CellSummary], accuracy_margin_pp: float = DEFAULT_MARGIN_PP
) -> list[Section]:
    """The report's sections, every group with its comparisons; accuracy judged against
    float32 at `accuracy_margin_pp` (summary/accuracy.py)."""
    sections = group_sections(cells)
    # The runs that compiled cells with --compile (the records' config says so): their eager
    # rows beside a float8 cell, compiled by default, are never told to add --compile.
    compiled_runs = frozenset(
        r.run_id for c in cells.values() for r in c.records if r.config.get("compile")
    )
    for group in (g for s in sections for g in s.groups):
        compare_group(group, accuracy_margin_pp, compiled_runs)
    for section in sections:
        section.scaling = scaling_rows(section)
    return sections


def compare_group(
    group: PolicyGroup,
    accuracy_margin_pp: float = DEFAULT_MARGIN_PP,
    compiled_runs: frozenset[str] = frozenset(),
) -> None:
    """Every row's estimates first, then the verdicts: a fallback's verdict reads the speed-up
    of the row it fell back to. `compiled_runs`: the runs that used --compile."""
    group.comparisons = {
        row: _compare(group, row, accuracy_margin_pp, compiled_runs) for row in group.cells
    }
    for row in group.cells:
        if row != BASELINE:
            verdict = policy_verdict(group, row)
            group.comparisons[row] = dataclasses.replace(group.comparisons[row], verdict=verdict)


def _compare(
    group: PolicyGroup, row: Row, accuracy_margin_pp: float, compiled_runs: frozenset[str]
) -> Comparison:
    known = POLICIES.get(row.policy)
    base = known.base if known is not None else None
    # An emulated fp8 row: its step time and memory are the emulation's (PolicyGroup.emulated),
    # decided here once for every estimate of the row.
    emulated = group.emulated(row)
    speedup = _speedup(group, row, emulated)
    accuracy = _accuracy_delta_pp(group, row)
    vs_base = None
    if base:
        vs_base = _against_base(group, row, base, accuracy_margin_pp, emulated, compiled_runs)
    return Comparison(
        row=row,
        speedup=speedup,
        emulation_cost=_emulation_cost(group, row, emulated),
        end_to_end_speedup=_end_to_end_speedup(group, row, emulated),
        memory_ratio=_memory_ratio(group, row, emulated),
        memory_refused=_memory_refused(group, row, emulated),
        accuracy_delta_pp=accuracy,
        distrust=_distrust(group, row, speedup),
        busy_share=_busy_share(group, row, speedup),
        accuracy=judge_accuracy(accuracy, accuracy_margin_pp) if row != BASELINE else None,
        vs_base=vs_base,
        compiled=_compiled(group, row, BASELINE),
        compile_ran=_compile_ran(group, row, BASELINE, compiled_runs),
        emulated=emulated,
    )


def _against_base(
    group: PolicyGroup,
    row: Row,
    base: str,
    accuracy_margin_pp: float,
    emulated: bool,
    compiled_runs: frozenset[str],
) -> AgainstBase | None:
    """The row against the policy it builds on (float8 against bf16), where the group has a
    cell of it: fp8's reference is bf16, whether or not float32 ran beside them."""
    if base not in group.cells:
        return None
    accuracy = _accuracy_delta_pp(group, row, base)
    speedup = _speedup(group, row, emulated, base)
    return AgainstBase(
        base=base,
        speedup=speedup,
        memory_ratio=_memory_ratio(group, row, emulated, base),
        memory_refused=_memory_refused(group, row, emulated, base),
        accuracy_delta_pp=accuracy,
        accuracy=judge_accuracy(accuracy, accuracy_margin_pp),
        compiled=_compiled(group, row, base),
        compile_ran=_compile_ran(group, row, base, compiled_runs),
        distrust=_distrust(group, row, speedup, base),
        busy_share=_busy_share(group, row, speedup, base),
    )


def _compiled(group: PolicyGroup, row: Row, against: str) -> str | None:
    """`fp8 compiled, bf16 eager` where one of the two ran under torch.compile and the other
    did not (a float8 cell compiles by default), so their ratio holds compile's gain too."""
    ref, cell = group.cells.get(against), group.cells.get(row)
    if ref is None or cell is None or not ref.ok or not cell.ok or ref.compiled == cell.compiled:
        return None
    said = {True: "compiled", False: "eager"}
    return f"{short(row)} {said[cell.compiled]}, {short(against)} {said[ref.compiled]}"


def _compile_ran(group: PolicyGroup, row: Row, against: str, compiled_runs: frozenset[str]) -> bool:
    """Whether a run behind the row or `against` used --compile (with --also-eager, beside
    these eager cells): then where one of the two is compiled, --compile is no advice."""
    cells = (group.cells.get(row), group.cells.get(against))
    return any(r.run_id in compiled_runs for cell in cells if cell for r in cell.records)


def _pairs(
    group: PolicyGroup,
    policy: str,
    values: Callable[[CellSummary], dict[RepeatKey, V]],
    against: str = BASELINE,
) -> list[tuple[V, V]]:
    """(float32, policy) values of the repeats both have, in repeat order; `against`:
    another row than float32 (an emulated fp8 cell's accuracy against bf16)."""
    ref = group.reference if against == BASELINE else group.cells.get(against)
    cell = group.cells.get(policy)
    if ref is None or not ref.ok or cell is None or not cell.ok:
        return []
    a, b = values(ref), values(cell)
    return [(a[k], b[k]) for k in sorted(a.keys() & b.keys())]


def _speedup(
    group: PolicyGroup, policy: str, emulated: bool, against: str = BASELINE
) -> Estimate | None:
    """float32 step time (or `against`'s) / this policy's (above 1: faster). Where the 16-bit
    cells run a larger batch (--batch-scale-16bit) the times are per sample, so this is
    the throughput ratio (samples/s) of the policy at its batch to float32 at its own.
    None for an emulated fp8 cell: _emulation_cost says what its step time is."""
    if emulated:
        return None
    pairs = _pairs(group, policy, CellSummary.step_times, against)
    if pairs and group.batch_scaled and against != BASELINE:
        return None  # both 16-bit: the batch scaling is said against float32 only
    if pairs and group.batch_scaled:
        ref, cell = group.reference, group.cells[policy]
        ref_batch, batch = ref.batch() if ref else None, cell.batch()
        if not ref_batch or not batch:
            return None
        pairs = [(per_sample(a, ref_batch), per_sample(b, batch)) for a, b in pairs]
    return step_ratio(pairs) if pairs else None


def _emulation_cost(group: PolicyGroup, policy: str, emulated: bool) -> Estimate | None:
    """An emulated fp8 cell's step time / float32's (above 1: slower): what emulating
    fp8 costs here, never a speed; None for any other cell."""
    if not emulated or group.batch_scaled:
        return None
    pairs = _pairs(group, policy, CellSummary.step_times)
    return step_ratio([(b, a) for a, b in pairs]) if pairs else None


def _speedup_ceiling(group: PolicyGroup, policy: Row) -> tuple[float, str]:
    """The largest speed-up over float32 the device could deliver, and where it comes from:
    the ratio of the policy's peak to float32's (datasheet, else measured) or of the element
    widths (a 16-bit tensor moves half the bytes), whichever is larger, with SPEEDUP_ROOM for
    what a policy saves besides. With no peaks: a bound for any device.

    float32's MFU does not narrow it. An Amdahl bound that took the share of float32's step
    below its matmul peak for work the policy cannot speed up misfired on a real H200:
    float32 mnist_dense ran at 70 % of the fp32 peak, and tf32 gained 4.85×, past the 3.83×
    that bound allowed: the rest of a step can be matmul below its peak too."""
    ref, cell = group.reference, group.cells.get(policy)
    known = POLICIES.get(policy.policy)
    narrower = FLOAT32.compute_bytes / known.compute_bytes if known is not None else 1.0
    for peak, source in (("peak_tflops", "datasheet"), ("measured_peak_tflops", "measured")):
        low, high = (getattr(c, peak) if c else None for c in (ref, cell))
        if not (low and high):
            continue
        ratio = high / low
        why = f"{ratio:.3g}× the float32 peak ({source}), {narrower:g}× fewer bytes"
        return SPEEDUP_ROOM * max(ratio, narrower), why
    return ANY_DEVICE_SPEEDUP, (
        f"no part in the peak table has a 16-bit peak above {ANY_DEVICE_RATIO:g}× its float32 peak"
    )


def _implausible_speedup(group: PolicyGroup, policy: Row, speedup: Estimate | None) -> str | None:
    """Why the speed-up cannot be real, or None. A policy slower than float32 never is: a
    ceiling bounds gains, and a slow cell says nothing about one."""
    if speedup is None or speedup.value <= 1:
        return None
    ceiling, why = _speedup_ceiling(group, policy)
    if speedup.value <= ceiling:
        return None
    return (
        f"a {speedup.value:.3g}× speed-up is beyond what the device allows "
        f"(at most {ceiling:.3g}×: {why})"
    )


def _distrust(
    group: PolicyGroup, policy: str, speedup: Estimate | None, against: str = BASELINE
) -> str | None:
    """Why the evidence for `policy` against float32 (or `against`) cannot be trusted, or
    None: a repeat of either cell ran on a busy machine, or a figure is beyond what the
    device can do. Then no verdict recommends or warns, and a timing gate is inconclusive."""
    reasons = []
    for cell in (group.cells.get(against), group.cells.get(policy)):
        if cell is None:
            continue
        busy = cell.busy_text()
        if busy:
            reasons.append(f"{cell.row}: {busy}")
        reasons += [f"{cell.row}: {note}" for note in cell.implausible]
    # the ceiling bounds a gain over float32 only
    impossible = _implausible_speedup(group, policy, speedup) if against == BASELINE else None
    if impossible:
        reasons.append(impossible)
    return "; ".join(dict.fromkeys(reasons)) if reasons else None


def _busy_share(
    group: PolicyGroup, policy: str, speedup: Estimate | None, against: str = BASELINE
) -> float | None:
    """Where a busy machine is the only reason `_distrust` gives: the largest share of CPU
    time others took from either cell. None when neither ran contended, or when a figure is
    implausible too (no margin makes an impossible figure right)."""
    cells = [c for c in (group.cells.get(against), group.cells.get(policy)) if c is not None]
    if any(cell.implausible for cell in cells):
        return None
    if against == BASELINE and _implausible_speedup(group, policy, speedup):
        return None
    shares = [cell.taken_share for cell in cells if cell.contended]
    return max(shares) if shares else None


def _memory_ratio(
    group: PolicyGroup, policy: str, emulated: bool, against: str = BASELINE
) -> Estimate | None:
    """This policy's memory / float32's (or `against`'s), only between the same kind of
    memory (none for an emulated fp8 cell, whose memory holds the emulation's float32
    copies)."""
    ref, cell = group.cells.get(against), group.cells.get(policy)
    if emulated:
        return None
    if ref is None or cell is None or ref.memory_kind != cell.memory_kind:
        return None
    values = CellSummary.memory_values
    pairs = [(m, r) for r, m in _pairs(group, policy, values, against) if r > 0]
    return paired_ratio(pairs) if pairs else None


def _memory_refused(
    group: PolicyGroup, policy: Row, emulated: bool, against: str = BASELINE
) -> str | None:
    """Why this row's memory is not divided by float32's (or `against`'s) though both
    have a figure: they measure different things (cells.memory_mismatch)."""
    ref, cell = group.cells.get(against), group.cells.get(policy)
    if emulated or ref is None or cell is None or not (ref.ok and cell.ok):
        return None
    return memory_mismatch(ref, short(against), cell, short(policy))


def _accuracy_delta_pp(group: PolicyGroup, policy: str, against: str = BASELINE) -> Estimate | None:
    """This policy's test accuracy minus float32's (or `against`'s), in points."""
    pairs = [(a, r) for r, a in _pairs(group, policy, CellSummary.accuracies, against)]
    return paired_difference(pairs).scaled(100) if pairs else None


def _end_to_end_speedup(group: PolicyGroup, policy: str, emulated: bool) -> Estimate | None:
    """This policy's end-to-end samples/s / float32's, through the same input pipeline
    (none for an emulated fp8 cell, as _speedup)."""
    if emulated:
        return None
    pairs = [
        (rate, ref_rate)
        for (ref_rate, ref_pipe), (rate, pipe) in _pairs(
            group, policy, CellSummary.end_to_end_rates
        )
        if pipe == ref_pipe
    ]
    return paired_ratio(pairs) if pairs else None
