"""The report's tables as rows of text, shared by the terminal and the markdown renderers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from mpbench.compare import fmt
from mpbench.compare.cells import CellKey, CellSummary, PolicyGroup, Section
from mpbench.compare.estimate import REPEATS, WITHIN_RUN, Estimate
from mpbench.compare.gates import GateResult
from mpbench.compare.labels import Labeler, short_fingerprint
from mpbench.compare.report import Report
from mpbench.policies import BASELINE

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


DRIFT = "drift"


def status_text(cell: CellSummary) -> str:
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


def memory_header(kinds: set[str]) -> tuple[str, bool]:
    """Say which memory the column holds; tag each cell only when a table mixes kinds."""
    if len(kinds) == 1:
        return next(iter(kinds)), False
    return "memory", len(kinds) > 1


def _cells(section: Section) -> list[CellSummary]:
    return [c for g in section.groups for c in g.cells.values()]


def _ratio_or_ref(policy: str, value: Estimate | None) -> str:
    if policy == BASELINE and value is not None:
        return REF
    return fmt.ratio_interval(value)


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


def interval_footnotes(estimates: list[Estimate | None]) -> list[str]:
    """What the intervals in a table are: one line per kind present."""
    repeats, within_run = interval_kinds(estimates)
    lines = []
    if repeats is not None:
        lines.append(
            f"(a–b): 95 % interval over {repeats} repeats (separate processes; t-interval of "
            "per-repeat values, ratios to float32 paired by run and repeat)"
        )
    if within_run:
        lines.append(WITHIN_RUN_NOTE)
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


def section_table(section: Section, labeler: Labeler) -> TextTable:
    cells = _cells(section)
    kinds = {c.memory_kind for c in cells if c.memory_kind}
    mem_header, tag_memory = memory_header(kinds)
    repeats = any(c.repeats > 1 for c in cells)
    end_to_end = any(c.end_to_end is not None for c in cells)
    mfu = any(c.mfu is not None for c in cells)
    mfu_measured = any(c.mfu_measured is not None for c in cells)
    headers = ["framework", "policy", "step ms: median (p10–p90)"]
    if repeats:
        headers.append("step ms: 95 % interval")
    headers.append("speed-up vs fp32")
    if end_to_end:
        headers.append("end-to-end speed-up")
    headers += [
        "samples/s",
        mem_header,
        "memory vs fp32",
        "test accuracy",
        "Δ acc. vs fp32",
        "loss scale / skipped",
    ]
    if mfu:
        headers.append("MFU (datasheet)")
    if mfu_measured:
        headers.append("MFU (measured peak)")
    headers.append("status")
    title = f"{section.workload} on {section.device} [{short_fingerprint(section.fingerprint)}]"
    table = TextTable(title, headers)
    shown: list[Estimate | None] = []
    for group in section.groups:
        for policy, cell in group.cells.items():
            estimates = {
                "step": cell.step_time_s if repeats else None,
                "speedup": group.speedup(policy),
                "e2e": group.end_to_end_speedup(policy),
                "memory": group.memory_ratio(policy),
                "accuracy": group.accuracy_delta_pp(policy),
            }
            if policy != BASELINE:
                shown += estimates.values()
            elif repeats:
                shown.append(estimates["step"])
            row = [labeler.framework(group.key), policy, _step_text(cell)]
            if repeats:
                row.append(fmt.ms_interval(cell.step_time_s))
            row.append(_ratio_or_ref(policy, estimates["speedup"]))
            if end_to_end:
                row.append(_ratio_or_ref(policy, estimates["e2e"]))
            memory = fmt.size(cell.memory_bytes.value if cell.memory_bytes else None)
            if tag_memory and cell.memory_kind:
                memory += f" ({cell.memory_kind})"
            row += [
                fmt.throughput(cell.throughput),
                memory,
                _ratio_or_ref(policy, estimates["memory"]),
                fmt.accuracy(cell.accuracy.value if cell.accuracy else None),
                _delta_or_ref(policy, estimates["accuracy"]),
                fmt.loss_scale(cell.loss_scale, cell.skipped_steps),
            ]
            if mfu:
                row.append(fmt.fraction_percent(cell.mfu))
            if mfu_measured:
                row.append(fmt.fraction_percent(cell.mfu_measured))
            row.append(status_text(cell))
            table.rows.append(row)
            table.styles.append(_style(cell))
        table.group_ends.add(len(table.rows) - 1)
    table.group_ends.discard(len(table.rows) - 1)
    table.caption = "config: " + "; ".join(
        f"{labeler.framework(g.key)} {config_text(g)}" for g in section.groups
    )
    table.footnotes = interval_footnotes(shown) + drift_footnotes(section, labeler)
    if end_to_end:
        pipelines = sorted({c.end_to_end_pipeline for c in cells if c.end_to_end_pipeline})
        table.footnotes.append(
            "end-to-end speed-up: policy / float32 samples/s over a window timed without "
            f"per-step synchronisation (input: {'; '.join(pipelines)})"
        )
    return table


def _step_text(cell: CellSummary) -> str:
    step = cell.step_time_s
    median = step.value if step else None
    text = fmt.ms(median)
    if median is not None and cell.p10_s is not None and cell.p90_s is not None:
        text += f" ({fmt.ms_range(cell.p10_s, cell.p90_s)})"
    return text


# The caption names what sizes a cell; the full config is in the JSON and CSV formats.
_CONFIG_ORDER = ("batch_size", "epochs", "max_steps", "warmup_steps", "units", "data")
_CONFIG_EXTRA = ("loop", "jit")
_CONFIG_NAMES = {"batch_size": "batch", "warmup_steps": "warm-up"}


def config_text(group: PolicyGroup) -> str:
    """`(batch 128, epochs 1, max_steps 60, warm-up 5, units 64, data synthetic-mnist)`."""
    config = group.key.config_dict()
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
    headers += ["test accuracy", "status"]
    table = TextTable(f"Against the baseline ({', '.join(report.baseline_runs)})", headers)
    shown: list[Estimate | None] = []
    for match in report.matches:
        cand, base = match.candidate, match.baseline
        step = match.step_change()
        memory = match.memory_change()
        accuracy = match.accuracy_change_pp()
        shown += [step, memory, accuracy]
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
                fmt.change_interval(memory.shifted(-1)) if memory else None,
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
