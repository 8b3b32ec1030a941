"""The results store: many runs, from many commits and machines, in one SQLite file.

`mpbench store add RUN_DIR...` puts runs here; `mpbench history` and `load_store` read them
back (docs/history.md). SQLite through the standard library: one file a CI job can keep as an
artifact or on a branch, transactions that survive a kill, and `pandas.read_sql` reads it with
no mpbench at all. Nothing here needs a columnar engine: a store of a thousand runs is a few
tens of megabytes of JSON, read once per command.

What it holds (schema version STORE_VERSION, in `PRAGMA user_version`):
- `runs`: one row per run id, with where it was added from, when, a hash of its content, the
  git commit it measured and that commit's time (when known), the run's start, its devices,
  and its environment.json and run.json as JSON text;
- `records`: one row per record (cell repeat), the record's JSON exactly as results.jsonl
  held it, beside the columns a filter needs (framework, workload, policy, device, status,
  step-time median, ...).

Rules:
- Records enter through the validated reader (results.io.read_runs), so the store holds only
  what `mpbench compare` would accept, and leave through `load_record`, which upgrades older
  schema versions as for any file.
- One transaction per run: a kill mid-way leaves every run either whole or absent, never part
  of one (SQLite's rollback journal undoes an unfinished transaction when the file is next
  opened).
- Idempotent: a run is its run id. Adding it again with the same content (records,
  environment.json, run.json) changes nothing; different content (the run was resumed, or
  `--repeat auto` ran more rounds) replaces its rows, in one transaction, where the new copy
  is fuller: it holds every stored record unchanged, and the stored environment.json and
  run.json (`lost_by`, the one place this rule is written; `store add` and the fleet's driver
  both add through store_ops.py's `add_runs`, which calls `Store.add`). Any other copy (a record lost or changed, a file moved
  aside) is refused in one line naming what differs unless `replace=True`: what the store
  holds is never silently thinned nor overwritten.
- A reader refuses a store of a schema version it does not know, in one line (exit 2).
- Every fault of the file or the machine (a damaged file, a read-only one, a full disk, a lock
  held past the wait) is InvalidInput naming the store and what to do: one line and exit 2,
  never a traceback nor exit 1, which means "a regression" to CI. SQLite's errors are turned
  into it here, in every read and write, not by the callers.
- A lock another process holds is waited for, up to BUSY_TIMEOUT_S (LockWait), with a line
  on stderr while it lasts; the message past it says how long it waited, and names no
  holder (SQLite cannot say which process holds a lock).

The module imports no git and no pandas at the top: `mpbench.history` finds commits, and
`load_store` imports pandas when called.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from mpbench.errors import InvalidInput
from mpbench.results.identity import record_key
from mpbench.results.io import read_environment, read_runs, results_file
from mpbench.results.machine import SHORT_FINGERPRINT, device_name, short_fingerprint
from mpbench.results.run_json import read_run_json
from mpbench.results.schema import CellRecord, SchemaError
from mpbench.results.variant import record_variant
from mpbench.results.versions import load_record

if TYPE_CHECKING:
    import pandas as pd

T = TypeVar("T")

STORE_VERSION = 1
READABLE_STORE_VERSIONS = (1,)
# PRAGMA application_id: says "an mpbench store" to `file(1)` and to us ("mpbs").
APPLICATION_ID = 0x6D706273
# Test-only: seconds to sleep inside each run's transaction, before its commit, so that a test
# can kill `store add` mid-transaction deterministically (tests/results/test_store.py).
PAUSE_ENV = "MPBENCH_STORE_TEST_PAUSE_S"
# How long a command waits for a lock another process holds on the store before it gives up
# (LockWait). Test-only override, in seconds, so that a test of a locked store waits a few
# seconds.
BUSY_TIMEOUT_S = 60.0
BUSY_ENV = "MPBENCH_STORE_TEST_BUSY_S"
# While it waits: how often it tries again, and after how long it says so (LockNotice).
LOCK_POLL_S = 0.05
LOCK_NOTICE_AFTER_S = 1.0
# How many of quick_check's lines a damaged store's message quotes.
QUICK_CHECK_LINES = 3

_SCHEMA = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    source TEXT,                 -- the run directory it was last added from
    added_at TEXT NOT NULL,      -- UTC, ISO 8601
    content_sha256 TEXT NOT NULL,
    git_commit TEXT,
    commit_time TEXT,            -- the commit's committer date, UTC ISO 8601, when known
    commit_source TEXT,          -- where git_commit came from, in words
    started_at TEXT,             -- the run's start (environment.json, else run.json, else records)
    mpbench_version TEXT,
    devices TEXT,                -- "cpu: AMD EPYC 9R14" (several: joined by semicolons)
    fingerprints TEXT,           -- hardware fingerprints (several: joined by semicolons)
    record_count INTEGER NOT NULL,
    environment TEXT,            -- environment.json, as JSON text
    run_json TEXT                -- run.json, as JSON text
);
CREATE TABLE records (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    cell_id TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    line INTEGER NOT NULL,       -- its line in results.jsonl: the run's order
    schema_version INTEGER NOT NULL,
    timestamp TEXT NOT NULL,
    framework TEXT NOT NULL,
    framework_version TEXT,
    workload TEXT NOT NULL,
    policy TEXT NOT NULL,
    variant TEXT,
    status TEXT NOT NULL,
    device TEXT NOT NULL,        -- "cpu: AMD EPYC 9R14", as compare names a machine
    device_capability TEXT,
    fingerprint TEXT NOT NULL,
    step_time_median_s REAL,
    throughput_samples_per_s REAL,
    test_accuracy REAL,
    training_bytes INTEGER,
    record TEXT NOT NULL,        -- the record's JSON as results.jsonl held it
    PRIMARY KEY (run_id, cell_id, repeat)
);
CREATE INDEX records_by_cell ON records (workload, policy, framework);
"""


# --- what a run is, read from its directory -------------------------------------------------


@dataclass
class RunSource:
    """One run read from a run directory, ready to be added: its records (validated), the
    text of each as written, and the run's files and commit."""

    run_id: str
    source: str
    records: list[tuple[int, CellRecord, str]]  # (line, record, its JSON text)
    environment: dict[str, Any] | None
    run_json: dict[str, Any] | None
    git_commit: str | None = None
    commit_time: str | None = None
    commit_source: str | None = None

    @property
    def started_at(self) -> str | None:
        """When the run started: environment.json's `started_at`, run.json's `created_at`,
        else its earliest record."""
        for raw, key in ((self.environment, "started_at"), (self.run_json, "created_at")):
            value = (raw or {}).get(key)
            if isinstance(value, str) and _parse_time(value) is not None:
                return iso_utc(value)
        stamps = [r.timestamp for _, r, _ in self.records if _parse_time(r.timestamp)]
        return min((iso_utc(s) for s in stamps), default=None)

    def content_sha256(self) -> str:
        """A hash of what the run holds, independent of file layout and key order."""
        digest = hashlib.sha256()
        for text in sorted(_canonical(json.loads(t)) for _, _, t in self.records):
            digest.update(text.encode())
            digest.update(b"\n")
        for raw in (self.environment, self.run_json):
            digest.update(_canonical(raw).encode())
            digest.update(b"\n")
        return digest.hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def read_run_dir(path: str | Path) -> list[RunSource]:
    """The runs of a run directory (or a results.jsonl), one per run id it holds (one, for
    anything `mpbench run` wrote). Refuses, in one line, what compare would refuse."""
    path = Path(path)
    file = results_file(path)
    directory = file.parent
    records = read_runs([file])  # SchemaError (InvalidInput) names the file and line
    by_identity = {record_key(r): r for r in records}
    environment = read_environment(directory)
    run_json = read_run_json(directory)
    runs: dict[str, RunSource] = {}
    seen: set[tuple[str, str, int]] = set()
    for number, raw_line in enumerate(file.read_bytes().splitlines(), start=1):
        text = raw_line.decode("utf-8").strip()
        if not text:
            continue
        raw = json.loads(text)
        identity = (raw["run_id"], raw["cell_id"], raw["repeat"])
        if identity in seen:  # an identical copy (read_runs refused different ones)
            continue
        seen.add(identity)
        record = by_identity[identity]
        run = runs.get(record.run_id)
        if run is None:
            run = runs[record.run_id] = RunSource(
                record.run_id, str(directory.resolve()), [], environment, run_json
            )
        run.records.append((number, record, text))
    return list(runs.values())


def lost_by(
    run: RunSource,
    stored: dict[tuple[str, int], Any],
    environment: dict[str, Any] | None,
    run_json: dict[str, Any] | None,
) -> list[str]:
    """What the store would lose if `run` replaced its stored copy of the same run (records
    by (cell, repeat), as JSON values; its files): empty where the copy is fuller, the only
    copy that replaces a stored run unasked. Fuller: every stored record present and
    identical (as JSON: key order and line do not matter), the stored environment.json
    present and identical, the stored run.json present (`--resume` rewrites it, so its
    content may be newer). More records, or a file the store lacked, is fuller."""
    copy = {(r.cell_id, r.repeat): json.loads(text) for _, r, text in run.records}
    missing = [key for key in stored if key not in copy]
    changed = [
        (key, _differing(stored[key], copy[key]))
        for key in stored
        if key in copy and _canonical(stored[key]) != _canonical(copy[key])
    ]
    lost = []
    if missing:
        lost.append(
            f"lacks {len(missing)} of the store's {len(stored)} records ({_cells(missing)})"
        )
    if len(changed) == 1:
        ((key, fields),) = changed
        lost.append(f"changes its record of {_cells([key])} (it differs in {fields})")
    elif changed:
        lost.append(
            f"changes {len(changed)} of its records ({_cells([key for key, _ in changed])})"
        )
    if environment is not None and run.environment is None:
        lost.append("lacks the environment.json the store holds")
    elif environment is not None and _canonical(environment) != _canonical(run.environment):
        lost.append(
            "changes the environment.json the store holds (it differs in "
            f"{_differing(environment, run.environment)})"
        )
    if run_json is not None and run.run_json is None:
        lost.append("lacks the run.json the store holds")
    return lost


def _cells(keys: list[tuple[str, int]]) -> str:
    """`cell torch/mnist_dense/float32/r0 repeat 0`, the first three of several."""
    said = ", ".join(f"cell {cell} repeat {repeat}" for cell, repeat in keys[:3])
    return said + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")


def _differing(a: Any, b: Any) -> str:
    """The top-level fields two JSON objects differ in (as compare names two records that
    differ): `step_time, throughput`."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return "its content"
    names = [
        name
        for name in dict.fromkeys([*a, *b])
        if name not in a or name not in b or _canonical(a[name]) != _canonical(b[name])
    ]
    return ", ".join(names) or "its content"


# --- times ----------------------------------------------------------------------------------


def _parse_time(text: str) -> datetime | None:
    """An ISO 8601 date or time (`2026-11-26`, `2026-11-26T16:06:35+00:00`, `...Z`); a time
    without a zone is taken as UTC. None if it is not one."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):  # Python 3.10's fromisoformat does not read "Z"
        raw = raw[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def iso_utc(text: str) -> str:
    """An ISO 8601 time as UTC, to the second: the one spelling the store sorts by."""
    moment = _parse_time(text)
    if moment is None:
        raise ValueError(f"not an ISO 8601 time: {text!r}")
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds")


def parse_time(option: str, text: str) -> str:
    """A time from the command line, as iso_utc; InvalidInput naming the option if bad."""
    if _parse_time(text) is None:
        raise InvalidInput(
            f"{option} {text!r}: not an ISO 8601 date or time (2026-11-26 or "
            "2026-11-26T16:06:35+00:00)"
        )
    return iso_utc(text)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- the runs as stored, and which of them a command asks for --------------------------------


@dataclass(frozen=True)
class StoredRun:
    """A run's row of the store (or of a run directory read the same way)."""

    run_id: str
    source: str | None
    added_at: str
    content_sha256: str
    git_commit: str | None
    commit_time: str | None
    commit_source: str | None
    started_at: str | None
    mpbench_version: str | None
    devices: str
    fingerprints: str
    record_count: int
    environment: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    run_json: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def when(self) -> str:
        """Where the run sits in time: its commit's time when known, else its start."""
        return self.commit_time or self.started_at or ""

    def order(self) -> tuple[str, str, str]:
        """History's order: by commit time (the run's start where that is unknown), then by
        the run's start, then by id (runs of one commit in the order they ran)."""
        return (self.when, self.started_at or "", self.run_id)

    @property
    def short_commit(self) -> str | None:
        return self.git_commit[:8] if self.git_commit else None


@dataclass(frozen=True)
class StoreFilter:
    """Which records a reader wants. Empty fields select everything.

    devices: a device matches when one of these is part of its name (case-insensitive:
    `h200`, `cpu`, `EPYC`) or names its hardware fingerprint: the whole of it, or a prefix
    at least as long as the tables show (SHORT_FINGERPRINT: `9f3c2a7b41d0`) that no other
    machine's fingerprint starts with (`check_devices`). frameworks, workloads,
    policies: exact names (policies canonical: `mixed_bfloat16`; callers resolve aliases;
    a speed-up needs float32's records too). commits: `A..B`, the runs from commit A to
    commit B in history's order, both included (unlike git's A..B, which leaves A out);
    `A..` or `..B` leave one end open; a prefix of a commit names it. since / until: the
    run's time (its commit's, else its start), ISO 8601, both included; a date alone as
    `until` includes that whole day.
    """

    devices: tuple[str, ...] = ()
    frameworks: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    commits: str | None = None
    since: str | None = None
    until: str | None = None
    run_ids: tuple[str, ...] = ()

    def check(self) -> StoreFilter:
        """InvalidInput now, before anything is read, for a bad date or range."""
        if self.since is not None:
            parse_time("--since", self.since)
        if self.until is not None:
            _until(self.until)
        if self.commits is not None and ".." not in self.commits:
            raise InvalidInput(
                f"--commits {self.commits!r}: write A..B, A.. or ..B (commits or prefixes)"
            )
        return self

    @property
    def selects_runs(self) -> bool:
        """It chooses among a store's runs (commits, dates), not only among records."""
        return any(x is not None for x in (self.commits, self.since, self.until))

    def runs(self, runs: Sequence[StoredRun]) -> list[StoredRun]:
        """The runs these filters keep, in history's order."""
        self.check()
        ordered = sorted(runs, key=StoredRun.order)
        if self.run_ids:
            ordered = [r for r in ordered if r.run_id in self.run_ids]
        if self.since is not None:
            since = parse_time("--since", self.since)
            ordered = [r for r in ordered if r.when and iso_utc(r.when) >= since]
        if self.until is not None:
            until = _until(self.until)
            ordered = [r for r in ordered if r.when and iso_utc(r.when) <= until]
        if self.commits is not None:
            ordered = _commit_range(ordered, self.commits)
        return ordered

    def keeps(self, record: CellRecord) -> bool:
        """Whether a record passes the record-level filters (not the run-level ones)."""
        if self.frameworks and record.framework not in self.frameworks:
            return False
        if self.workloads and record.workload not in self.workloads:
            return False
        if self.policies and record.policy not in self.policies:
            return False
        return not self.devices or any(_names_device(d, record) for d in self.devices)

    def check_devices(self, machines: dict[str, str]) -> None:
        """InvalidInput, in one line, for a --device value that names none of `machines`
        (fingerprint -> device) for being too short a prefix of a fingerprint, or that
        names several by their fingerprints: read as a name, it would keep them all."""
        for value in self.devices:
            named = [fp for fp in machines if _names_fingerprint(value, fp)]
            if len(named) > 1:
                listed = ", ".join(f"{fp} ({machines[fp]})" for fp in sorted(named))
                raise InvalidInput(
                    f"--device {value}: the fingerprints of {len(named)} machines start with "
                    f"it: {listed}; give more of the one you mean"
                )
            by_name = any(value.lower() in device.lower() for device in machines.values())
            short = [fp for fp in machines if fp.lower().startswith(value.lower())]
            if not named and not by_name and short:
                raise InvalidInput(
                    f"--device {value}: too short to name a fingerprint; give at least its "
                    f"first {SHORT_FINGERPRINT} characters, as the tables show them "
                    f"({', '.join(sorted(short_fingerprint(fp) for fp in short))})"
                )


def _names_device(value: str, record: CellRecord) -> bool:
    """--device VALUE keeps the record: part of its device's name, or its fingerprint."""
    named = value.lower() in device_name(record).lower()
    return named or _names_fingerprint(value, record.hardware_fingerprint)


def _names_fingerprint(value: str, fingerprint: str) -> bool:
    """The whole fingerprint, or a prefix of it as long as a table shows or longer (a
    shorter one would name machines by chance)."""
    value, fingerprint = value.lower(), fingerprint.lower()
    if value == fingerprint:
        return True
    return len(value) >= SHORT_FINGERPRINT and fingerprint.startswith(value)


def _until(text: str) -> str:
    """--until 2026-11-26 includes that day: a date alone means its last second."""
    value = parse_time("--until", text)
    if len(text.strip()) == 10:  # YYYY-MM-DD
        return value[:10] + "T23:59:59+00:00"
    return value


def _commit_range(runs: list[StoredRun], spec: str) -> list[StoredRun]:
    first, last = (part.strip() for part in spec.split("..", 1))
    start = _position(runs, first, spec, last=False) if first else 0
    end = _position(runs, last, spec, last=True) if last else len(runs) - 1
    return runs[start : end + 1]


def _position(runs: list[StoredRun], prefix: str, spec: str, last: bool) -> int:
    """The first (or last) run of the commit `prefix` names, in history's order."""
    low = prefix.lower()
    found = [i for i, r in enumerate(runs) if r.git_commit and r.git_commit.lower().startswith(low)]
    if not found:
        known = sorted({r.short_commit for r in runs if r.short_commit})
        listed = ", ".join(known[:8]) + (" ..." if len(known) > 8 else "")
        raise InvalidInput(
            f"--commits {spec}: no run of commit {prefix!r} among the runs selected "
            f"(their commits: {listed or 'none known'})"
        )
    commits = {runs[i].git_commit for i in found}
    if len(commits) > 1:
        raise InvalidInput(
            f"--commits {spec}: {prefix!r} names several commits "
            f"({', '.join(sorted(c[:12] for c in commits if c))}); give more of it"
        )
    return found[-1] if last else found[0]


# --- the store itself -----------------------------------------------------------------------


@dataclass
class AddResult:
    run_id: str
    outcome: str  # "added", "unchanged", "replaced", "commit updated"
    records: int
    before: int | None = None  # records it had, where it was replaced


class Store:
    """An open store. `Store.create(path)` to add runs (the file is made where missing);
    `Store.read(path)` to read one that exists; `Store.memory()` for run directories read
    as a store for one command."""

    def __init__(self, connection: sqlite3.Connection, name: str) -> None:
        self._db = connection
        self.name = name

    # -- opening

    @classmethod
    def create(cls, path: str | Path) -> Store:
        path = Path(path)
        if path.is_dir():
            raise InvalidInput(f"--store {path}: is a directory; name the store's file")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInput(f"cannot make the store {path}: {exc.strerror or exc}") from None
        store = cls(_open(path, "rwc", LockWait(str(path))), str(path))
        store._initialise()
        return store

    @classmethod
    def read(cls, path: str | Path) -> Store:
        path = Path(path)
        if not path.is_file():
            raise InvalidInput(f"{path}: no such store (make one with 'mpbench store add')")
        wait = LockWait(str(path))
        try:
            # rw, not ro: opening the file after a kill mid-transaction rolls the unfinished
            # transaction back (a hot journal), which a read-only connection cannot do.
            connection = _open(path, "rw", wait)
        except StoreLocked:
            raise  # read-only would wait for the same lock again (issue 55: twice the limit)
        except InvalidInput:
            connection = _open(path, "ro", wait)  # a read-only file or folder: read it as it is
        store = cls(connection, str(path))
        store._check_version()
        return store

    @classmethod
    def memory(cls) -> Store:
        store = cls(_connect(":memory:", LockWait("(run directories)")), "(run directories)")
        store._initialise()
        return store

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pragma(self, name: str) -> int:
        try:
            return int(self._db.execute(f"PRAGMA {name}").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            if _code(exc) == _NOTADB:  # a text file, or something else that is no SQLite
                raise _not_a_store(Path(self.name), exc) from None
            raise _fault(self.name, exc) from None

    @contextlib.contextmanager
    def _guard(self, writing: str | None = None) -> Iterator[None]:
        """SQLite's errors as one line naming the store (_fault). `writing`: what the
        command was changing ("adding run X"), where it writes."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise _fault(self.name, exc, writing) from None

    def _check_version(self) -> None:
        version, app = self._pragma("user_version"), self._pragma("application_id")
        if app != APPLICATION_ID or version == 0:
            raise InvalidInput(
                f"{self.name}: a SQLite database, but not an mpbench store "
                "(make one with 'mpbench store add')"
            )
        if version not in READABLE_STORE_VERSIONS:
            readable = ", ".join(str(v) for v in READABLE_STORE_VERSIONS)
            raise InvalidInput(
                f"{self.name}: store schema version {version}, which this mpbench cannot read "
                f"(it reads version {readable}); use the mpbench that wrote it, or a newer one"
            )

    def _initialise(self) -> None:
        """A new file gets the schema, in one transaction; an existing one is checked."""
        if self._pragma("user_version") != 0 or self._pragma("application_id") != 0:
            self._check_version()
            return
        with self._guard(writing="making it"):
            tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise InvalidInput(f"{self.name}: a SQLite database, but not an mpbench store")
            with self._transaction():
                for statement in _SCHEMA.split(";\n"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self._db.execute(f"PRAGMA user_version = {STORE_VERSION}")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT: the write lock from the start (two `store add`s wait
        for each other rather than fail half-way), everything or nothing.

        On an error, ROLLBACK only while the transaction is still active: after a full disk
        or an I/O error SQLite has often rolled it back itself, and a second ROLLBACK would
        only add "cannot rollback - no transaction is active" to the real error. A ROLLBACK
        that fails in turn is left unsaid: the journal stays beside the file, and whoever
        opens it next rolls the transaction back (SQLite's hot journal)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.DatabaseError):
                    self._db.execute("ROLLBACK")
            raise

    # -- writing

    def add(self, run: RunSource, *, replace: bool = False) -> AddResult:
        """Add one run in one transaction (see the module's rules). `replace`: a copy that is
        not fuller than the stored one (`lost_by`) replaces it too (else: InvalidInput)."""
        content = run.content_sha256()
        with self._guard(writing=f"adding run {run.run_id}"), self._transaction():
            old = self._db.execute(
                "SELECT content_sha256, record_count, git_commit, commit_time, commit_source "
                "FROM runs "
                "WHERE run_id = ?",
                (run.run_id,),
            ).fetchone()
            if old is not None and old[0] == content:
                return self._same_content(run, old)
            if old is not None and not replace:
                lost = self._lost_by(run)
                if lost:
                    raise InvalidInput(self._not_fuller([(run, lost)]))
            self._db.execute("DELETE FROM records WHERE run_id = ?", (run.run_id,))
            self._db.execute("DELETE FROM runs WHERE run_id = ?", (run.run_id,))
            if old is not None and run.git_commit is None:  # keep what was said before
                run.git_commit, run.commit_time, run.commit_source = old[2], old[3], old[4]
            self._insert(run, content)
            _pause_for_tests()
        if old is None:
            return AddResult(run.run_id, "added", len(run.records))
        return AddResult(run.run_id, "replaced", len(run.records), before=old[1])

    def check_replacements(self, runs: Sequence[RunSource], *, replace: bool = False) -> None:
        """InvalidInput, before anything is added, where a run's copy is not fuller than the
        one the store holds and not `replace` (the rule `add` keeps, for every run at once: a
        command that refuses one run adds none)."""
        if replace or not runs:
            return
        with self._guard():
            stored = dict(self._db.execute("SELECT run_id, content_sha256 FROM runs").fetchall())
        refused = []
        for run in runs:
            if run.run_id in stored and stored[run.run_id] != run.content_sha256():
                lost = self._lost_by(run)
                if lost:
                    refused.append((run, lost))
        if refused:
            raise InvalidInput(self._not_fuller(refused) + "; nothing was added")

    def _lost_by(self, run: RunSource) -> list[str]:
        """What the store would lose if `run` replaced its stored copy (lost_by's rule)."""
        with self._guard():
            files = self._db.execute(
                "SELECT environment, run_json FROM runs WHERE run_id = ?", (run.run_id,)
            ).fetchone()
            rows = self._db.execute(
                "SELECT cell_id, repeat, line, record FROM records WHERE run_id = ?",
                (run.run_id,),
            ).fetchall()
        if files is None:
            return []
        where = f"run {run.run_id}"
        stored = {
            (cell, repeat): self._json(text, f"{where} line {line}")
            for cell, repeat, line, text in rows
        }
        environment = self._json(files[0], f"{where}: its environment.json")
        run_json = self._json(files[1], f"{where}: its run.json")
        return lost_by(run, stored, environment, run_json)

    def _not_fuller(self, runs: list[tuple[RunSource, list[str]]]) -> str:
        said = "; ".join(
            f"run {run.run_id} from {run.source} {', '.join(lost)}" for run, lost in runs[:3]
        )
        more = f" (and {len(runs) - 3} more runs)" if len(runs) > 3 else ""
        return (
            f"{self.name}: {said}{more}: a copy that lacks or changes what the store holds does "
            "not replace it; add it with --replace to replace the stored copy anyway"
        )

    def remove(self, run_ids: Sequence[str]) -> list[StoredRun]:
        """Remove these runs, all in one transaction; the runs removed, in history's order.
        An id the store does not hold: InvalidInput naming a few it does, nothing removed."""
        wanted = list(dict.fromkeys(run_ids))
        with self._guard(writing="removing runs"), self._transaction():
            runs = self.runs()
            known = {run.run_id for run in runs}
            unknown = [run_id for run_id in wanted if run_id not in known]
            if unknown:
                newest = ", ".join(run.run_id for run in runs[-5:])
                if len(runs) > 5:
                    holds = f"it holds {len(runs)} runs, the newest {newest}; 'mpbench store list'"
                else:
                    holds = f"its runs: {newest}" if runs else "it holds no runs"
                raise InvalidInput(
                    f"{self.name}: no run {', '.join(map(repr, unknown))} in the store "
                    f"({holds}); nothing was removed"
                )
            for run_id in wanted:
                self._db.execute("DELETE FROM records WHERE run_id = ?", (run_id,))
                self._db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        return [run for run in runs if run.run_id in wanted]

    def check_integrity(self) -> None:
        """SQLite's `PRAGMA quick_check` of the whole file (every page's structure, not the
        records' content): InvalidInput quoting its first lines where it finds a fault."""
        with self._guard():
            rows = [str(row[0]) for row in self._db.execute("PRAGMA quick_check").fetchall()]
        lines = [
            line.strip()
            for row in rows
            for line in row.splitlines()
            if line.strip() and not line.startswith("*** in database")
        ]
        if lines == ["ok"]:
            return
        quoted = "; ".join(lines[:QUICK_CHECK_LINES])
        if len(lines) > QUICK_CHECK_LINES:
            quoted += f" (and {len(lines) - QUICK_CHECK_LINES} more)"
        raise InvalidInput(_damaged(self.name, f"quick_check: {quoted}"))

    def _same_content(self, run: RunSource, old: tuple) -> AddResult:
        """Same records and files: only a commit (or its time) newly given is written."""
        commit, commit_time = old[2], old[3]
        if run.git_commit and run.git_commit != commit:
            values = (run.git_commit, run.commit_time, run.commit_source)
        elif run.commit_time and run.commit_time != commit_time:
            values = (commit, run.commit_time, run.commit_source)
        else:
            return AddResult(run.run_id, "unchanged", len(run.records))
        self._db.execute(
            "UPDATE runs SET git_commit = ?, commit_time = ?, commit_source = ? WHERE run_id = ?",
            (*values, run.run_id),
        )
        return AddResult(run.run_id, "commit updated", len(run.records))

    def _insert(self, run: RunSource, content: str) -> None:
        records = [r for _, r, _ in run.records]
        env = run.environment or {}
        version = env.get("mpbench_version") or (run.run_json or {}).get("mpbench_version")
        self._db.execute(
            f"INSERT INTO runs VALUES ({', '.join('?' * 14)})",
            (
                run.run_id,
                run.source,
                _now(),
                content,
                run.git_commit,
                run.commit_time,
                run.commit_source,
                run.started_at,
                version if isinstance(version, str) else None,
                "; ".join(dict.fromkeys(device_name(r) for r in records)),
                "; ".join(dict.fromkeys(r.hardware_fingerprint for r in records)),
                len(records),
                None if run.environment is None else json.dumps(run.environment),
                None if run.run_json is None else json.dumps(run.run_json),
            ),
        )
        self._db.executemany(
            f"INSERT INTO records VALUES ({', '.join('?' * 20)})",
            [_record_row(line, record, text) for line, record, text in run.records],
        )

    # -- reading

    def _json(self, text: str | None, what: str) -> Any:
        """JSON text the store holds; a damaged store where it is not JSON (a page whose
        structure quick_check passes can still hold garbage)."""
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise InvalidInput(_damaged(self.name, f"{what}: not JSON, {exc}")) from None

    def runs(self, filters: StoreFilter | None = None) -> list[StoredRun]:
        """The runs the run-level filters keep, in history's order."""
        with self._guard():
            rows = self._db.execute(
                "SELECT run_id, source, added_at, content_sha256, git_commit, commit_time, "
                "commit_source, started_at, mpbench_version, devices, fingerprints, "
                "record_count, environment, run_json FROM runs"
            ).fetchall()
        runs = [
            StoredRun(
                *row[:12],
                environment=self._json(row[12], f"run {row[0]}: its environment.json"),
                run_json=self._json(row[13], f"run {row[0]}: its run.json"),
            )
            for row in rows
        ]
        return (filters or StoreFilter()).runs(runs)

    def records(self, filters: StoreFilter | None = None) -> list[CellRecord]:
        """The records the filters keep: runs in history's order, each in its file's order."""
        filters = filters or StoreFilter()
        if filters.devices:
            with self._guard():
                machines = self._db.execute("SELECT DISTINCT fingerprint, device FROM records")
                held = dict(machines.fetchall())
            filters.check_devices(held)
        out: list[CellRecord] = []
        for run in self.runs(filters):
            with self._guard():
                rows = self._db.execute(
                    "SELECT line, record FROM records WHERE run_id = ? ORDER BY line",
                    (run.run_id,),
                ).fetchall()
            for line, text in rows:
                raw = self._json(text, f"run {run.run_id} line {line}")
                try:
                    record = load_record(raw)
                except SchemaError as exc:
                    raise SchemaError(f"{self.name}: run {run.run_id} line {line}: {exc}") from None
                if filters.keeps(record):
                    out.append(record)
        return out


def _uri_path(path: Path) -> str:
    """A path as an SQLite URI's path (`?` and `#` would end it)."""
    from urllib.parse import quote

    return quote(str(path.resolve()))


def _open(path: Path, mode: str, wait: LockWait) -> sqlite3.Connection:
    """A connection to the store's file; InvalidInput in one line where there is none."""
    try:
        return _connect(f"file:{_uri_path(path)}?mode={mode}", wait)
    except sqlite3.DatabaseError as exc:
        if _code(exc) == _NOTADB:
            raise _not_a_store(path, exc) from None
        if _code(exc) in (_CANTOPEN, None):  # "unable to open database file", ...
            hint = " (can its folder be written?)" if mode == "rwc" else ""
            raise InvalidInput(f"cannot open the store {path}: {exc}{hint}") from None
        raise _fault(str(path), exc) from None


def _connect(target: str, wait: LockWait) -> _Connection:
    # isolation_level=None: this module says BEGIN and COMMIT itself (one per run).
    # timeout=0: SQLite's own busy handler off; _Connection waits (LockWait).
    connection = sqlite3.connect(
        target, uri=True, isolation_level=None, timeout=0, factory=_Connection
    )
    connection.wait = wait
    connection.execute("PRAGMA foreign_keys = ON")
    # FULL: each COMMIT is on disk before it returns (the default of the rollback journal,
    # said here because WAL mode would change it). One file, no -wal beside it to forget.
    connection.execute("PRAGMA synchronous = FULL")
    return connection


def _busy_timeout() -> float:
    return float(os.environ.get(BUSY_ENV) or BUSY_TIMEOUT_S)


# --- waiting for another process's lock -------------------------------------------------------


class StoreLocked(InvalidInput):
    """The store stayed locked by another process for the whole wait."""


def _locked(name: str, waited_s: float | None) -> StoreLocked:
    """SQLite does not say who holds a lock: any process with the file open may (another
    `mpbench store add`, or any program writing to it), so the message names none."""
    waited = f"; gave up after waiting {_seconds(waited_s)}" if waited_s is not None else ""
    return StoreLocked(
        f"the store {name} is locked: another process holds it (an mpbench store add, or any "
        f"program writing to it){waited}; try again when it is done"
    )


def _seconds(value: float) -> str:
    """`60 s`, `2.0 s`: whole seconds from ten on, tenths below (a short test wait)."""
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


@dataclass
class LockNotice:
    """The line that says a command is waiting for the store's lock, on stderr once it has
    waited LOCK_NOTICE_AFTER_S, as mpbench shows progress (runner/progress.py): on a
    terminal one line that counts the seconds and goes when the wait ends; elsewhere (a pipe,
    a CI log) a plain line, said once and left, as the reason a job stalled."""

    name: str
    limit_s: float
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    _shown: str = ""  # the text on screen, or said once

    @property
    def text(self) -> str:
        return (
            f"waiting for the store's lock, held by another process ({self.name}; giving up "
            f"after {_seconds(self.limit_s)})..."
        )

    def waiting(self, waited_s: float) -> None:
        if waited_s < LOCK_NOTICE_AFTER_S:
            return
        if not self._terminal:
            if not self._shown:
                self._write(self.text + "\n")
                self._shown = self.text
            return
        line = f"{self.text} {waited_s:.0f} s"
        if line != self._shown:  # redrawn once a second, not at every try
            self._write(f"\r{line}\x1b[K")
            self._shown = line

    def ended(self) -> None:
        """The wait is over (the lock taken, or given up): a terminal's line goes (a later
        wait draws it again); a plain line, said, stays said."""
        if self._shown and self._terminal:
            self._write("\r\x1b[K")
            self._shown = ""

    @property
    def _terminal(self) -> bool:
        return self.stream.isatty()

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


@dataclass
class LockWait:
    """How a statement waits for a lock another process holds on the store: tried again
    until the lock is free or `limit_s` has passed, the time measured and said while it lasts
    (LockNotice). SQLite's own busy timeout waits in silence, and the store once met it twice
    in a row for one lock (a reader that opened the file read-write, then read-only: 121 s,
    for a stated 60); a lock is now waited for once, and a command that gave up does not try
    another way in."""

    name: str
    limit_s: float = field(default_factory=_busy_timeout)
    notice: LockNotice = field(init=False)

    def __post_init__(self) -> None:
        self.notice = LockNotice(self.name, self.limit_s)

    def run(self, statement: Callable[[], T], retry: bool = True) -> T:
        """The statement's result. `retry=False`: a statement inside a transaction other
        than COMMIT, which SQLite says not to try again (the transaction is rolled back)."""
        waited = 0.0
        try:
            while True:
                started = time.monotonic()
                try:
                    return statement()
                except sqlite3.OperationalError as exc:
                    if _code(exc) != _BUSY:
                        raise
                    if not retry or waited >= self.limit_s:
                        raise _locked(self.name, waited if retry else None) from None
                self.notice.waiting(waited)
                time.sleep(min(LOCK_POLL_S, self.limit_s - waited))
                waited += time.monotonic() - started
        finally:
            self.notice.ended()


class _Connection(sqlite3.Connection):
    """SQLite's connection, each statement run through the store's LockWait."""

    wait: LockWait

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        retry = not self.in_transaction or sql == "COMMIT"
        return self.wait.run(lambda: super(_Connection, self).execute(sql, parameters), retry)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        retry = not self.in_transaction
        return self.wait.run(lambda: super(_Connection, self).executemany(sql, parameters), retry)


# --- SQLite's errors, said for the user -------------------------------------------------------

# SQLite's primary result codes (https://sqlite.org/rescode.html) that are a fault of the file
# or of the machine. Python 3.11 gives the code (sqlite_errorcode, the extended one: its low
# byte is the primary); 3.10 only the message, which SQLite words the same for every code.
_BUSY, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 8, 10, 11, 13, 14, 26
_MESSAGES = {
    "database is locked": _BUSY,
    "attempt to write a readonly database": _READONLY,
    "disk I/O error": _IOERR,
    "database disk image is malformed": _CORRUPT,
    "database or disk is full": _FULL,
    "unable to open database file": _CANTOPEN,
    "file is not a database": _NOTADB,
}


def _code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    return _MESSAGES.get(str(exc))


_RESTORE = (
    "restore it from a copy (a CI cache or branch), or move it aside and add the runs again "
    "with 'mpbench store add'"
)


def _damaged(name: str, said: str) -> str:
    return f"the store {name} is damaged ({said}); {_RESTORE}"


def _not_a_store(path: Path, exc: sqlite3.DatabaseError) -> InvalidInput:
    """SQLite's "file is not a database", said for what the file is."""
    if damaged_store(path):
        return InvalidInput(f"{path} is not a readable mpbench store (damaged header?); {_RESTORE}")
    return InvalidInput(f"{path}: not an mpbench store ({exc})")


def _fault(name: str, exc: sqlite3.DatabaseError, writing: str | None = None) -> InvalidInput:
    """An error SQLite raised on the store `name`, as one line that says what to do.
    `writing`: what the command was changing, where it writes; the store is then as it was
    before that change (its transaction rolled back, now or when the file is next opened)."""
    code, said = _code(exc), str(exc)
    detail = getattr(exc, "sqlite_errorname", None)
    said_fully = f"{said}, {detail}" if detail else said
    doing = f" ({writing})" if writing else ""
    if code in (_CORRUPT, _NOTADB):
        return InvalidInput(_damaged(name, said))
    if said.startswith("Could not decode to UTF-8"):  # text pages holding garbage
        return InvalidInput(_damaged(name, "text that is not UTF-8"))
    if code == _BUSY:  # met outside a statement's LockWait (none is known to)
        return _locked(name, None)
    if code == _READONLY and not writing:  # a hot journal to roll back, in a read-only file
        return InvalidInput(
            f"cannot read the store {name}: {said_fully}: it must be written to (an unfinished "
            "transaction rolled back) but is read-only; make the file and its folder writable"
        )
    if code == _READONLY:
        return InvalidInput(
            f"cannot write the store {name}{doing}: it is read-only ({said}), nothing was "
            "changed; make the file and its folder writable (SQLite writes a journal beside "
            "it), or copy it where you can write"
        )
    if code in (_FULL, _IOERR) and writing:
        said = (
            f"its disk is full ({said_fully})"
            if code == _FULL
            else f"{said_fully} (a full disk, a file size limit, or a failing disk)"
        )
        return InvalidInput(
            f"cannot write the store {name}{doing}: {said}; the store is as it was before "
            "this change: free space, then run the command again"
        )
    if code == _IOERR:
        return InvalidInput(
            f"cannot read the store {name}: {said_fully} (a failing disk?); copy it "
            "elsewhere, or restore it from a copy"
        )
    if code == _CANTOPEN:
        return InvalidInput(f"cannot open the store {name}{doing}: {said}")
    return InvalidInput(f"the store {name}{doing}: SQLite failed ({said_fully})")


def _record_row(line: int, record: CellRecord, text: str) -> tuple:
    step = record.step_time
    return (
        record.run_id,
        record.cell_id,
        record.repeat,
        line,
        record.schema_version,
        record.timestamp,
        record.framework,
        record.framework_version,
        record.workload,
        record.policy,
        record_variant(record),
        record.status.value,
        device_name(record),
        record.device.capability,
        record.hardware_fingerprint,
        step.median_s if step is not None else None,
        record.throughput_samples_per_s,
        record.accuracy.test_accuracy,
        record.memory.training_bytes,
        text,
    )


def _pause_for_tests() -> None:
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        time.sleep(float(pause))


# --- the functions other layers call ---------------------------------------------------------


_SQLITE_MAGIC = b"SQLite format 3\x00"
# Where SQLite keeps PRAGMA application_id in its 100-byte header (big-endian), and the most
# its first page (the schema's) may hold.
_APPLICATION_ID_AT = 68
_FIRST_PAGE_MAX = 65536


def is_store(path: str | Path) -> bool:
    """A file that starts as an SQLite database does: a store, not a results file."""
    return _head(path, len(_SQLITE_MAGIC)) == _SQLITE_MAGIC


def damaged_store(path: str | Path) -> bool:
    """A store whose first bytes were overwritten: no SQLite magic, yet binary (a results
    file is text, without a NUL byte), with mpbench's application id where SQLite keeps it or
    the store's schema on its first page."""
    head = _head(path, _FIRST_PAGE_MAX)
    if head is None or head.startswith(_SQLITE_MAGIC) or b"\x00" not in head:
        return False
    app = APPLICATION_ID.to_bytes(4, "big")
    return (
        head[_APPLICATION_ID_AT : _APPLICATION_ID_AT + 4] == app
        or b"CREATE TABLE records (" in head
    )


def _head(path: str | Path, size: int) -> bytes | None:
    """A file's first `size` bytes; None where it is no file (a directory, nothing)."""
    path = Path(path)
    if not path.is_file():
        return None
    with open(path, "rb") as fh:
        return fh.read(size)


def store_records(path: str | Path, filters: StoreFilter | None = None) -> list[CellRecord]:
    """The records of the store at `path` that `filters` keep, as `read_runs` gives those of
    run directories: runs in history's order (commit time, else start), each in file order."""
    with Store.read(path) as db:
        return db.records(filters)


def stored_runs(path: str | Path, filters: StoreFilter | None = None) -> list[StoredRun]:
    """The runs of the store at `path` that the run-level filters keep, in history's order,
    with their environment.json and run.json."""
    with Store.read(path) as db:
        return db.runs(filters)


def load_store(path: str | Path, raw: bool = False, **filters: Any) -> pd.DataFrame:
    """The store's records as `mpbench.results.load` gives those of run directories: one row
    per cell repeat, the same columns (results.frame). `filters`: StoreFilter's fields
    (`workloads=("mnist_dense",)`, `devices=("h200",)`, `commits="abc123..def456"`,
    `since="2026-11-01"`); a single name may be given as a string. The runs' commits and
    times are in the store's `runs` table: `pd.read_sql("SELECT * FROM runs", con)`."""
    from mpbench.results.frame import to_frame

    fields = {
        name: (value,) if isinstance(value, str) and name not in _TEXT_FILTERS else value
        for name, value in filters.items()
    }
    try:
        chosen = StoreFilter(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}
        )
    except TypeError as exc:
        raise TypeError(f"load_store: {exc} (filters are StoreFilter's fields)") from None
    return to_frame(store_records(path, chosen), raw=raw)


_TEXT_FILTERS = ("commits", "since", "until")
