"""The comparison as data: tables, baseline matches, gate results and notes.

Renderers read a `Report` and nothing else; no formatting decisions are made here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mpbench.compare.gates import (
    ADD_REPEATS,
    REMEASURE,
    BaselineMatch,
    GateResult,
    check_baseline,
    check_ratios,
)
from mpbench.compare.options import CompareOptions
from mpbench.compare.summary.accuracy import DEFAULT_MARGIN_PP
from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import (
    CellKey,
    CellSummary,
    PolicyGroup,
    Section,
    display_order,
    summarize_all,
)
from mpbench.compare.summary.labels import Labeler
from mpbench.errors import InvalidInput
from mpbench.policies import BASELINE
from mpbench.results import CellRecord
from mpbench.results.identity import RecordKey
from mpbench.results.machine import Machine
from mpbench.results.matmul_share import low_precision_note

if TYPE_CHECKING:
    from mpbench.results.sidefile import SideFile

MIN_GATE_REPEATS = 3


@dataclass
class Report:
    runs: list[str]  # run ids of the compared records, in order of appearance
    sections: list[Section]
    labeler: Labeler
    options: CompareOptions
    baseline_runs: list[str] = field(default_factory=list)
    matches: list[BaselineMatch] = field(default_factory=list)
    results: list[GateResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # run_id -> the directories its records were read from: where their side files are.
    run_dirs: dict[str, list[Path]] = field(default_factory=dict)
    # record_key -> its telemetry side file; None until read (side_files()).
    loaded_side_files: dict[RecordKey, SideFile] | None = None
    # run_id -> run.json's `adaptive` entry of a `mpbench run --repeat auto` (compare.run).
    adaptive_repeats: dict[str, dict] = field(default_factory=dict)
    # The points of accuracy a policy may lose and still be "no worse" (summary/accuracy.py).
    accuracy_margin_pp: float = DEFAULT_MARGIN_PP

    def side_files(self) -> dict[RecordKey, SideFile]:
        """The readable side files of the compared records, read once; one that cannot be
        used adds a note (telemetry.load_side_files) instead of stopping the comparison."""
        if self.loaded_side_files is None:
            from mpbench.compare.summary.side_files import load_side_files

            records = [
                (CellKey(g.key, policy), r)
                for g, policy, cell in self.policy_cells()
                for r in cell.records
            ]
            self.loaded_side_files, notes = load_side_files(
                records, self.run_dirs, self.labeler.cell
            )
            self.notes += notes
        return self.loaded_side_files

    def policy_cells(self) -> list[tuple[PolicyGroup, str, CellSummary]]:
        """Every cell of every section, with its group and policy row, in table order."""
        return [
            (group, policy, cell)
            for section in self.sections
            for group in section.groups
            for policy, cell in group.cells.items()
        ]

    @property
    def failures(self) -> list[GateResult]:
        return [r for r in self.results if not r.passed]

    @property
    def inconclusive(self) -> list[GateResult]:
        return [r for r in self.results if r.inconclusive]

    @property
    def exit_code(self) -> int:
        return 1 if self.failures else 0

    @property
    def verdict(self) -> str:
        if not self.results:
            return "no gates checked"
        failed = len(self.failures)
        if failed:
            text = f"FAIL: {failed} of {len(self.results)} gate checks failed"
        else:
            text = f"PASS: all {len(self.results)} gate checks passed"
        unsure = [r for r in self.inconclusive if r.passed]
        busy = [r for r in unsure if r.remeasure]
        if len(unsure) > len(busy):
            text += f" ({len(unsure) - len(busy)} {ADD_REPEATS})"
        if busy:
            text += f" ({len(busy)} {REMEASURE})"
        return text


def _run_ids(records: list[CellRecord]) -> list[str]:
    return list(dict.fromkeys(r.run_id for r in records))


def build_report(
    records: list[CellRecord],
    options: CompareOptions,
    baseline: list[CellRecord] | None = None,
    run_dirs: dict[str, list[Path]] | None = None,
) -> Report:
    """`run_dirs`: run_id -> the directories its records came from (Sources.directories),
    where --plot finds the records' telemetry side files; without it, none are read."""
    cells = summarize_all(records)
    margin = options.accuracy_margin_pp
    margin = DEFAULT_MARGIN_PP if margin is None else margin
    sections = build_sections(cells, margin)  # every comparison to float32, taken once
    labeler = Labeler(k.group for k in cells)
    report = Report(_run_ids(records), sections, labeler, options, run_dirs=dict(run_dirs or {}))
    report.accuracy_margin_pp = margin
    if baseline is not None:
        report.baseline_runs = _run_ids(baseline)
        report.matches = _match(cells, summarize_all(baseline), options, labeler, report.notes)
        results, notes = check_baseline(report.matches, options)
        report.results += results
        report.notes += notes
    if options.has_ratio_gates:
        results, notes = check_ratios(sections, options, labeler)
        report.results += results
        report.notes += notes
    report.notes += _pairing_notes(sections, labeler)
    report.notes += _precision_notes(cells, labeler)
    report.notes += _repeat_notes(report.results)
    if options.plot is not None:
        report.side_files()  # before anything is rendered: its notes belong in every format
    return report


def _pairing_notes(sections: list[Section], labeler: Labeler) -> list[str]:
    """Repeats left out of the ratios to float32 because the other policy has no partner."""
    notes = []
    for group in (g for s in sections for g in s.groups):
        for policy in group.cells:
            if policy == BASELINE:
                continue
            lone_ref, lone = group.unpaired(policy)
            if not lone_ref and not lone:
                continue
            missing = [f"{policy} {_repeat(k)}" for k in lone]
            missing += [f"{BASELINE} {_repeat(k)}" for k in lone_ref]
            notes.append(
                f"{labeler.cell(CellKey(group.key, policy))}: left out of the ratios to float32 "
                f"(no partner of the same run and repeat): {', '.join(missing)}"
            )
    return notes


def _precision_notes(cells: dict[CellKey, CellSummary], labeler: Labeler) -> list[str]:
    """A 16-bit cell whose matmuls ran largely in float32 (results/matmul_share.py), once
    per cell, in the words the run warned with."""
    notes = []
    for key, cell in cells.items():
        label = labeler.cell(key)
        said = (low_precision_note(label, r.precision) for r in cell.ok_records)
        note = next((text for text in said if text), None)
        if note:
            notes.append(note)
    return notes


def _repeat(key: tuple[str, int]) -> str:
    run_id, repeat = key
    return f"r{repeat} of {run_id}"


def _repeat_notes(results: list[GateResult]) -> list[str]:
    """Gates on fewer than 3 repeats rest on little evidence: say so, and what to do."""
    counts = [r.estimate.n for r in results if r.estimate is not None]
    if not counts or min(counts) >= MIN_GATE_REPEATS:
        return []
    fewest = min(counts)
    return [
        f"gates here rest on as few as {fewest} repeat{'s' if fewest > 1 else ''} per cell: "
        "intervals from one "
        "repeat are within-run only (optimistic), and t-intervals from 2 are very wide; gates "
        f"need `mpbench run --repeat {MIN_GATE_REPEATS}` or more to be meaningful"
    ]


def _machines(cells: dict[CellKey, CellSummary]) -> dict[str, Machine]:
    return {k.group.fingerprint: k.group.machine() for k in cells}


def _describe(machines: dict[str, Machine]) -> str:
    return ", ".join(machine.label() for machine in machines.values())


def _match(
    cells: dict[CellKey, CellSummary],
    base_cells: dict[CellKey, CellSummary],
    options: CompareOptions,
    labeler: Labeler,
    notes: list[str],
) -> list[BaselineMatch]:
    here, there = _machines(cells), _machines(base_cells)
    same_hardware = set(here) <= set(there)
    if not same_hardware:
        if not options.allow_different_hardware:
            raise InvalidInput(
                f"the baseline was measured on different hardware (baseline: {_describe(there)}; "
                f"this run: {_describe(here)}); absolute times from different machines are not "
                "comparable: use --min-speedup/--max-accuracy-delta, or pass "
                "--allow-different-hardware"
            )
        notes.append(
            f"different hardware, compared anyway (--allow-different-hardware): baseline "
            f"{_describe(there)}; this run {_describe(here)}"
        )

    def identity(key: CellKey) -> CellKey:
        return key if same_hardware else key.machine_free()

    by_identity = {identity(k): cell for k, cell in base_cells.items()}
    matches = []
    for key in sorted(cells, key=display_order):
        cell = cells[key]
        base = by_identity.pop(identity(key), None)
        if base is None:
            notes.append(f"{labeler.cell(key)}: not in the baseline (new cell, not gated)")
            continue
        matches.append(BaselineMatch(key, labeler.cell(key), cell, base))
    for key in sorted(by_identity, key=display_order):
        notes.append(
            f"{Labeler([key.group]).cell(key)}: in the baseline but not in this run "
            f"(config {_config(key)})"
        )
    if not matches:
        raise InvalidInput(
            "nothing comparable: no cell of this run matches a baseline cell by framework, "
            "workload, policy and config"
        )
    return matches


def _config(key: CellKey) -> str:
    return ", ".join(f"{name}={value}" for name, value in key.group.config)
