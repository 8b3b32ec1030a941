"""A cell's measurements over runs: one point per run, in commit (or date) order.

Two kinds of series, taken per run from `mpbench compare`'s own summary (compare/summary) and
by its rule for combining repeats (docs/compare.md, "Combining repeats": one slow process must
not move the answer):
- the step time of each cell: the median of that run's repeats' median step times, with the
  hull of the t-interval on their logs and the order-statistic interval
  (results.stats.robust_log_interval); a run of one repeat: its median, with the
  block-bootstrap interval of its steps, *within-run only*, as compare shows it. (compare's
  step-time column is the geometric mean; a history takes the median, because one repeat
  slowed by a neighbour would otherwise move a point, and a point that moves is a false step);
- each policy's speed-up over float32 of the same run and group: compare's own estimate, the
  median of the per-repeat ratios (float32 repeat r against the policy's repeat r, which ran
  interleaved), with the same hull interval.

A series is one cell identity (results.identity: machine fingerprint, device, framework,
workload, effective config, policy and variant), exactly as compare pairs repeats: runs of two
machines are two series, never one, and a config that changed is a new series. A point whose
evidence compare distrusts (a repeat ran on a busy machine, a figure beyond what the device
can do) is shown but left out of change-point detection, as compare never gates on it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import CellSummary, display_order, summarize_all
from mpbench.compare.summary.comparison import short
from mpbench.compare.summary.estimate import REPEATS, Estimate
from mpbench.compare.summary.labels import Labeler
from mpbench.history.changepoints import ChangePoint, Detection, detect
from mpbench.policies import BASELINE
from mpbench.results import CellRecord
from mpbench.results.identity import CellKey, GroupKey, Row
from mpbench.results.stats import robust_log_interval
from mpbench.results.store import StoredRun

STEP_TIME = "step time"
SPEEDUP = "speed-up"
METRICS = (STEP_TIME, SPEEDUP)


@dataclass(frozen=True)
class Point:
    run: StoredRun
    estimate: Estimate  # value with its 95 % interval (compare's Estimate)
    distrust: str | None = None  # why compare distrusts it; then it is not used for detection


@dataclass
class Series:
    metric: str  # STEP_TIME (seconds) or SPEEDUP (× over float32)
    key: CellKey
    points: list[Point] = field(default_factory=list)
    label: str = ""  # `torch bf16`, `torch [accumulate=2] fp32`: compare's row name
    detection: Detection | None = None  # over the trusted points (analyse)
    trusted: list[int] = field(default_factory=list)  # indices of the points detection used

    @property
    def group(self) -> GroupKey:
        return self.key.group

    @property
    def row(self) -> Row:
        return self.key.row

    @property
    def worse(self) -> int:
        """+1 where a higher value is a regression (step time), -1 where lower is (speed-up)."""
        return 1 if self.metric == STEP_TIME else -1

    def changes(self) -> list[tuple[ChangePoint, Point, Point]]:
        """Each change point with the last point before it and the first of the new level."""
        if self.detection is None:
            return []
        trusted = [self.points[i] for i in self.trusted]
        return [(c, trusted[c.index - 1], trusted[c.index]) for c in self.detection.changes]

    def trusted_point(self, index: int) -> Point:
        """The point at an index of the detection's (trusted) points."""
        return self.points[self.trusted[index]]


def build_series(records: Iterable[CellRecord], runs: list[StoredRun]) -> list[Series]:
    """Every series of these records, each point a run of `runs` (in their order)."""
    by_run: dict[str, list[CellRecord]] = defaultdict(list)
    for record in records:
        by_run[record.run_id].append(record)
    found: dict[tuple[str, CellKey], Series] = {}
    for run in runs:
        if run.run_id not in by_run:
            continue
        for section in build_sections(summarize_all(by_run[run.run_id])):
            for group in section.groups:
                for row, cell in group.cells.items():
                    key = CellKey(group.key, row)
                    if cell.ok and cell.step_time_s is not None:
                        why = cell.busy_text() or "; ".join(cell.implausible) or None
                        _add(found, STEP_TIME, key, Point(run, _step_time(cell), why))
                    comparison = group.comparisons.get(row)
                    if row != BASELINE and comparison is not None and comparison.speedup:
                        point = Point(run, comparison.speedup, comparison.distrust)
                        _add(found, SPEEDUP, key, point)
    labeler = Labeler(key.group for _, key in found)
    out = sorted(found.values(), key=lambda s: (display_order(s.key), METRICS.index(s.metric)))
    for series in out:
        series.label = f"{labeler.group(series.group)} {short(series.row)}"
    return out


def _step_time(cell: CellSummary) -> Estimate:
    """The median over the repeats with the robust interval; one repeat: compare's."""
    medians = [
        r.step_time.median_s for r in cell.ok_records if r.step_time and r.step_time.median_s
    ]
    if len(medians) < 2 or any(m <= 0 for m in medians):
        return cell.step_time_s
    value, low, high = robust_log_interval([math.log(m) for m in medians])
    return Estimate(value, low, high, REPEATS, len(medians))


def _add(found: dict, metric: str, key: CellKey, point: Point) -> None:
    series = found.get((metric, key))
    if series is None:
        series = found[(metric, key)] = Series(metric, key)
    series.points.append(point)


def analyse(series: list[Series], penalty: float | None = None) -> None:
    """Detect the change points of every series over its trusted points."""
    for one in series:
        one.trusted = [i for i, p in enumerate(one.points) if p.distrust is None]
        values = [one.points[i].estimate.value for i in one.trusted]
        if not values or any(v <= 0 for v in values):
            one.detection = None
            continue
        one.detection = detect(values) if penalty is None else detect(values, penalty)
