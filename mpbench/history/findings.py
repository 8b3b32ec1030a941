"""What `mpbench history` finds in the runs it reads: the series in order, their change points,
and the newest run's verdicts. Reading is results/sources.py's (the rule compare reads by);
rendering is render.py's and plot.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpbench.history.ci import DEFAULT_THRESHOLD, NewestVerdict, newest_verdict
from mpbench.history.series import METRICS, Series, analyse, build_series
from mpbench.results import CellRecord
from mpbench.results.sources import Sources
from mpbench.results.store import StoredRun, StoreFilter

BY_COMMIT, BY_DATE, BY_DEVICE = "commit", "date", "device"


def select(
    sources: Sources, filters: StoreFilter | None, by: str = BY_COMMIT
) -> tuple[list[StoredRun], list[CellRecord]]:
    """Every run the filters keep (a history pools nothing: each run is a point), in commit
    order or by start, and their records."""
    selection = sources.select(filters, pool=True)
    runs = list(selection.runs)
    if by == BY_DATE:
        runs.sort(key=lambda r: (r.started_at or "", r.run_id))
    return runs, selection.records


@dataclass
class HistoryReport:
    sources: list[str]
    runs: list[StoredRun]  # the runs read, in the series' order
    series: list[Series]
    verdicts: list[NewestVerdict] = field(default_factory=list)  # one per series
    threshold: float = DEFAULT_THRESHOLD
    by: str = BY_COMMIT

    @property
    def failed(self) -> list[tuple[Series, NewestVerdict]]:
        return [(s, v) for s, v in zip(self.series, self.verdicts, strict=True) if v.failed]


def build_history(
    sources: Sources,
    filters: StoreFilter | None,
    policies: tuple[str, ...] = (),
    metrics: tuple[str, ...] = METRICS,
    by: str = BY_COMMIT,
    threshold: float = DEFAULT_THRESHOLD,
    penalty: float | None = None,
) -> HistoryReport:
    """The series the filters select, analysed. `policies` picks series, not records: a
    speed-up needs float32's records whichever policies are shown."""
    runs, records = select(sources, filters, by)
    series = [
        s
        for s in build_series(records, runs)
        if s.metric in metrics and (not policies or s.row.policy in policies)
    ]
    analyse(series, penalty)
    verdicts = [newest_verdict(s, threshold) for s in series]
    used = {p.run.run_id for s in series for p in s.points}
    shown = [run for run in runs if run.run_id in used]
    return HistoryReport(sources.names, shown, series, verdicts, threshold, by)
