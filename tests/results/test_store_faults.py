"""Every fault of a store (mpbench/results/store.py; docs/history.md, "When the store
fails"): one line on stderr that names the file and says what to do, and exit 2, never a
traceback nor exit 1 (which CI reads as "a regression"); the runs stored before stay whole.
Real SQLite files and real faults: pages overwritten, a read-only file or folder, a file size
limit, a lock held."""

from __future__ import annotations

import ctypes
import hashlib
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli import run_mpbench
from test_store import add, make_run

from mpbench.errors import InvalidInput
from mpbench.results.store import BUSY_ENV, Store, read_run_dir, stored_runs


def stored(tmp_path: Path, runs: int = 2) -> Path:
    """A store holding `runs` runs (of make_run), added by `mpbench store add`."""
    store = tmp_path / "store.sqlite"
    done = add(store, *(make_run(tmp_path, i) for i in range(runs)))
    assert done.returncode == 0, done.stderr
    return store


def refused(done: subprocess.CompletedProcess, *phrases: str) -> str:
    """The command failed as a fault must: exit 2, one line on stderr saying every phrase."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.startswith("mpbench: error: ") and done.stderr.count("\n") == 1, done.stderr
    for phrase in phrases:
        assert phrase in done.stderr, (phrase, done.stderr)
    return done.stderr


def listed(store: Path) -> list[str]:
    """`mpbench store list`, which must pass: the run ids it lists, in its order."""
    done = run_mpbench("store", "list", "--store", store)
    assert done.returncode == 0, done.stderr
    *lines, last = done.stdout.splitlines()
    runs = f"{len(lines)} run" + ("" if len(lines) == 1 else "s")
    assert last == f"{store}: {runs}, integrity ok (quick_check)"
    return [line.split()[0] for line in lines]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def page_size(store: Path) -> int:
    with sqlite3.connect(store) as con:
        return con.execute("PRAGMA page_size").fetchone()[0]


# --- damaged ---------------------------------------------------------------------------------


def test_a_damaged_store_is_one_line_for_every_command_that_reads_or_writes_it(tmp_path):
    store = stored(tmp_path)
    # SQLite's header and schema (page 1) intact, every page after it garbage.
    size, first = store.stat().st_size, page_size(store)
    with open(store, "r+b") as fh:
        fh.seek(first)
        fh.write(bytes((i * 37 + 11) % 256 for i in range(size - first)))
    damaged = f"the store {store} is damaged (database disk image is malformed)"
    for command in (
        ("store", "list", "--store", store),
        ("history", store),
        ("compare", store),
        ("store", "add", make_run(tmp_path, 5), "--store", store),
        ("store", "remove", "20260301-100000-aa00", "--store", store),
    ):
        refused(run_mpbench(*command), damaged, "restore it from a copy")


@pytest.mark.parametrize(
    ("garbage", "said"),
    [(b"xxxxxxxxx", ": not JSON, "), (b"\xff" * 9, "text that is not UTF-8")],
)
def test_a_record_damaged_in_place_is_one_line(tmp_path, garbage, said):
    """Garbage inside a record's text: every page's structure intact (quick_check passes),
    and the record no longer JSON, or no longer text."""
    store = stored(tmp_path, runs=1)
    data = bytearray(store.read_bytes())
    start = data.index(b'"cell_id": "')  # the first record's, in the records table
    data[start : start + len(garbage)] = garbage
    store.write_bytes(bytes(data))
    refused(run_mpbench("history", store), f"the store {store} is damaged (", said)


def test_store_list_checks_the_file_and_says_so(tmp_path):
    store = stored(tmp_path)
    assert listed(store) == [r.run_id for r in stored_runs(store)]


def test_store_list_says_what_quick_check_found(tmp_path):
    store = stored(tmp_path, runs=1)
    # One index page's cell pointers zeroed: the runs and records still read, but the file is
    # damaged, and only a check of every page finds it.
    with sqlite3.connect(store) as con:
        (root,) = con.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'records_by_cell'"
        ).fetchone()
    with open(store, "r+b") as fh:
        fh.seek((root - 1) * page_size(store) + 8)  # a leaf page's cell pointer array
        fh.write(bytes(16))
    assert len(stored_runs(store)) == 1
    said = refused(
        run_mpbench("store", "list", "--store", store),
        f"the store {store} is damaged (quick_check: On tree page {root} cell",
        "more)",  # the first lines of what it found, and how many more
        "restore it from a copy",
    )
    assert said.count("On tree page") == 3


# --- read-only -------------------------------------------------------------------------------

_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def _as_an_ordinary_user() -> None:
    """In the child, before exec: root keeps no power to write past a file's mode (its
    capabilities to override permissions leave the bounding set, so the exec'd command never
    has them). Anyone else is an ordinary user already."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def mpbench_process(*args: object, preexec) -> subprocess.CompletedProcess[str]:
    """The mpbench command in a new process, `preexec` run in it before the exec."""
    return subprocess.run(
        [sys.executable, "-m", "mpbench", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=preexec,
    )


def _writable_to_a_user(path: Path) -> bool:
    """Whether an ordinary user may still write the file (or make one in the folder)."""
    target = path / "probe" if path.is_dir() else path
    try:
        probe = subprocess.run(
            [sys.executable, "-c", f"open({str(target)!r}, 'ab').close()"],
            capture_output=True,
            preexec_fn=_as_an_ordinary_user,
        )
    except subprocess.SubprocessError:  # a root that may not drop its capabilities
        return True
    if path.is_dir() and target.exists():
        target.unlink()
    return probe.returncode == 0


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_store_is_one_line_and_left_as_it_was(tmp_path, what):
    folder = tmp_path / "stores"
    folder.mkdir()
    store = stored(folder)
    before, runs = digest(store), stored_runs(store)
    locked = store if what == "file" else folder
    locked.chmod(0o444 if what == "file" else 0o555)
    try:
        if _writable_to_a_user(locked):
            pytest.skip("this user writes past a file's mode (a root that keeps its powers)")
        for command in (
            ("store", "add", make_run(tmp_path, 7), "--store", store),
            ("store", "remove", runs[0].run_id, "--store", store),
        ):
            refused(
                mpbench_process(*command, preexec=_as_an_ordinary_user),
                f"cannot write the store {store} (",
                "it is read-only (attempt to write a readonly database), nothing was changed",
            )
        assert digest(store) == before and not Path(f"{store}-journal").exists()
    finally:
        locked.chmod(0o644 if what == "file" else 0o755)
    assert listed(store) == [r.run_id for r in runs]


# --- a full disk -----------------------------------------------------------------------------


def _file_size_limit(limit: int):
    def preexec() -> None:
        # A write past the limit fails with EFBIG instead of killing the process (SIGXFSZ):
        # what SQLite meets on a full disk, short of filling one.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


def test_a_full_disk_mid_transaction_is_one_line_and_the_store_stays_whole(tmp_path):
    store = stored(tmp_path, runs=1)
    before = digest(store)
    # Below the store's size: the rollback journal cannot hold the pages the new run changes,
    # so the write fails inside the transaction, and SQLite rolls it back itself (a ROLLBACK
    # after that said "cannot rollback - no transaction is active", a second error).
    done = mpbench_process(
        "store", "add", make_run(tmp_path, 1), "--store", store, preexec=_file_size_limit(8192)
    )
    said = refused(
        done,
        f"cannot write the store {store} (adding run 20260301-100100-aa01): disk I/O error",
        "the store is as it was before this change",
    )
    assert "rollback" not in said
    assert digest(store) == before
    assert listed(store) == ["20260301-100000-aa00"]


def test_a_disk_that_fills_at_a_commit_keeps_the_runs_added_before(tmp_path):
    store = stored(tmp_path, runs=1)
    # The size the store has with one more run: a limit just past it lets that run in, and
    # the next one's COMMIT cannot grow the file.
    reference = tmp_path / "reference.sqlite"
    shutil.copy(store, reference)
    assert add(reference, make_run(tmp_path, 1)).returncode == 0
    limit = reference.stat().st_size + 1000
    done = mpbench_process(
        "store",
        "add",
        *(make_run(tmp_path, i) for i in (1, 2, 3)),
        "--store",
        store,
        preexec=_file_size_limit(limit),
    )
    assert done.stdout.startswith("added 20260301-100100-aa01 ")
    refused(
        done,
        f"cannot write the store {store} (adding run 20260301-100200-aa02): disk I/O error",
        "free space, then run the command again",
    )
    assert listed(store) == ["20260301-100000-aa00", "20260301-100100-aa01"]
    assert [r.record_count for r in stored_runs(store)] == [16, 16]
    # With room again, the same command completes it.
    assert "2 added" in add(store, *(make_run(tmp_path, i) for i in (1, 2, 3))).stdout


def test_sqlite_full_is_said_as_a_full_disk_and_rolled_back_once(tmp_path):
    """SQLITE_FULL itself, which SQLite raises where ENOSPC meets it: here from a page
    limit on the connection (PRAGMA max_page_count), in process."""
    store = stored(tmp_path, runs=1)
    with Store.create(store) as db:
        pages = db._db.execute("PRAGMA page_count").fetchone()[0]
        db._db.execute(f"PRAGMA max_page_count = {pages + 1}")
        with pytest.raises(InvalidInput, match=r"its disk is full \(database or disk is full"):
            db.add(read_run_dir(make_run(tmp_path, 1))[0])
        assert not db._db.in_transaction
    assert listed(store) == ["20260301-100000-aa00"]


# --- locked ----------------------------------------------------------------------------------


def test_a_store_locked_past_the_timeout_is_one_line(tmp_path):
    store = stored(tmp_path, runs=1)
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another `store add`, inside its transaction
    try:
        for command in (
            ("store", "add", make_run(tmp_path, 1), "--store", store),
            ("store", "remove", "20260301-100000-aa00", "--store", store),
        ):
            start = time.monotonic()
            refused(
                run_mpbench(*command, env={BUSY_ENV: "1"}),
                f"the store {store} is locked by another mpbench store add (waited 1 s); "
                "try again when it finishes",
            )
            assert time.monotonic() - start < 30
        # Readers are not writers: a store being written to still lists.
        assert listed(store) == ["20260301-100000-aa00"]
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert add(store, make_run(tmp_path, 1)).returncode == 0
