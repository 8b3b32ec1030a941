"""The fleet: what each policy buys on each of several machines, side by side.

`mpbench history --by device` reads runs of several machines and shows, per workload, one
column per machine: each policy's speed-up over float32, memory ratio and accuracy difference
there, and compare's verdict for that machine. Each machine's numbers are compare's, taken over
that machine's records alone (its newest run, unless filters pick another): the cell identity
holds the hardware fingerprint, so records of two machines are never pooled into one interval,
only put next to each other. Absolute step times appear only in float32's row, under each
machine's name: side by side, never divided by each other.

A column is a machine, headed by the name every report gives it (results/machine.py's
`Machine.label()`: `cuda: NVIDIA H200 [6579a41894f8]`, as compare's tables name it); its
`arithmetic` row says what low-precision arithmetic the device has, which is why a policy pays
there or not: the GPU's compute capability (`CC 9.0`), or the CPU's 16-bit flags
(`avx512_bf16`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import PolicyGroup, policy_rank, summarize_all
from mpbench.compare.summary.comparison import Comparison, short
from mpbench.compare.summary.estimate import Estimate
from mpbench.compare.summary.labels import Labeler, short_framework, varying_entries
from mpbench.policies import BASELINE
from mpbench.results import CellRecord
from mpbench.results.identity import GroupKey, Row
from mpbench.results.machine import Machine
from mpbench.results.store import StoredRun
from mpbench.results.variant import entry, group_marks, join


@dataclass(frozen=True)
class FleetColumn:
    """One column: a machine and the run its numbers come from."""

    machine: Machine
    run: StoredRun

    @property
    def fingerprint(self) -> str:
        return self.machine.fingerprint


@dataclass(frozen=True)
class FleetCell:
    """One policy on one machine."""

    speedup: Estimate | None
    memory_ratio: Estimate | None
    accuracy_delta_pp: Estimate | None
    step_time_s: Estimate | None  # float32's row only: the machine's own step time
    verdict: str | None  # compare's advice: "recommended here", "avoid", ...
    why: str | None  # the verdict's reason, or why the evidence is distrusted
    status: str | None = None  # a cell that did not finish: its status


@dataclass
class FleetRow:
    framework_label: str  # "torch", "torch [accumulate=2]"
    row: Row
    cells: dict[str, FleetCell] = field(default_factory=dict)  # machine fingerprint -> cell

    @property
    def name(self) -> str:
        return f"{self.framework_label} {short(self.row)}"


@dataclass
class FleetTable:
    workload: str
    machines: list[FleetColumn]
    rows: list[FleetRow]
    # machine fingerprint -> the config entries that differ between the machines' groups
    # (`batch_size=8192, units=4096`): each machine runs the workload at its own size
    configs: dict[str, str] = field(default_factory=dict)


def fleet_tables(
    records: list[CellRecord], runs: list[StoredRun], accuracy_margin_pp: float | None = None
) -> list[FleetTable]:
    """One table per workload, a column per machine (the records of each machine's newest run:
    results.sources' Selection with newest=True). A row is a
    framework, its recipe marks and a policy: each machine runs the workload at its own size
    (an accelerator's preset, a CPU's), which the table's config line says, so sizes do not
    split rows; two groups of one machine that would share a row keep compare's full names."""
    chosen = records
    run_of = {run.run_id: run for run in runs}
    margin = {} if accuracy_margin_pp is None else {"accuracy_margin_pp": accuracy_margin_pp}
    sections = build_sections(summarize_all(chosen), **margin)
    machines = _columns(chosen, run_of)
    labeler = Labeler(group.key for s in sections for group in s.groups)
    tables: dict[str, FleetTable] = {}
    rows: dict[tuple[str, str, Row], FleetRow] = {}
    for section in sections:
        table = tables.setdefault(section.workload, FleetTable(section.workload, [], []))
        column = machines[section.fingerprint]
        if column not in table.machines:
            table.machines.append(column)
        names = [_row_name(g.key) for g in section.groups]
        for group, name in zip(section.groups, names, strict=True):
            if names.count(name) > 1:  # two sizes on one machine: compare's names tell them apart
                name = labeler.group(group.key)
            for row in group.cells:
                key = (section.workload, name, row)
                if key not in rows:
                    rows[key] = FleetRow(name, row)
                    table.rows.append(rows[key])
                rows[key].cells[section.fingerprint] = _cell(group, row)
    for table in tables.values():
        table.machines.sort(key=_column_order)
        table.rows.sort(
            key=lambda r: (
                _FRAMEWORKS.get(r.framework_label.split()[0], 9),
                r.framework_label,
                policy_rank(r.row),
            )
        )
        table.configs = _configs([s for s in sections if s.workload == table.workload])
    return list(tables.values())


_FRAMEWORKS = {"torch": 0, "tf": 1}


def _row_name(key: GroupKey) -> str:
    """`torch`, `torch [accumulate=2]`, `tf ×2`: the framework and the group's recipe and
    layout marks, without the sizes that differ between machines."""
    return join(short_framework(key.framework), group_marks(key.config_dict())) or key.framework


def _configs(sections: list) -> dict[str, str]:
    """Per machine, the config entries that differ between the machines' groups."""
    configs = [dict(g.key.config) for s in sections for g in s.groups]
    varying = varying_entries(configs)
    out: dict[str, list[str]] = defaultdict(list)
    for section in sections:
        for group in section.groups:
            config = group.key.config_dict()
            text = ", ".join(entry(n, config[n]) for n in varying if config.get(n) is not None)
            if text and text not in out[section.fingerprint]:
                out[section.fingerprint].append(text)
    return {fingerprint: "; ".join(texts) for fingerprint, texts in out.items()}


def _columns(records: list[CellRecord], run_of: dict[str, StoredRun]) -> dict[str, FleetColumn]:
    """Machine (hardware fingerprint) -> its column: the machine of its first record, and the
    run of that record (each machine's records are one run's here)."""
    out: dict[str, FleetColumn] = {}
    for record in records:
        if record.hardware_fingerprint not in out:
            out[record.hardware_fingerprint] = FleetColumn(
                Machine.of(record), run_of[record.run_id]
            )
    return out


def _column_order(column: FleetColumn) -> tuple[bool, str, str, str]:
    """Accelerators before CPUs, then by device class and name, as the fleet always ordered."""
    machine = column.machine
    return (
        machine.device.startswith("cpu"),
        machine.device_class,
        machine.site or "",
        machine.fingerprint,
    )


def _cell(group: PolicyGroup, row: Row) -> FleetCell:
    cell = group.cells[row]
    comparison: Comparison | None = group.comparisons.get(row)
    if not cell.ok:
        verdict = comparison.verdict if comparison is not None else None
        return FleetCell(
            None, None, None, None, verdict.advice if verdict else None,
            cell.reason, status=cell.status,
        )  # fmt: skip
    if row == BASELINE or comparison is None:
        return FleetCell(None, None, None, cell.step_time_s, None, None)
    verdict = comparison.verdict
    return FleetCell(
        speedup=comparison.speedup,
        memory_ratio=comparison.memory_ratio,
        accuracy_delta_pp=comparison.accuracy_delta_pp,
        step_time_s=None,
        verdict=verdict.advice if verdict else None,
        why=comparison.distrust or (verdict.why if verdict else None),
    )
