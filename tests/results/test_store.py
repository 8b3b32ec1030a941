"""The results store (mpbench/results/store.py, docs/history.md): run directories in, the
same records out; idempotent; a version it does not know refused in one line; readable by
pandas; whole runs only after `mpbench store add` is killed mid-transaction; a smaller copy
of a run refused unless --replace; `store remove`. Its faults: test_store_faults.py."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import cpu_run, record, write_run
from cli import run_mpbench

from mpbench.errors import InvalidInput
from mpbench.results import load, load_store, read_records, write_environment
from mpbench.results.io import read_runs
from mpbench.results.store import (
    PAUSE_ENV,
    Store,
    StoreFilter,
    read_run_dir,
    store_records,
    stored_runs,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def make_run(root: Path, index: int, commit: str | None = None, **overrides) -> Path:
    """A run directory as `mpbench run` leaves it: results.jsonl, environment.json, run.json."""
    run_id = f"20260301-10{index:02d}00-aa{index:02d}"
    directory = root / f"run-{index:02d}"
    write_run(directory, cpu_run(run_id, **overrides))
    environment = {"mpbench_version": "0.1.0", "started_at": f"2026-03-01T10:{index:02d}:00+00:00"}
    if commit is not None:
        environment["git_commit"] = commit
    write_environment(directory, environment)
    run_json = {"run_id": run_id, "created_at": environment["started_at"], "config": {}}
    (directory / "run.json").write_text(json.dumps(run_json))
    return directory


def add(store: Path, *paths: Path, extra: tuple = ()) -> subprocess.CompletedProcess:
    return run_mpbench("store", "add", *paths, "--store", store, *extra)


def test_a_round_trip_keeps_every_record_and_file(tmp_path):
    runs = [make_run(tmp_path, i, commit=COMMIT) for i in range(3)]
    store = tmp_path / "store.sqlite"
    done = add(store, *runs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("3 added")
    assert store_records(store) == read_runs(runs)
    stored = stored_runs(store)
    assert [r.run_id for r in stored] == [read_records(d)[0].run_id for d in runs]
    assert stored[0].git_commit == COMMIT and stored[0].commit_source == "environment.json"
    assert stored[0].environment["started_at"] == "2026-03-01T10:00:00+00:00"
    assert stored[0].run_json["run_id"] == stored[0].run_id
    assert stored[0].record_count == len(read_records(runs[0]))


def test_pandas_reads_it_as_load_reads_the_directories(tmp_path):
    pd = pytest.importorskip("pandas")
    runs = [make_run(tmp_path, i) for i in range(2)]
    store = tmp_path / "store.sqlite"
    assert add(store, *runs).returncode == 0
    pd.testing.assert_frame_equal(load_store(store), load(runs))
    pd.testing.assert_frame_equal(load_store(store, raw=True), load(runs, raw=True))
    only = load_store(store, workloads="mnist_dense", frameworks=["torch"])
    assert set(only["workload"]) == {"mnist_dense"} and set(only["framework"]) == {"torch"}
    # No mpbench needed: plain SQL over the tables.
    with sqlite3.connect(store) as con:
        runs_table = pd.read_sql("SELECT run_id, started_at, record_count FROM runs", con)
        bf16 = pd.read_sql(
            "SELECT step_time_median_s FROM records WHERE policy = 'mixed_bfloat16'", con
        )
    assert len(runs_table) == 2 and len(bf16) == 2 * 2 * 2  # runs x frameworks x workloads


def test_adding_a_run_again_keeps_one_copy_and_a_resumed_run_replaces_its_rows(tmp_path):
    directory = make_run(tmp_path, 0)
    store = tmp_path / "store.sqlite"
    assert add(store, directory).returncode == 0
    again = add(store, directory)
    assert again.returncode == 0 and "unchanged" in again.stdout
    with sqlite3.connect(store) as con:
        first_count = con.execute("SELECT count(*) FROM records").fetchone()[0]
    # The run goes on (`--resume`): one more record; adding it replaces the run's rows.
    extra = record("torch", "mnist_dense", "float32", median_ms=2.4, repeat=1,
                   run_id=read_records(directory)[0].run_id)  # fmt: skip
    write_run(directory, [extra])
    resumed = add(store, directory)
    assert resumed.returncode == 0 and "replaced" in resumed.stdout, resumed.stdout
    with sqlite3.connect(store) as con:
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == first_count + 1
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    # A commit said later is written without duplicating anything.
    said = add(store, directory, extra=("--commit", COMMIT, "--commit-time", "2026-03-02"))
    assert said.returncode == 0 and "commit updated" in said.stdout
    assert stored_runs(store)[0].git_commit == COMMIT
    assert stored_runs(store)[0].commit_time == "2026-03-02T00:00:00+00:00"


def test_a_store_of_an_unknown_version_is_refused_in_one_line(tmp_path):
    store = tmp_path / "store.sqlite"
    assert add(store, make_run(tmp_path, 0)).returncode == 0
    with sqlite3.connect(store) as con:
        con.execute("PRAGMA user_version = 99")
    with pytest.raises(InvalidInput, match="store schema version 99"):
        Store.read(store)
    for command in (("history", store), ("store", "list", "--store", store)):
        done = run_mpbench(*command)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "store schema version 99" in done.stderr
        assert "reads version 1" in done.stderr


def test_what_is_not_a_store_is_refused_in_one_line(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("hello")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    for path in (text, other):
        done = run_mpbench("store", "add", make_run(tmp_path, 0), "--store", path)
        assert done.returncode == 2 and "not an mpbench store" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1


def test_a_broken_run_adds_nothing(tmp_path):
    good, bad = make_run(tmp_path, 0), make_run(tmp_path, 1)
    with open(bad / "results.jsonl", "a") as fh:
        fh.write('{"schema_version": 99}\n')
    store = tmp_path / "store.sqlite"
    done = add(store, good, bad)
    assert done.returncode == 2 and "unknown schema version 99" in done.stderr
    assert not store.exists() or not stored_runs(store)  # every run is read before any is added


def test_commit_options(tmp_path):
    store = tmp_path / "store.sqlite"
    bad = add(store, make_run(tmp_path, 0), extra=("--commit", "main"))
    assert bad.returncode == 2 and "7 to 64 hex digits" in bad.stderr
    bad_time = add(store, make_run(tmp_path, 0), extra=("--commit", COMMIT, "--commit-time", "x"))
    assert bad_time.returncode == 2 and "--commit-time 'x'" in bad_time.stderr
    # --commit auto: HEAD of the repository given (a throwaway one here).
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    head = subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True)
    done = add(store, make_run(tmp_path, 1), extra=("--commit", "auto", "--repo", repo))
    assert done.returncode == 0, done.stderr
    run = next(r for r in stored_runs(store) if r.run_id.endswith("aa01"))
    assert run.git_commit == head.stdout.strip() and run.commit_time is not None
    assert run.commit_source.startswith("git rev-parse HEAD")


def test_filters(tmp_path):
    store = tmp_path / "store.sqlite"
    commits = [f"{i:x}" * 40 for i in range(1, 5)]
    runs = [make_run(tmp_path, i, commit=commits[i]) for i in range(4)]
    assert add(store, *runs).returncode == 0
    ids = [r.run_id for r in stored_runs(store)]
    middle = StoreFilter(commits=f"{commits[1][:7]}..{commits[2][:7]}")
    assert [r.run_id for r in stored_runs(store, middle)] == ids[1:3]
    assert [
        r.run_id for r in stored_runs(store, StoreFilter(commits=f"{commits[2][:7]}.."))
    ] == ids[2:]
    since = StoreFilter(since="2026-03-01T10:02:00Z")
    assert [r.run_id for r in stored_runs(store, since)] == ids[2:]
    assert len(stored_runs(store, StoreFilter(until="2026-03-01"))) == 4  # the whole day
    kept = store_records(store, StoreFilter(devices=("epyc",), policies=("float32",)))
    assert kept and all(r.policy == "float32" for r in kept)
    assert store_records(store, StoreFilter(devices=("h200",))) == []
    with pytest.raises(InvalidInput, match="no run of commit"):
        stored_runs(store, StoreFilter(commits="ffff0000.."))


def test_a_kill_mid_transaction_leaves_whole_runs_and_a_second_add_completes_it(tmp_path):
    runs = [make_run(tmp_path, i) for i in range(12)]
    expected = {read_records(d)[0].run_id: len(read_records(d)) for d in runs}
    store = tmp_path / "store.sqlite"
    # Each run's transaction sleeps before its COMMIT (the test-only hook), so once three runs
    # are committed, the process is inside the fourth's transaction, its rows written.
    env = {**os.environ, PAUSE_ENV: "0.4"}
    command = [
        sys.executable,
        "-m",
        "mpbench",
        "store",
        "add",
        *map(str, runs),
        "--store",
        str(store),
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    committed = 0
    while committed < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
        if store.exists():
            try:
                with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as con:
                    committed = con.execute("SELECT count(*) FROM runs").fetchone()[0]
            except sqlite3.OperationalError:
                continue  # the schema is being written
    assert committed >= 3, process.stderr.read() if process.poll() is not None else "too slow"
    time.sleep(0.1)  # well inside the next run's 0.4 s in its transaction
    hot_journal = Path(f"{store}-journal").exists()
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert hot_journal  # it died inside a transaction
    # The store opens (the unfinished transaction rolled back) and holds whole runs only.
    with sqlite3.connect(store) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        counts = dict(con.execute("SELECT run_id, count(*) FROM records GROUP BY run_id"))
        listed = dict(con.execute("SELECT run_id, record_count FROM runs"))
    assert 3 <= len(counts) < len(runs)
    assert counts == listed and all(expected[r] == n for r, n in counts.items())
    # A second add completes it, adding each missing run once.
    done = add(store, *runs)
    assert done.returncode == 0, done.stderr
    assert f"{len(counts)} unchanged" in done.stdout
    assert f"{len(runs) - len(counts)} added" in done.stdout
    assert {r.run_id: r.record_count for r in stored_runs(store)} == expected


def test_a_smaller_copy_never_silently_replaces_a_fuller_one(tmp_path):
    directory = make_run(tmp_path, 0)
    store = tmp_path / "store.sqlite"
    assert add(store, directory).returncode == 0
    run_id = read_records(directory)[0].run_id
    before = {r.run_id: r.record_count for r in stored_runs(store)}
    # One record lost from the run directory (a truncated copy, a bad merge): refused, and
    # nothing of the command is added (another run given beside it neither).
    results = directory / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    results.write_text("".join(lines[:-1]))
    refused = add(store, directory, make_run(tmp_path, 1))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert f"run {run_id} from {directory} lacks 1 of the store's {len(lines)} records (cell " in (
        refused.stderr
    )
    assert "a copy that lacks or changes what the store holds does not replace it" in (
        refused.stderr
    )
    assert "--replace" in refused.stderr and "nothing was added" in refused.stderr
    assert {r.run_id: r.record_count for r in stored_runs(store)} == before
    # Store.add keeps the rule itself, in its transaction.
    with Store.create(store) as db, pytest.raises(InvalidInput, match="lacks 1 of the store's"):
        db.add(read_run_dir(directory)[0])
    # --replace says so, and replaces it.
    replaced = add(store, directory, extra=("--replace",))
    assert replaced.returncode == 0, replaced.stderr
    assert f"replaced {run_id} ({len(lines) - 1} records, had {len(lines)};" in replaced.stdout
    assert stored_runs(store)[0].record_count == len(lines) - 1


def test_a_copy_that_changes_or_lacks_what_is_stored_never_silently_replaces_it(tmp_path):
    """Issue 55: only a fuller copy (every stored record unchanged, the stored
    environment.json and run.json present) replaces a stored run without --replace."""
    directory = make_run(tmp_path, 0)
    store = tmp_path / "store.sqlite"
    assert add(store, directory).returncode == 0
    run_id = read_records(directory)[0].run_id
    stored = store_records(store)
    tail = (
        ": a copy that lacks or changes what the store holds does not replace it; add it with "
        "--replace to replace the stored copy anyway; nothing was added\n"
    )

    def refused(copy: Path, what: str) -> None:
        done = add(store, copy)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr == f"mpbench: error: {store}: run {run_id} from {copy} {what}{tail}"
        assert store_records(store) == stored and stored_runs(store)[0].run_json is not None

    # Its run.json moved aside, as the message for a damaged run.json advises.
    aside = tmp_path / "aside"
    make_run(aside, 0)
    (aside / "run-00" / "run.json").rename(aside / "run.json.damaged")
    refused(aside / "run-00", "lacks the run.json the store holds")
    # One record's median doubled (the other fields as they were): compare refuses it too.
    edited = make_run(tmp_path / "edited", 0)
    results = edited / "results.jsonl"
    lines = results.read_text().splitlines()
    first = json.loads(lines[0])
    first["step_time"]["median_s"] *= 2
    results.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    refused(
        edited,
        f"changes its record of cell {first['cell_id']} repeat {first['repeat']} (it differs "
        "in step_time)",
    )
    # Its environment.json gone.
    bare = make_run(tmp_path / "bare", 0)
    (bare / "environment.json").unlink()
    refused(bare, "lacks the environment.json the store holds")
    # Store.add itself keeps the rule (the fleet's driver adds through it too).
    with Store.create(store) as db, pytest.raises(InvalidInput, match="changes its record"):
        db.add(read_run_dir(edited)[0])
    assert store_records(store) == stored
    # A fuller copy replaces it unasked: a record more, and run.json rewritten (a resume).
    fuller = make_run(tmp_path / "fuller", 0)
    extra = record("torch", "mnist_dense", "float32", median_ms=2.4, repeat=1, run_id=run_id)
    write_run(fuller, [extra])
    (fuller / "run.json").write_text(json.dumps({"run_id": run_id, "finished": True}))
    done = add(store, fuller)
    assert done.returncode == 0 and f"replaced {run_id} ({len(lines) + 1} records, had " in (
        done.stdout
    ), done.stderr
    # --replace replaces it with the edited copy anyway, and says so.
    done = add(store, edited, extra=("--replace",))
    assert done.returncode == 0, done.stderr
    assert f"replaced {run_id} ({len(lines)} records, had {len(lines) + 1};" in done.stdout
    assert store_records(store) == read_runs([edited])


def test_store_remove_removes_runs_in_one_transaction(tmp_path):
    runs = [make_run(tmp_path, i) for i in range(3)]
    ids = [read_records(d)[0].run_id for d in runs]
    store = tmp_path / "store.sqlite"
    assert add(store, *runs).returncode == 0
    # An id the store does not hold: nothing removed, not even the ids it holds.
    unknown = run_mpbench("store", "remove", ids[0], "20990101-000000-zzzz", "--store", store)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1, unknown.stderr
    assert "no run '20990101-000000-zzzz' in the store" in unknown.stderr
    assert (
        f"its runs: {', '.join(ids)}" in unknown.stderr and "nothing was removed" in unknown.stderr
    )
    assert [r.run_id for r in stored_runs(store)] == ids
    done = run_mpbench("store", "remove", ids[2], ids[0], "--store", store)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:-1]] == [["removed", ids[0]], ["removed", ids[2]]]
    assert lines[-1] == f"{store}: 2 removed"
    assert [r.run_id for r in stored_runs(store)] == [ids[1]]
    with sqlite3.connect(store) as con:  # its records went with it
        assert {r for (r,) in con.execute("SELECT DISTINCT run_id FROM records")} == {ids[1]}
    missing = run_mpbench("store", "remove", ids[1], "--store", tmp_path / "none.sqlite")
    assert missing.returncode == 2 and "no such store" in missing.stderr
