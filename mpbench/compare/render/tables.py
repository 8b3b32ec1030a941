"""The report's tables as rows of text, shared by the terminal and the markdown renderers."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from mpbench.compare.gates import GateResult
from mpbench.compare.report import Report
from mpbench.compare.summary import fmt
from mpbench.compare.summary.cells import (
    UNKNOWN_BOTTLENECK,
    CellKey,
    CellSummary,
    PolicyGroup,
    Section,
    memory_text,
)
from mpbench.compare.summary.comparison import Comparison
from mpbench.compare.summary.estimate import (
    MIN_STEPS,
    REPEATS,
    TOO_FEW_STEPS,
    WITHIN_RUN,
    Estimate,
)
from mpbench.compare.summary.labels import Labeler, short_framework
from mpbench.compare.summary.scaling import NOT_SCALING, ScalingRow
from mpbench.policies import BASELINE
from mpbench.results.schema import BottleneckStats
from mpbench.results.variant import GROUP_RECIPE

REF = "ref"


@dataclass
class TextTable:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    styles: list[str | None] = field(default_factory=list)  # per row: None, "dim", "failed"
    group_ends: set[int] = field(default_factory=set)  # row indexes followed by a separator
    caption: str | None = None
    footnotes: list[str] = field(default_factory=list)  # one line each, below the caption
    # Per column: 0 = always shown; higher numbers are left out first when a terminal is too
    # narrow (the markdown, JSON and CSV formats always keep every column). Empty: all 0.
    priorities: list[int] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)  # one line per framework group
    # Headers of text columns beyond TEXT_COLUMNS (left-aligned), and of prose columns whose
    # values may wrap between words (history's verdicts); every other column is a number.
    text_columns: frozenset[str] = frozenset()
    prose_columns: frozenset[str] = frozenset()

    def priority(self, column: int) -> int:
        return self.priorities[column] if self.priorities else 0

    def without(self, columns: set[int]) -> TextTable:
        """The table with some columns left out (by index)."""
        keep = [i for i in range(len(self.headers)) if i not in columns]
        return dataclasses.replace(
            self,
            headers=[self.headers[i] for i in keep],
            rows=[[row[i] for i in keep] for row in self.rows],
            priorities=[self.priority(i) for i in keep],
        )


DRIFT = "drift"


def status_text(cell: CellSummary) -> str:
    text = _plain_status_text(cell)
    for note in trust_notes(cell):
        text += f"; {note}"
    return text


def trust_notes(cell: CellSummary) -> list[str]:
    """What the status column says beside the status: a busy machine, impossible figures."""
    busy = cell.busy_text()
    notes = [f"{CONTENDED}: {busy}"] if busy else []
    return notes + [f"implausible: {note}" for note in cell.implausible + cell.voided]


CONTENDED = "contended"


def _plain_status_text(cell: CellSummary) -> str:
    if cell.all_ok:
        text = "ok" if cell.repeats == 1 else f"ok ×{cell.repeats}"
        if cell.drift:
            text += f"; {DRIFT} (see below)"
        return f"{text}; {cell.notes}" if cell.notes else text
    reason = cell.reason
    status = cell.status if not cell.ok else f"{cell.status} in {_not_ok(cell)} of {cell.repeats}"
    return f"{status}: {reason}" if reason else status


def _not_ok(cell: CellSummary) -> int:
    return len(cell.records) - len(cell.ok_records)


def _style(cell: CellSummary) -> str | None:
    if cell.failed:
        return "failed"
    return None if cell.ok else "dim"


def _cells(section: Section) -> list[CellSummary]:
    return [c for g in section.groups for c in g.cells.values()]


def _ratio_or_ref(policy: str, value: Estimate | None) -> str:
    if policy == BASELINE and value is not None:
        return REF
    return fmt.ratio_interval(value)


# An emulated fp8 cell's speed-up column: its step time is the cost of emulating fp8.
EMULATED_NOTE = (
    "emulated fp8: fp8 numerics without fp8 GEMMs (no fp8 hardware here), so its step time "
    "and memory are the cost of emulation, not fp8's: no speed-up or memory ratio is shown"
)


def _speedup_cell(comparison: Comparison, value: Estimate | None, notes: Footnotes) -> str:
    if comparison.emulated:
        return "emulated " + notes.mark(EMULATED_NOTE)
    return _ratio_or_ref(comparison.row, value)


def _bound_cell(cell: CellSummary, notes: Footnotes) -> str:
    """`launch` (the diagnosis's kind without "-bound"), `launch 2/3` where repeats differ;
    `unknown [n]` with why no class was decided as footnote n (what JSON and CSV say in the
    evidence)."""
    found = cell.bottleneck
    if found is None:
        return fmt.DASH
    if found.kind == UNKNOWN_BOTTLENECK:  # every repeat undiagnosed: no agreement to count
        return f"{found.kind} " + notes.mark(f"bound {found.kind}: {_not_classified(found)}")
    text = found.kind.removesuffix("-bound")
    agree, diagnosed = cell.bottleneck_agree
    return f"{text} {agree}/{diagnosed}" if agree < diagnosed else text


def _not_classified(found: BottleneckStats) -> str:
    """Why an `unknown` diagnosis has no class: the evidence line's `not classified: ...`
    (what it lacks, each with its reason), else the whole line, else `unavailable`."""
    _, said, why = found.evidence.partition("not classified: ")
    if said and why:
        return why
    if found.evidence:
        return found.evidence
    missing = "; ".join(f"{name} ({reason})" for name, reason in found.unavailable.items())
    return missing or "the record does not say why"


def _memory_ratio_cell(policy: str, comparison: Comparison, notes: Footnotes) -> str:
    """The memory ratio, or `— [n]` where the two figures measure different things."""
    if comparison.memory_refused:
        return f"{fmt.DASH} " + notes.mark(comparison.memory_refused)
    return _ratio_or_ref(policy, comparison.memory_ratio)


def _delta_or_ref(policy: str, value: Estimate | None) -> str:
    if policy == BASELINE and value is not None:
        return REF
    return fmt.points_interval(value)


def interval_kinds(estimates: list[Estimate | None]) -> tuple[str | None, bool]:
    """(how many repeats the repeat intervals rest on, e.g. "3" or "2–3", or None; whether a
    within-run-only interval is among them)."""
    counts = sorted({e.n for e in estimates if e is not None and e.kind == REPEATS})
    repeats = None
    if counts:
        repeats = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return repeats, any(e is not None and e.kind == WITHIN_RUN for e in estimates)


WITHIN_RUN_NOTE = (
    f"{fmt.WITHIN_RUN_MARK} within-run only: one repeat, so the 95 % interval comes from the "
    "steps inside one process (block bootstrap); it ignores process-to-process variance and is "
    "optimistic — run with --repeat 3 or more"
)


TOO_FEW_STEPS_NOTE = (
    f"{TOO_FEW_STEPS}: a cell of one repeat gets a within-run interval only from at least "
    f"{MIN_STEPS} timed steps (fewer cannot bound a median at 95 %: even their whole range "
    f"misses it too often); time more steps (--max-steps, --warmup-steps) or run --repeat 3"
)


def interval_footnotes(estimates: list[Estimate | None]) -> list[str]:
    """What the intervals in a table are: one line per kind present, and why an interval is
    missing where the table says so."""
    repeats, within_run = interval_kinds(estimates)
    lines = []
    if repeats is not None:
        lines.append(
            f"(a–b): 95 % interval over {repeats} repeats (separate processes; ratios to "
            "float32 paired by run and repeat: their median, within the wider of the "
            "t-interval and the order-statistic interval; other values: t-interval)"
        )
    if within_run:
        lines.append(WITHIN_RUN_NOTE)
    if any(e is not None and e.no_interval == TOO_FEW_STEPS for e in estimates):
        lines.append(TOO_FEW_STEPS_NOTE)
    return lines


def drift_footnotes(section: Section, labeler: Labeler) -> list[str]:
    lines = []
    for group in section.groups:
        for policy, cell in group.cells.items():
            for d in cell.drift:
                lines.append(
                    f"{DRIFT}: {labeler.cell(CellKey(group.key, policy))} (run {d.run_id}, "
                    f"repeat {d.repeat}): timed steps drifted: first-half median "
                    f"{fmt.ms(d.first_half_s)} ms, second-half {fmt.ms(d.second_half_s)} ms "
                    "(a warning: the median mixes two speeds)"
                )
    return lines


# The section table's columns: (header, priority). Priority 0 is always shown; at a narrow
# terminal the highest numbers go first: the verdict needs the cell, its speed-up, accuracy
# delta and status most; raw figures (samples/s, MiB, percentiles) are in JSON/CSV anyway.
CELL, STEP, STEP_CI, SPEEDUP, E2E = "cell", "step ms", "step ms 95 %", "speed-up", "e2e speed-up"
SAMPLES, MEMORY, MEMORY_RATIO, ACCURACY = "samples/s", "train mem", "mem ratio", "accuracy"
ACCURACY_DELTA, LOSS_SCALE, MFU, MFU_MEASURED = "Δ acc", "loss scale", "MFU", "MFU meas."
STATUS, SPREAD, BOUND = "status", "p10–p90", "bound"
CPU_UTIL, GPU_UTIL, POWER, ENERGY = "CPU util", "GPU util", "power W", "mJ/sample"
_PRIORITY = {
    CELL: 0,
    SPEEDUP: 0,
    STATUS: 0,
    STEP: 1,
    ACCURACY_DELTA: 2,
    MEMORY_RATIO: 3,
    ACCURACY: 4,
    MEMORY: 5,
    E2E: 6,
    BOUND: 6,
    SAMPLES: 7,
    LOSS_SCALE: 8,
    SPREAD: 9,
    STEP_CI: 10,
    MFU: 11,
    MFU_MEASURED: 11,
    # Telemetry: context for the speed numbers, the first to go at a narrow terminal.
    ENERGY: 12,
    POWER: 13,
    GPU_UTIL: 13,
    CPU_UTIL: 14,
}
# Telemetry columns: shown when a cell of the table has a value (v4 records).
_TELEMETRY = {
    CPU_UTIL: lambda c: c.cpu_util_pct,
    GPU_UTIL: lambda c: c.gpu_util_pct,
    POWER: lambda c: c.power_w,
    ENERGY: lambda c: c.energy_per_sample_j,
}


# The sampled telemetry a record may leave out with a reason (TelemetryStats field -> column).
_SAMPLED_COLUMNS = {
    "mean_cpu_util_pct": CPU_UTIL,
    "mean_gpu_util_pct": GPU_UTIL,
    "mean_power_w": POWER,
}


class Footnotes:
    """Numbered notes under a table ([1], [2], ...): one number per distinct text."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"[{number}] {text}" for number, text in enumerate(self.texts, start=1)]


def section_table(section: Section, labeler: Labeler) -> TextTable:
    """One workload on one machine: a row per framework × policy, numbers only; names,
    configs and reasons go to a legend and numbered footnotes so that no column is wide."""
    from mpbench.compare.summary.comparison import short
    from mpbench.compare.summary.verdict import group_verdicts

    cells = _cells(section)
    kinds = {c.memory_kind for c in cells if c.memory_kind}
    repeats = any(c.repeats > 1 for c in cells)
    columns = [CELL, STEP, SPREAD]
    columns += [STEP_CI] if repeats else []
    columns += [SPEEDUP]
    columns += [E2E] if any(c.end_to_end is not None for c in cells) else []
    columns += [SAMPLES, MEMORY, MEMORY_RATIO, ACCURACY, ACCURACY_DELTA]
    columns += [LOSS_SCALE] if any(c.loss_scale is not None for c in cells) else []
    columns += [MFU] if any(c.mfu is not None for c in cells) else []
    columns += [MFU_MEASURED] if any(c.mfu_measured is not None for c in cells) else []
    columns += [n for n, value in _TELEMETRY.items() if any(value(c) is not None for c in cells)]
    columns += [BOUND] if any(c.bottleneck is not None for c in cells) else []
    columns += [STATUS]
    title = f"{section.workload} on {section.machine.label()}"
    table = TextTable(title, list(columns), priorities=[_PRIORITY[c] for c in columns])
    notes = Footnotes()
    names = group_names(section, labeler)
    shown: list[Estimate | None] = []
    for group in section.groups:
        for policy, cell in group.cells.items():
            comparison = group.comparisons[policy]
            estimates = {
                STEP_CI: cell.step_time_s if repeats else None,
                SPEEDUP: comparison.speedup,
                E2E: comparison.end_to_end_speedup,
                MEMORY_RATIO: comparison.memory_ratio,
                ACCURACY_DELTA: comparison.accuracy_delta_pp,
            }
            if policy != BASELINE:
                shown += estimates.values()
            elif repeats:
                shown.append(estimates[STEP_CI])
            memory = fmt.size(cell.memory_bytes.value if cell.memory_bytes else None)
            if len(kinds) > 1 and cell.memory_kind:
                memory += " " + notes.mark(f"memory: {memory_text(cell.memory_kind)}")
            label = f"{names[group.key]} {short(policy)}"
            if group.batch_scaled and not policy.batch_scaled:
                # float32 (and 16-bit rows at 1x) at the configured batch, beside `bf16 @512`
                label += f" @{dict(group.key.config).get('batch_size', '?')}"
            values = {
                CELL: label,
                STEP: fmt.ms(cell.step_time_s.value if cell.step_time_s else None),
                SPREAD: fmt.ms_range(cell.p10_s, cell.p90_s) if cell.step_time_s else fmt.DASH,
                STEP_CI: fmt.ms_interval(estimates[STEP_CI]),
                SPEEDUP: _speedup_cell(comparison, estimates[SPEEDUP], notes),
                E2E: _ratio_or_ref(policy, estimates[E2E]),
                SAMPLES: fmt.throughput(cell.throughput),
                MEMORY: memory,
                MEMORY_RATIO: _memory_ratio_cell(policy, comparison, notes),
                ACCURACY: fmt.accuracy(cell.accuracy.value if cell.accuracy else None),
                ACCURACY_DELTA: _delta_or_ref(policy, estimates[ACCURACY_DELTA]),
                LOSS_SCALE: fmt.loss_scale(cell.loss_scale, cell.skipped_steps),
                MFU: fmt.fraction_percent(cell.mfu),
                MFU_MEASURED: fmt.fraction_percent(cell.mfu_measured),
                CPU_UTIL: fmt.util_percent(cell.cpu_util_pct),
                GPU_UTIL: fmt.util_percent(cell.gpu_util_pct),
                POWER: fmt.watts(cell.power_w),
                ENERGY: fmt.millijoules(cell.energy_per_sample_j),
                BOUND: _bound_cell(cell, notes),
                STATUS: _status_cell(cell, notes),
            }
            table.rows.append([values[c] for c in columns])
            table.styles.append(_style(cell))
        table.group_ends.add(len(table.rows) - 1)
        table.verdicts += [f"{names[group.key]} {v.text()}" for v in group_verdicts(group)]
    table.group_ends.discard(len(table.rows) - 1)
    table.caption = "\n".join(_config_legend(names[g.key], g) for g in section.groups)
    table.footnotes = _column_notes(kinds, columns) + _telemetry_notes(cells, columns)
    table.footnotes += notes.lines()
    table.footnotes += interval_footnotes(shown) + drift_footnotes(section, labeler)
    if any(g.batch_scaled for g in section.groups):
        table.footnotes.append(
            "@N: the cell's batch (--batch-scale-16bit; with --accumulate, the micro-batch); "
            "where batches differ, speed-up is the throughput ratio (samples/s) against "
            "float32 at its own batch"
        )
    if E2E in columns:
        pipelines = sorted({c.end_to_end_pipeline for c in cells if c.end_to_end_pipeline})
        table.footnotes.append(
            "e2e speed-up: policy / float32 samples/s over a window timed without "
            f"per-step synchronisation (input: {'; '.join(pipelines)})"
        )
    return table


# The scaling table's columns (header, priority), data-parallel cells only (scaling.py).
WORLD, DEVICES, PER_DEVICE, EFFICIENCY = "world", "devices", "per device", "efficiency"
ALLREDUCE, STRAGGLER, GRAD_COMM = "all-reduce", "straggler", "grad comm"
_SCALING_COLUMNS = {  # in display order; 0 is always shown, higher numbers go first
    CELL: 0,
    WORLD: 0,
    DEVICES: 2,
    SAMPLES: 1,
    PER_DEVICE: 3,
    EFFICIENCY: 0,
    ALLREDUCE: 4,
    STRAGGLER: 5,
    GRAD_COMM: 6,
    STATUS: 0,
}


def scaling_table(section: Section, labeler: Labeler | None = None) -> TextTable | None:
    """Per framework, policy and config, a row per world size: global and per-device
    throughput, weak-scaling efficiency against world size 1, all-reduce share, stragglers.
    None when the section holds no data-parallel cell. A row is named by its group at world
    size 1 (the world column says the rest), as the report's labeler names it."""
    from mpbench.compare.summary.comparison import short

    rows = section.scaling
    if not rows:
        return None
    columns = list(_SCALING_COLUMNS)
    title = f"Scaling: {section.workload} on {section.machine.label()}"
    table = TextTable(title, columns, priorities=list(_SCALING_COLUMNS.values()))
    notes = Footnotes()
    labeler = labeler or Labeler(g.key for g in section.groups)
    names = {g.key.single(): labeler.group(g.key.single()) for g in section.groups}
    for index, row in enumerate(rows):
        cell, layout = row.cell, row.layout
        if layout.parallel:
            efficiency = fmt.efficiency_interval(row.efficiency)
            if row.efficiency is None and cell.ok:
                efficiency += " " + notes.mark(_no_efficiency(row))
        else:
            efficiency = REF if cell.ok else fmt.DASH
        world = str(layout.world_size)
        if layout.nnodes > 1:
            world += f" ({layout.nnodes} nodes)"
        values = {
            CELL: f"{names[row.group.key.single()]} {short(row.row)}",
            WORLD: world,
            DEVICES: row.devices or fmt.DASH,
            SAMPLES: fmt.throughput(row.throughput),
            PER_DEVICE: fmt.throughput(row.per_device),
            EFFICIENCY: efficiency,
            ALLREDUCE: _missing(
                fmt.fraction_percent(row.allreduce_share),
                row,
                ("allreduce_share", "allreduce_s_per_step"),
                notes,
            ),
            STRAGGLER: _missing(
                fmt.ratio(row.straggler_ratio),
                row,
                ("straggler_ratio", "rank_step_median_s"),
                notes,
            ),
            GRAD_COMM: layout.grad_comm if layout.parallel else fmt.DASH,
            STATUS: _status_cell(cell, notes),
        }
        table.rows.append([values[c] for c in columns])
        table.styles.append(_style(cell))
        following = rows[index + 1] if index + 1 < len(rows) else None
        if following is not None and _scaling_block(following) != _scaling_block(row):
            table.group_ends.add(len(table.rows) - 1)
    table.footnotes = [
        "world: replicas (data-parallel ranks); samples/s: the job's, every replica together; "
        "per device: samples/s / world; efficiency: weak scaling, samples/s / (world × "
        "samples/s at world size 1), against the ref row of the same framework, policy and "
        "config; all-reduce: the gradient all-reduce's share of the job's median step; "
        "straggler: the slowest rank's median step / the median rank's (1.00× keeps pace)"
    ]
    table.footnotes += _efficiency_interval_notes([r.efficiency for r in rows])
    for row in rows:
        doubt = row.distrust()
        if doubt:
            name = f"{names[row.group.key.single()]} {short(row.row)} at world {row.world_size}"
            table.footnotes.append(f"{name}: re-measure on a quiet machine: {doubt}")
    for kind, text in _not_scaling(rows).items():
        table.footnotes.append(f"devices {kind}: {text}")
    for row in rows:
        if row.unpaired:
            left_out = ", ".join(f"r{repeat} of {run_id}" for run_id, repeat in row.unpaired)
            table.footnotes.append(
                f"efficiency of {names[row.group.key.single()]} {short(row.row)} at world "
                f"{row.world_size} leaves out {left_out}: no world-size-1 repeat of the same "
                "run and repeat to pair with"
            )
    table.footnotes += notes.lines()
    return table


def _scaling_block(row: ScalingRow) -> tuple:
    """Rows of one framework, config and policy are one block of the scaling table."""
    return (row.group.key.single(), row.row)


def _no_efficiency(row: ScalingRow) -> str:
    if row.reference is None:
        return "no world-size-1 cell of the same framework, policy and config to scale from"
    if not row.reference.ok:
        return f"the world-size-1 reference did not finish ({row.reference.status})"
    if row.unpaired and len(row.unpaired) == len(row.cell.ok_records):
        return "no world-size-1 repeat of the same run and repeat to pair with"
    return "no throughput to scale from"


def _missing(text: str, row: ScalingRow, fields: tuple[str, ...], notes: Footnotes) -> str:
    """A value, or "—" with the reason the record gives for its absence as a footnote."""
    if text != fmt.DASH or not row.layout.parallel:
        return text
    reason = next((row.unavailable[n] for n in fields if n in row.unavailable), None)
    return f"{text} {notes.mark(f'{fields[0]}: {reason}')}" if reason else text


def _efficiency_interval_notes(estimates: list[Estimate | None]) -> list[str]:
    repeats, within_run = interval_kinds(estimates)
    lines = []
    if repeats is not None:
        lines.append(
            f"efficiency (a–b): 95 % interval over {repeats} repeat pairs (world N repeat i with "
            "world size 1 repeat i of the same run; geometric mean and t-interval of the "
            "per-pair efficiencies)"
        )
    if within_run:
        lines.append(
            f"{fmt.WITHIN_RUN_MARK} within-run only: one repeat pair, so the efficiency's 95 % "
            "interval is the block bootstrap of the two cells' median step times; it ignores "
            "process-to-process variance and is optimistic — run with --repeat 3 or more"
        )
    if any(e is not None and e.no_interval == TOO_FEW_STEPS for e in estimates):
        lines.append(TOO_FEW_STEPS_NOTE)
    return lines


def _not_scaling(rows: list[ScalingRow]) -> dict[str, str]:
    kinds = {}
    for row in rows:
        for kind in (row.devices or "").split("; "):
            if kind in NOT_SCALING:
                kinds[kind] = NOT_SCALING[kind]
    return kinds


def group_names(section: Section, labeler: Labeler) -> dict:
    """Each group's row name (labels.Labeler.group): `torch`, `torch [accumulate=2]`,
    `tf ×2`; the legend under the table says what each stands for."""
    return {group.key: labeler.group(group.key) for group in section.groups}


def _config_legend(name: str, group: PolicyGroup) -> str:
    """`torch [compile]: batch 128, epochs 1, ...` or `tf = tensorflow: ...`: what a row name
    stands for, the name first as the rows write it."""
    framework = group.key.framework
    short = short_framework(framework)
    if short != framework and name.startswith(short):
        name = f"{name} = {framework}{name[len(short) :]}"
    return f"{name}: {config_text(group)[1:-1]}"


def _column_notes(kinds: set[str], columns: list[str]) -> list[str]:
    lines = [
        "step ms: median time of one synchronised training step; speed-up: float32's step time "
        "/ the policy's; mem ratio: the policy's memory / float32's; Δ acc: points (pp)"
    ]
    if len(kinds) == 1:
        lines.append(f"train mem: {memory_text(next(iter(kinds)))}")
    if MFU in columns or MFU_MEASURED in columns:
        lines.append(
            "MFU: achieved TFLOP/s over the datasheet peak of the policy's dtype; MFU meas.: "
            "against the matmul peak measured on this device (mpbench detect --measure)"
        )
    return lines


def _telemetry_notes(cells: list[CellSummary], columns: list[str]) -> list[str]:
    """What the telemetry columns hold, and what measured the energy (or why it is missing)."""
    shown = [c for c in (CPU_UTIL, GPU_UTIL, POWER) if c in columns]
    lines = []
    if shown:
        lines.append(
            ", ".join(shown) + ": means over the timed steps (median over repeats); CPU util: "
            "100 % is one core busy"
        )
    if POWER in columns and any(c.power_source == "energy counter" for c in cells):
        lines.append(
            "power W: the energy counter's energy over the window / its length where there "
            "is one, else the sampled mean"
        )
    for metric, column in _SAMPLED_COLUMNS.items():
        missing = sorted(
            {c.telemetry_missing[metric] for c in cells if metric in c.telemetry_missing}
        )
        if missing:
            where = "— where not measured" if column in columns else "not measured"
            lines.append(f"{column}: {where}: {'; '.join(missing)}")
    reasons = sorted({c.energy_reason for c in cells if c.energy_reason})
    if ENERGY in columns:
        sources = sorted({c.energy_source for c in cells if c.energy_source})
        steady = any("steady window" in c.energy_windows for c in cells)
        text = "mJ/sample: energy over the timed steps per training sample"
        if steady:
            text += " (over a steady window of the same step where the timed steps were too short)"
        text += f", measured by {'; '.join(sources)}" if sources else ""
        if reasons:
            text += f"; — where not measured: {'; '.join(reasons)}"
        lines.append(text)
    elif reasons:
        # No cell measured energy, so there is no column to dash: the note still says why.
        lines.append(f"mJ/sample: not measured: {'; '.join(reasons)}")
    return lines


def _status_cell(cell: CellSummary, notes: Footnotes) -> str:
    """`ok`, `ok ×3`, or the status with its reason as a numbered footnote; `contended`
    and `implausible` marks with theirs."""
    text = _plain_status_cell(cell, notes)
    busy = cell.busy_text()
    if busy:
        text += f", {CONTENDED} " + notes.mark(f"{busy}: re-measure on a quiet machine")
    doubts = cell.implausible + cell.voided
    if doubts:
        text += ", implausible " + notes.mark("; ".join(doubts))
    return text


def _plain_status_cell(cell: CellSummary, notes: Footnotes) -> str:
    if cell.all_ok:
        text = "ok" if cell.repeats == 1 else f"ok ×{cell.repeats}"
        if cell.drift:
            text += f", {DRIFT}"
        if cell.notes:
            text += " " + notes.mark(cell.notes)
        return text
    status = cell.status if not cell.ok else f"{cell.status} {_not_ok(cell)}/{cell.repeats}"
    return f"{status} {notes.mark(cell.reason)}" if cell.reason else status


# The caption names what sizes a cell; the full config is in the JSON and CSV formats.
_CONFIG_ORDER = ("batch_size", "epochs", "max_steps", "warmup_steps", "units", "data")
_CONFIG_EXTRA = (
    "loop",
    "jit",
    "reference_batch_size",
    "batch_scale_16bit",
    "loss_scale",
    "world_size",
    "nproc_per_node",
    "nnodes",
    "grad_comm",
)
_CONFIG_NAMES = {
    "batch_size": "batch",
    "warmup_steps": "warm-up",
    "reference_batch_size": "batch",
    "batch_scale_16bit": "16-bit batch ×",
    "loss_scale": "loss scale",
    "world_size": "world size",
    "nproc_per_node": "per node",
    "nnodes": "nodes",
    "grad_comm": "grad comm",
}


def config_text(group: PolicyGroup) -> str:
    """`(batch 128, epochs 1, max_steps 60, warm-up 5, units 64, data synthetic-mnist)`. The
    recipe entries are left to the group's name (`torch [accumulate=2]`), which says them."""
    config = group.key.config_dict()
    for name in GROUP_RECIPE:
        config.pop(name, None)
    if group.data_names:
        config["data"] = "+".join(group.data_names)
    names = [n for n in (*_CONFIG_ORDER, *_CONFIG_EXTRA) if n in config]
    parts = []
    for name in names:
        value = config[name]
        if value is None:
            continue
        if isinstance(value, bool):
            text = "on" if value else "off"
        else:
            text = value if isinstance(value, str) else json.dumps(value)
        parts.append(f"{_CONFIG_NAMES.get(name, name)} {text}")
    return "(" + ", ".join(parts) + ")"


def baseline_table(report: Report) -> TextTable:
    kinds = {m.candidate.memory_kind for m in report.matches if m.candidate.memory_kind}
    headers = ["cell", "step ms: baseline → now", _baseline_memory_header(kinds)]
    headers += ["test accuracy", "status: baseline → now"]
    table = TextTable(f"Against the baseline ({', '.join(report.baseline_runs)})", headers)
    shown: list[Estimate | None] = []
    notes = Footnotes()
    for match in report.matches:
        cand, base = match.candidate, match.baseline
        step = match.step_change()
        memory = match.memory_change()
        accuracy = match.accuracy_change_pp()
        shown += [step, memory, accuracy]
        memory_delta = fmt.change_interval(memory.shifted(-1)) if memory else None
        if match.memory_refused:
            memory_delta = "not compared " + notes.mark(match.memory_refused)
        row = [
            match.label,
            _change(
                fmt.ms(base.step_time_s.value if base.step_time_s else None),
                fmt.ms(cand.step_time_s.value if cand.step_time_s else None),
                fmt.change_interval(step.shifted(-1)) if step else None,
            ),
            _change(
                fmt.size(base.memory_bytes.value if base.memory_bytes else None),
                fmt.size(cand.memory_bytes.value if cand.memory_bytes else None),
                memory_delta,
            ),
            _change(
                fmt.accuracy(base.accuracy.value if base.accuracy else None),
                fmt.accuracy(cand.accuracy.value if cand.accuracy else None),
                fmt.points_interval(accuracy) if accuracy else None,
            ),
            _status_change(base, cand),
        ]
        table.rows.append(row)
        table.styles.append(_style(cand))
    table.footnotes = interval_footnotes(shown)
    both = {c.memory_kind for m in report.matches for c in (m.baseline, m.candidate)}
    table.footnotes += [memory_text(kind) for kind in sorted(k for k in both if k)]
    table.footnotes += notes.lines()
    return table


def _baseline_memory_header(kinds: set[str]) -> str:
    return f"{next(iter(kinds))}: baseline → now" if len(kinds) == 1 else "memory: baseline → now"


def _status_change(base: CellSummary, cand: CellSummary) -> str:
    before, after = status_text(base), status_text(cand)
    if before == after:
        return before if before.startswith("ok") else f"{before} (in both)"
    return f"{before} → {after}"


def _change(before: str, after: str, delta: str | None) -> str:
    if before == fmt.DASH and after == fmt.DASH:
        return fmt.DASH
    return f"{before} → {after}" + (f", {delta}" if delta else "")


INCONCLUSIVE = "inconclusive"


def gates_table(report: Report) -> TextTable:
    """Every failure and every inconclusive pass in full; other passes one row per gate."""
    table = TextTable(f"Gates: {report.verdict}", ["result", "gate", "cell", "numbers"])
    for result in report.failures:
        table.rows.append(["FAIL", result.gate, result.cell, result.message])
        table.styles.append("failed")
    clean: dict[str, list[GateResult]] = {}
    for result in report.results:
        if result.passed and result.inconclusive:
            table.rows.append([INCONCLUSIVE, result.gate, result.cell, result.message])
            table.styles.append(None)
        elif result.passed:
            clean.setdefault(result.gate, []).append(result)
    for gate, results in clean.items():
        table.rows.append(["pass", gate, *_summary(results)])
        table.styles.append(None)
    return table


def _summary(results: list[GateResult]) -> list[str]:
    if len(results) == 1:
        return [results[0].cell, results[0].message]
    closest = max(results, key=lambda r: r.pressure() or 0.0)
    if closest.pressure() is None:
        return [f"{len(results)} cells", closest.message]
    return [f"{len(results)} cells", f"closest to the limit: {closest.cell}: {closest.message}"]


# --- what the terminal and markdown renderers print ----------------------------------------

TEXT_COLUMNS = {
    "framework",
    "policy",
    "status",
    "status: baseline → now",
    "cell",
    "result",
    "gate",
    "numbers",
    "devices",
    "grad comm",
}


def report_header(report: Report) -> str:
    text = "runs: " + ", ".join(report.runs)
    if report.baseline_runs:
        text += " · baseline: " + ", ".join(report.baseline_runs)
    return text
