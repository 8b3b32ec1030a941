"""Where `mpbench compare` and `mpbench history` read results: stores and run directories,
in any mix, under one rule.

- A run directory (or a results.jsonl) is read by the validated reader (results.io), a store
  (`mpbench store add`) by results/store.py: a store holds only what that reader accepted.
- A record is its record_key (run id, cell id, repeat). Found in two sources, it must be the
  same record (results/identity.py's one duplicate rule): a different copy is refused in one
  line; identical copies are read once (a run passed as its directory and from a store).
- A run's row (StoredRun: its commit, its start, its environment.json and run.json) comes
  from the first source that holds it. A run directory's commit is what its environment.json
  recorded; git is asked for the commit's time only where the caller says so (history orders
  by it; compare never depends on the directory it is run in).
- Which runs count is `Sources.select`: the filters' runs, and unless `pool` (or a filter that
  picks runs: --commits, --since, --until) each machine's newest run only where its runs
  measured several commits or come from a store: a store's runs are a history, not repeats of
  one experiment, and pooling them would hide a regression inside one tight interval.
- A baseline never holds the runs it is compared with (`read_baseline`): a run found in the
  baseline's source (a store it was added to as it finished, a directory, a results file) is
  left out of it before its newest run is chosen, and the report says so; a baseline with
  nothing else is one line. Gating a run against itself passes whatever it measured.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from mpbench.errors import InvalidInput
from mpbench.results.commits import attach_commits
from mpbench.results.identity import RecordKey, record_key, same_record_or_reason
from mpbench.results.io import read_environment, read_run_files
from mpbench.results.machine import Machine, device_name
from mpbench.results.run_json import read_run_json
from mpbench.results.schema import CellRecord
from mpbench.results.store import (
    RunSource,
    Store,
    StoredRun,
    StoreFilter,
    damaged_store,
    is_store,
)


@dataclass
class SourceChoice:
    """Which records a command reads: the source options compare and history share
    (mpbench/result_options.py's SOURCE_OPTIONS), a field each. Empty: every one."""

    devices: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()  # canonical names
    commits: str | None = None  # these three pick runs: A..B, and times (ISO 8601)
    since: str | None = None
    until: str | None = None

    def record_filter(self, by_policy: bool = True) -> StoreFilter | None:
        """The filters as the readers take them, checked (a bad date or range is one line
        before anything is read); None where none was given. `by_policy=False`: the
        policies pick what is shown, not what is read (a speed-up needs float32's records)."""
        found = StoreFilter(
            devices=self.devices,
            frameworks=self.frameworks,
            workloads=self.workloads,
            policies=self.policies if by_policy else (),
            commits=self.commits,
            since=self.since,
            until=self.until,
        )
        return found.check() if found != StoreFilter() else None


@dataclass
class Sources:
    """Every run and record the paths hold, no filter applied yet."""

    paths: list[Path]
    runs: list[StoredRun]  # in history's order (commit time, else start)
    records: list[CellRecord]  # in the order read: each path's records in its own order
    from_store: set[str] = field(default_factory=set)  # ids of the runs read from a store
    # run id -> the run directories its records were read from (where its side files are)
    directories: dict[str, list[Path]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [str(p) for p in self.paths]

    def select(
        self, filters: StoreFilter | None = None, pool: bool = False, newest: bool = False
    ) -> Selection:
        """The runs and records a comparison reads: the filters' runs, and of each machine
        either all of them (`pool`, or a filter that picks runs) or, where they are a history
        (several commits, or a store's), its newest run only. `newest`: each machine's newest
        run whatever its runs are (the fleet)."""
        filters = filters or StoreFilter()
        filters.check_devices({r.hardware_fingerprint: device_name(r) for r in self.records})
        chosen = filters.runs(self.runs)
        ids = {run.run_id for run in chosen}
        records = [r for r in self.records if r.run_id in ids and filters.keeps(r)]
        by_machine = _machine_runs(chosen, records)
        left_out: dict[str, list[StoredRun]] = {}
        picked = filters.selects_runs
        for fingerprint, runs in by_machine.items():
            history = not pool and not picked and self._a_history(runs)
            if len(runs) > 1 and (newest or history):
                left_out[fingerprint] = runs[:-1]
        dropped = {(f, r.run_id) for f, runs in left_out.items() for r in runs}
        records = [r for r in records if (r.hardware_fingerprint, r.run_id) not in dropped]
        used = {r.run_id for r in records}
        machines = {
            fingerprint: MachineRuns(
                Machine.of(next(r for r in records if r.hardware_fingerprint == fingerprint)),
                [run for run in runs if (fingerprint, run.run_id) not in dropped],
                left_out.get(fingerprint, []),
            )
            for fingerprint, runs in by_machine.items()
            if any(r.hardware_fingerprint == fingerprint for r in records)
        }
        return Selection(
            [run for run in chosen if run.run_id in used],
            records,
            machines,
            {run_id: dirs for run_id, dirs in self.directories.items() if run_id in used},
        )

    def without(self, run_ids: set[str]) -> tuple[Sources, list[str]]:
        """These sources less the runs `run_ids` names, and which of those they held (in
        history's order)."""
        held = {run.run_id for run in self.runs} | {r.run_id for r in self.records}
        held &= run_ids
        ordered = [run.run_id for run in self.runs if run.run_id in held]
        ordered += sorted(held - set(ordered))
        if not held:
            return self, []
        kept = Sources(
            self.paths,
            [run for run in self.runs if run.run_id not in held],
            [r for r in self.records if r.run_id not in held],
            self.from_store - held,
            {k: v for k, v in self.directories.items() if k not in held},
        )
        return kept, ordered

    def _a_history(self, runs: list[StoredRun]) -> bool:
        """Runs of one machine that are not repeats of one experiment: a store's, or of
        several known commits."""
        commits = {run.git_commit for run in runs if run.git_commit}
        return len(commits) > 1 or any(run.run_id in self.from_store for run in runs)


@dataclass
class MachineRuns:
    """A machine's runs in a selection: those read and the older ones left out."""

    machine: Machine
    runs: list[StoredRun]  # the runs read, in history's order
    left_out: list[StoredRun]  # older runs not read (a history), in history's order


@dataclass
class Selection:
    """What a comparison reads: its runs (history's order), their records (read order), and
    per machine (hardware fingerprint) the runs read and those left out."""

    runs: list[StoredRun]
    records: list[CellRecord]
    machines: dict[str, MachineRuns]  # by hardware fingerprint
    directories: dict[str, list[Path]] = field(default_factory=dict)  # as Sources'

    @property
    def run_jsons(self) -> list[dict]:
        """Each run's run.json ({} where it has none)."""
        return [run.run_json or {} for run in self.runs]

    @property
    def pooled_commits(self) -> dict[str, list[str]]:
        """Machines whose runs of several commits are pooled: fingerprint -> their commits."""
        out = {}
        for fingerprint, held in self.machines.items():
            commits = list(dict.fromkeys(r.short_commit for r in held.runs if r.short_commit))
            if len(commits) > 1:
                out[fingerprint] = commits
        return out


@dataclass
class Baseline:
    """What `compare --baseline` gates against: its selection, and the runs compared that its
    source held and that were left out of it (the note says which)."""

    selection: Selection
    left_out: list[str]
    note: str | None


def read_baseline(path: Path, compared: Selection) -> Baseline:
    """The baseline at `path` (a store, a run directory or a results file) less the runs
    `compared` reads: a run is never its own baseline. Its runs are then chosen as any
    comparison's are (`Sources.select`: a store's newest run per machine), so a store that
    already holds the run compared gates it against the run before it. Nothing left is one
    line (InvalidInput)."""
    path = Path(path)
    own = {record.run_id for record in compared.records}
    sources, held = read_sources([path]).without(own)
    if not held:
        return Baseline(sources.select(), [], None)
    kind = "store" if is_store(path) else "run directory" if path.is_dir() else "results file"
    runs = ", ".join(held)
    which = "the run compared" if len(held) == 1 else "the runs compared"
    if not sources.records:
        raise InvalidInput(
            f"--baseline {path} holds only {runs}, {which}: nothing to compare against"
        )
    note = f"the baseline {kind} holds {runs}, {which}: left out of the baseline"
    return Baseline(sources.select(), held, note)


def _machine_runs(runs: list[StoredRun], records: list[CellRecord]) -> dict[str, list[StoredRun]]:
    """Machine (hardware fingerprint) -> its runs that hold records, in history's order."""
    holds: dict[str, set[str]] = defaultdict(set)
    for record in records:
        holds[record.hardware_fingerprint].add(record.run_id)
    return {
        fingerprint: [run for run in runs if run.run_id in ids]
        for fingerprint, ids in holds.items()
    }


def read_sources(paths: list[Path], repo: Path | None = None, ask_git: bool = False) -> Sources:
    """Stores and run directories (or results files), merged under the module's rule.
    `ask_git`: look up in `repo` (default: here) the time of a commit a run directory
    recorded without one."""
    paths = [Path(p) for p in paths]
    # A store whose header was overwritten is still a store: Store.read says it is damaged,
    # where the results-file reader would quote its line 1 as not JSON.
    stores = [p for p in paths if is_store(p) or damaged_store(p)]
    files = [p for p in paths if p not in stores]
    found: dict[RecordKey, CellRecord] = {}
    where: dict[RecordKey, str] = {}
    runs: dict[str, StoredRun] = {}
    order: list[tuple[int, CellRecord]] = []
    directories: dict[str, list[Path]] = defaultdict(list)

    def take(position: int, record: CellRecord, source: str) -> None:
        key = record_key(record)
        first = found.get(key)
        if first is None:
            found[key], where[key] = record, source
            order.append((position, record))
        elif reason := same_record_or_reason(first, record, (where[key], source)):
            raise InvalidInput(reason)

    if files:
        read = read_run_files(files)
        for run in _directory_runs(read, repo, ask_git):
            runs.setdefault(run.run_id, run)
        for file, record in read:
            take(_position(paths, file), record, str(file.parent))
            if file.parent not in directories[record.run_id]:
                directories[record.run_id].append(file.parent)
    from_store: set[str] = set()
    for store in stores:
        with Store.read(store) as db:
            for run in db.runs():
                if run.run_id not in runs:
                    runs[run.run_id] = run
                    from_store.add(run.run_id)
            for record in db.records():
                take(paths.index(store), record, str(store))
    order.sort(key=lambda pair: pair[0])  # stable: each path's records in their own order
    ordered = sorted(runs.values(), key=StoredRun.order)
    return Sources(paths, ordered, [r for _, r in order], from_store, dict(directories))


def _position(paths: list[Path], file: Path) -> int:
    """Which of the paths a results file was read through (a directory or the file)."""
    for index, path in enumerate(paths):
        if path == file or path == file.parent:
            return index
    return len(paths)


def _directory_runs(
    read: list[tuple[Path, CellRecord]], repo: Path | None, ask_git: bool
) -> list[StoredRun]:
    """A row per run the run directories hold, as a store would keep it."""
    sources: dict[str, RunSource] = {}
    for file, record in read:
        run = sources.get(record.run_id)
        if run is None:
            directory = file.parent
            run = sources[record.run_id] = RunSource(
                record.run_id,
                str(directory),
                [],
                read_environment(directory),
                read_run_json(directory),
            )
        run.records.append((len(run.records) + 1, record, ""))
    attach_commits(list(sources.values()), repo=repo, ask_git=ask_git)
    return [_row(run) for run in sources.values()]


def _row(run: RunSource) -> StoredRun:
    records = [record for _, record, _ in run.records]
    version = (run.environment or {}).get("mpbench_version") or (run.run_json or {}).get(
        "mpbench_version"
    )
    return StoredRun(
        run_id=run.run_id,
        source=run.source,
        added_at="",
        content_sha256="",
        git_commit=run.git_commit,
        commit_time=run.commit_time,
        commit_source=run.commit_source,
        started_at=run.started_at,
        mpbench_version=version if isinstance(version, str) else None,
        devices="; ".join(dict.fromkeys(device_name(r) for r in records)),
        fingerprints="; ".join(dict.fromkeys(r.hardware_fingerprint for r in records)),
        record_count=len(records),
        environment=run.environment,
        run_json=run.run_json,
    )


def runs_margin(run_jsons: list[dict]) -> float | None:
    """The accuracy margin the runs were made with (run.json's config.accuracy_margin), where
    every run that says one says the same; None otherwise (the default applies)."""
    margins = set()
    for raw in run_jsons:
        config = raw.get("config")
        margin = config.get("accuracy_margin") if isinstance(config, dict) else None
        if isinstance(margin, (int, float)) and not isinstance(margin, bool) and margin >= 0:
            margins.add(float(margin))
    return margins.pop() if len(margins) == 1 else None
