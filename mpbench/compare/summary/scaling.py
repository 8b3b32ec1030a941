"""The scaling rows of data-parallel cells (docs/distributed.md, docs/compare.md "Scaling").

Each world size is a group of its own (ratios to float32 are taken at one world size); this
module relates the groups *across* world sizes: a row per framework × policy × config × world
size, with the world-size-1 row of the same framework, policy and config as its reference.
Weak-scaling efficiency is `mpbench.results.scaling.weak_scaling_efficiency`, the formula
`run` writes into the record, computed here from the repeats' global throughputs:

- repeats of the same run pair up (world N repeat i with world 1 repeat i, as the ratios to
  float32 do); two or more pairs: the geometric mean of the per-pair efficiencies with a
  t-interval on their logs;
- one pair: the efficiency of that pair, with the block-bootstrap interval of the two cells'
  median step times (the efficiency is their ratio times a constant), *within-run only*.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpbench.compare.summary.cells import (
    CellKey,
    CellSummary,
    GroupKey,
    Layout,
    PolicyGroup,
    RepeatKey,
    Section,
    policy_rank,
)
from mpbench.compare.summary.estimate import Estimate, of_repeats, step_ratio
from mpbench.results import CellRecord
from mpbench.results.scaling import weak_scaling_efficiency
from mpbench.results.step_stats import median_of_present

# devices (DistributedStats.devices) that do not measure scaling, and what to say about them.
NOT_SCALING = {
    "shared": "ranks share one CPU: these figures measure plumbing, not scaling",
    "logical": (
        "ranks share one CPU (TensorFlow logical devices): these figures measure plumbing, "
        "not scaling"
    ),
}


EFFICIENCY_LIMIT = 1.10  # weak scaling above this is a measurement error, not a result


@dataclass
class ScalingRow:
    """One framework × policy × config at one world size, and its world-size-1 reference."""

    group: PolicyGroup
    row: str  # the policy row (cells.py `_row`)
    cell: CellSummary
    layout: Layout
    reference: CellSummary | None = None  # the same row at world size 1, when the records hold it
    reference_key: CellKey | None = None
    efficiency: Estimate | None = None  # computed here (module docstring)
    unpaired: list[RepeatKey] = field(default_factory=list)  # repeats left out: no partner
    devices: str | None = None  # "real", "shared", "logical"; joined when repeats differ
    launcher: str | None = None
    backend: str | None = None
    allreduce_s: float | None = None  # per step, median over the finished repeats
    allreduce_overlap_s: float | None = None
    allreduce_share: float | None = None
    straggler_ratio: float | None = None
    unavailable: dict[str, str] = field(default_factory=dict)  # field -> why it is missing

    @property
    def key(self) -> CellKey:
        return CellKey(self.group.key, self.row)

    def distrust(self) -> str | None:
        """Why this row's efficiency cannot be trusted: a busy machine in either cell, or an
        efficiency no set of replicas can reach (N replicas do at most N times the work of
        one, plus what a smaller per-replica share of memory can save)."""
        reasons = []
        for name, cell in (("world size 1", self.reference), (f"×{self.world_size}", self.cell)):
            busy = cell.busy_text() if cell is not None else None
            if busy:
                reasons.append(f"{name}: {busy}")
        if self.efficiency is not None and self.efficiency.value > EFFICIENCY_LIMIT:
            reasons.append(
                f"efficiency {self.efficiency.value:.0%} is above {EFFICIENCY_LIMIT:.0%}: "
                "no data-parallel job scales better than linearly by that much"
            )
        return "; ".join(reasons) if reasons else None

    def busy_share(self) -> float | None:
        """As Comparison.busy_share: the largest share of CPU time others took from either
        cell, where a busy machine is the only doubt; None when quiet or implausible."""
        if self.efficiency is not None and self.efficiency.value > EFFICIENCY_LIMIT:
            return None
        cells = [c for c in (self.reference, self.cell) if c is not None and c.contended]
        return max(c.taken_share for c in cells) if cells else None

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def throughput(self) -> float | None:
        """Global samples/s (every replica), the geometric mean over the repeats."""
        return self.cell.throughput

    @property
    def per_device(self) -> float | None:
        return self.throughput / self.world_size if self.throughput else None

    @property
    def note(self) -> str | None:
        """Why these figures do not measure scaling (shared or logical devices), if so."""
        kinds = (self.devices or "").split("; ")
        return next((NOT_SCALING[k] for k in kinds if k in NOT_SCALING), None)


def _throughputs(cell: CellSummary) -> dict[RepeatKey, CellRecord]:
    return {
        (r.run_id, r.repeat): r
        for r in cell.ok_records
        if r.throughput_samples_per_s and r.step_time is not None and r.step_time.median_s
    }


def efficiency(
    cell: CellSummary, reference: CellSummary | None, world_size: int
) -> tuple[Estimate | None, list[RepeatKey]]:
    """(weak-scaling efficiency of `cell` against `reference`, the repeats of `cell` left out
    for want of a partner of the same run and repeat). None without a finished pair."""
    if reference is None or world_size < 1:
        return None, []
    ours, theirs = _throughputs(cell), _throughputs(reference)
    keys = sorted(ours.keys() & theirs.keys())
    lone = sorted(ours.keys() - theirs.keys())
    values = [
        weak_scaling_efficiency(
            ours[k].throughput_samples_per_s, theirs[k].throughput_samples_per_s, world_size
        )
        for k in keys
    ]
    if not keys or any(v is None for v in values):
        return None, lone
    if len(values) > 1:
        return of_repeats(values), lone
    (key,) = keys
    (point,) = values
    # One pair: the efficiency is thr_N / (N thr_1) = (m_1 / m_N) x (samples_N / (N samples_1)),
    # so the relative interval of the median step-time ratio m_1 / m_N is the efficiency's.
    times = step_ratio([(theirs[key].step_time, ours[key].step_time)])
    if not times.has_interval or not times.value:
        return Estimate.point(point, times.no_interval), lone
    scale = point / times.value
    return Estimate(point, times.low * scale, times.high * scale, times.kind, 1), lone


def _fill_distributed(row: ScalingRow) -> None:
    """The record's data-parallel figures, medians over the repeats that have them."""
    stats = [r.distributed for r in row.cell.ok_records if r.distributed is not None]
    every = [r.distributed for r in row.cell.records if r.distributed is not None]
    row.devices = "; ".join(dict.fromkeys(s.devices for s in every)) or None
    row.launcher = "; ".join(dict.fromkeys(s.launcher for s in every)) or None
    row.backend = "; ".join(dict.fromkeys(s.backend for s in every)) or None
    row.allreduce_s = median_of_present(s.allreduce_s_per_step for s in stats)
    row.allreduce_overlap_s = median_of_present(s.allreduce_overlap_s_per_step for s in stats)
    row.allreduce_share = median_of_present(s.allreduce_share for s in stats)
    row.straggler_ratio = median_of_present(s.straggler_ratio for s in stats)
    for s in stats:
        for name, reason in s.unavailable.items():
            row.unavailable.setdefault(name, reason)


def scaling_rows(section: Section) -> list[ScalingRow]:
    """Every row of the section's scaling table; empty when it holds no data-parallel cell.

    The configs that ran data-parallel bring every world size they ran at (world size 1
    included, as the reference row); configs that never did are not in the table."""
    parallel = [g for g in section.groups if g.key.layout().parallel]
    if not parallel:
        return []
    identities = list(dict.fromkeys(g.key.single() for g in parallel))
    by_key: dict[GroupKey, PolicyGroup] = {g.key: g for g in section.groups}
    frameworks = list(dict.fromkeys(g.key.framework for g in section.groups))
    rows: list[ScalingRow] = []
    for group in section.groups:
        single = group.key.single()
        if single not in identities:
            continue
        reference_group = by_key.get(single)
        for row, cell in group.cells.items():
            layout = group.key.layout()
            scaling = ScalingRow(group, row, cell, layout)
            if layout.parallel and reference_group is not None and row in reference_group.cells:
                scaling.reference = reference_group.cells[row]
                scaling.reference_key = CellKey(single, row)
                scaling.efficiency, scaling.unpaired = efficiency(
                    cell, scaling.reference, layout.world_size
                )
            _fill_distributed(scaling)
            rows.append(scaling)
    rows.sort(
        key=lambda r: (
            frameworks.index(r.group.key.framework),
            identities.index(r.group.key.single()),
            policy_rank(r.row),
            r.layout.order(),
        )
    )
    return rows


def all_scaling_rows(sections: list[Section]) -> list[ScalingRow]:
    """Every section's scaling rows, as summary/build.py took them."""
    return [row for section in sections for row in section.scaling]
