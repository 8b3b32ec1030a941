"""The report's tables as rows of text, shared by the terminal and the markdown renderers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from mpbench.compare import fmt
from mpbench.compare.cells import CellSummary, PolicyGroup, Section
from mpbench.compare.estimate import Estimate
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


def status_text(cell: CellSummary) -> str:
    if cell.all_ok:
        text = "ok" if cell.repeats == 1 else f"ok ×{cell.repeats}"
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


def _memory_header(section: Section) -> tuple[str, bool]:
    """Say which memory the column holds; tag each cell only when a section mixes kinds."""
    sources = {c.memory_source for g in section.groups for c in g.cells.values() if c.memory_source}
    if len(sources) == 1:
        return f"peak mem ({sources.pop()})", False
    return "peak mem", len(sources) > 1


def _ratio_or_ref(policy: str, value: Estimate | None) -> str:
    if policy == BASELINE and value is not None:
        return REF
    return fmt.ratio(value.value if value else None)


def _delta_or_ref(policy: str, value: Estimate | None) -> str:
    if policy == BASELINE and value is not None:
        return REF
    return fmt.points(value.value if value else None)


def _spread(cell: CellSummary) -> str:
    step = cell.step_time_s
    if step is None or step.repeats < 2:
        return fmt.DASH
    return f"{fmt.ms_range(step.low, step.high)} (n={step.repeats})"


def section_table(section: Section, labeler: Labeler) -> TextTable:
    memory_header, tag_memory = _memory_header(section)
    repeats = any(c.repeats > 1 for g in section.groups for c in g.cells.values())
    headers = ["framework", "policy", "step ms: median (p10–p90)"]
    if repeats:
        headers.append("repeat medians, ms")
    headers += [
        "speed-up vs fp32",
        "samples/s",
        memory_header,
        "memory vs fp32",
        "test accuracy",
        "Δ acc. vs fp32",
        "loss scale / skipped",
        "status",
    ]
    title = f"{section.workload} on {section.device} [{short_fingerprint(section.fingerprint)}]"
    table = TextTable(title, headers)
    for group in section.groups:
        for policy, cell in group.cells.items():
            table.rows.append(_cell_row(group, policy, cell, labeler, repeats, tag_memory))
            table.styles.append(_style(cell))
        table.group_ends.add(len(table.rows) - 1)
    table.group_ends.discard(len(table.rows) - 1)
    table.caption = "config: " + "; ".join(
        f"{labeler.framework(g.key)} {config_text(g)}" for g in section.groups
    )
    return table


def _cell_row(
    group: PolicyGroup,
    policy: str,
    cell: CellSummary,
    labeler: Labeler,
    repeats: bool,
    tag_memory: bool,
) -> list[str]:
    step = cell.step_time_s
    median = step.value if step else None
    step_text = fmt.ms(median)
    if median is not None and cell.p10_s is not None and cell.p90_s is not None:
        step_text += f" ({fmt.ms_range(cell.p10_s, cell.p90_s)})"
    memory = fmt.size(cell.memory_bytes.value if cell.memory_bytes else None)
    if tag_memory and cell.memory_source:
        memory += f" ({cell.memory_source})"
    accuracy = fmt.accuracy(cell.accuracy.value if cell.accuracy else None)
    if cell.accuracy is not None and cell.accuracy.repeats > 1:
        accuracy += f" ({fmt.accuracy(cell.accuracy.low)}–{fmt.accuracy(cell.accuracy.high)})"
    row = [labeler.framework(group.key), policy, step_text]
    if repeats:
        row.append(_spread(cell))
    row += [
        _ratio_or_ref(policy, group.speedup(policy)),
        fmt.throughput(cell.throughput),
        memory,
        _ratio_or_ref(policy, group.memory_ratio(policy)),
        accuracy,
        _delta_or_ref(policy, group.accuracy_delta_pp(policy)),
        fmt.loss_scale(cell.loss_scale, cell.skipped_steps),
        status_text(cell),
    ]
    return row


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
    headers = ["cell", "step ms: baseline → now", "peak memory", "test accuracy", "status"]
    table = TextTable(f"Against the baseline ({', '.join(report.baseline_runs)})", headers)
    for match in report.matches:
        cand, base = match.candidate, match.baseline
        step = match.step_change()
        memory = match.memory_change()
        accuracy = match.accuracy_change_pp()
        row = [
            match.label,
            _change(
                fmt.ms(base.step_time_s.value if base.step_time_s else None),
                fmt.ms(cand.step_time_s.value if cand.step_time_s else None),
                fmt.percent_change(step.value - 1) if step else None,
            ),
            _change(
                fmt.size(base.memory_bytes.value if base.memory_bytes else None),
                fmt.size(cand.memory_bytes.value if cand.memory_bytes else None),
                fmt.percent_change(memory.value - 1) if memory else None,
            ),
            _change(
                fmt.accuracy(base.accuracy.value if base.accuracy else None),
                fmt.accuracy(cand.accuracy.value if cand.accuracy else None),
                fmt.points(accuracy.value) if accuracy else None,
            ),
            _status_change(base, cand),
        ]
        table.rows.append(row)
        table.styles.append(_style(cand))
    return table


def _status_change(base: CellSummary, cand: CellSummary) -> str:
    before, after = status_text(base), status_text(cand)
    if before == after:
        return before if before.startswith("ok") else f"{before} (in both)"
    return f"{before} → {after}"


def _change(before: str, after: str, delta: str | None) -> str:
    if before == fmt.DASH and after == fmt.DASH:
        return fmt.DASH
    return f"{before} → {after}" + (f" ({delta})" if delta else "")


def gates_table(report: Report) -> TextTable:
    """Every failure and every pass that was noise in full; other passes one row per gate."""
    table = TextTable(f"Gates: {report.verdict}", ["result", "gate", "cell", "numbers"])
    for result in report.failures:
        table.rows.append(["FAIL", result.gate, result.cell, result.message])
        table.styles.append("failed")
    clean: dict[str, list[GateResult]] = {}
    for result in report.results:
        if result.passed and result.noise:
            table.rows.append(["pass", result.gate, result.cell, result.message])
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
