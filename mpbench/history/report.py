"""What `mpbench history` reads and finds: its sources, the runs in order, the series with
their change points, and the newest run's verdicts. Rendering is render.py's and plot.py's.

Sources are stores (`mpbench store add`) and run directories, in any mix: run directories are
read as a store for this one command (their commits from environment.json, the commits'
times from git in --repo), so that both are filtered and ordered by one rule
(results.store.StoreFilter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mpbench.errors import InvalidInput
from mpbench.history import DEFAULT_STORE
from mpbench.history.ci import DEFAULT_THRESHOLD, NewestVerdict, newest_verdict
from mpbench.history.gitinfo import attach_commits
from mpbench.history.series import METRICS, Series, analyse, build_series
from mpbench.results import CellRecord
from mpbench.results.store import Store, StoredRun, StoreFilter, is_store, read_run_dir

BY_COMMIT, BY_DATE, BY_DEVICE = "commit", "date", "device"
ORDERS = (BY_COMMIT, BY_DATE, BY_DEVICE)


@dataclass
class Sources:
    """Every run and record the sources hold (no filter applied yet)."""

    names: list[str]
    runs: list[StoredRun]
    records: list[CellRecord]

    def select(
        self, filters: StoreFilter, by: str = BY_COMMIT
    ) -> tuple[list[StoredRun], list[CellRecord]]:
        """The runs the filters keep (in commit order, or by date), and their records."""
        runs = filters.runs(self.runs)
        if by == BY_DATE:
            runs.sort(key=lambda r: (r.started_at or "", r.run_id))
        kept = {run.run_id for run in runs}
        records = [r for r in self.records if r.run_id in kept and filters.keeps(r)]
        return runs, records


def read_sources(paths: list[Path], repo: Path | None = None) -> Sources:
    """Stores and run directories, merged; a run found twice with different contents is an
    error naming both places."""
    if not paths:
        if not DEFAULT_STORE.is_file():
            raise InvalidInput(
                f"no results to read: pass a store or run directories ({DEFAULT_STORE} does "
                "not exist; make it with 'mpbench store add RUN_DIR...')"
            )
        paths = [DEFAULT_STORE]
    runs: dict[str, tuple[str, StoredRun]] = {}
    records: list[CellRecord] = []
    directories = [p for p in paths if not is_store(p)]
    stores = [p for p in paths if is_store(p)]
    parts: list[tuple[str, Store]] = [(str(p), Store.read(p)) for p in stores]
    if directories:
        memory = Store.memory()
        for directory in directories:
            for run in read_run_dir(directory):
                attach_commits([run], repo=repo)
                memory.add(run)
        parts.append((", ".join(str(d) for d in directories), memory))
    for name, store in parts:
        with store:
            kept = set()
            for run in store.runs():
                first = runs.get(run.run_id)
                if first is None:
                    runs[run.run_id] = (name, run)
                    kept.add(run.run_id)
                elif first[1].content_sha256 != run.content_sha256:
                    raise InvalidInput(
                        f"run {run.run_id} is in {first[0]} and in {name} with different "
                        "contents; pass one of them"
                    )
            records += [r for r in store.records() if r.run_id in kept]
    return Sources([str(p) for p in paths], [run for _, run in runs.values()], records)


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
    filters: StoreFilter,
    policies: tuple[str, ...] = (),
    metrics: tuple[str, ...] = METRICS,
    by: str = BY_COMMIT,
    threshold: float = DEFAULT_THRESHOLD,
    penalty: float | None = None,
) -> HistoryReport:
    """The series the filters select, analysed. `policies` picks series, not records: a
    speed-up needs float32's records whichever policies are shown."""
    runs, records = sources.select(filters, by)
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
