"""Every fault of a store (mpbench/results/store.py; docs/history.md, "When the store
fails"): one line on stderr that names the file and says what to do, and exit 2, never a
traceback nor exit 1 (which CI reads as "a regression"); the runs stored before stay whole.
Real SQLite files and real faults: pages overwritten, a read-only file or folder, a file size
limit, a lock held."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import pty
import resource
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
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


@pytest.mark.parametrize("overwritten", [16, 100])
def test_a_store_with_a_damaged_header_is_said_to_be_one(tmp_path, overwritten):
    """Issue 55: SQLite's magic overwritten, compare and history read the store as a results
    file (`line 1: not valid JSON`), and `store list` said "not an mpbench store". The
    first 16 bytes (the magic), or the whole 100-byte header (the application id too: the
    schema on the first page still says what the file is)."""
    store = stored(tmp_path)
    with open(store, "r+b") as fh:
        fh.write(b"x" * overwritten)
    before = digest(store)
    said = (
        f"mpbench: error: {store} is not a readable mpbench store (damaged header?); restore "
        "it from a copy (a CI cache or branch), or move it aside and add the runs again with "
        "'mpbench store add'\n"
    )
    for command in (
        ("compare", store),
        ("history", store),
        ("compare", make_run(tmp_path, 5), "--baseline", store),
        ("store", "list", "--store", store),
        ("store", "add", make_run(tmp_path, 5), "--store", store),
    ):
        done = run_mpbench(*command)
        assert (done.returncode, done.stderr) == (2, said), command
    assert digest(store) == before  # nothing wrote over it


def test_a_results_file_that_is_not_json_is_still_said_as_one(tmp_path):
    """Text is never taken for a damaged store: a results file's bad line is quoted."""
    text = tmp_path / "results.jsonl"
    text.write_text("CREATE TABLE records (\n")
    done = run_mpbench("compare", text)
    assert done.returncode == 2
    assert done.stderr == f"mpbench: error: {text} line 1: not valid JSON (Expecting value)\n"


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

# Another program holding the store's write lock: python's sqlite3 in a process of its own,
# inside BEGIN EXCLUSIVE (readers too must wait), until its stdin closes.
_HOLDER = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
sys.stdin.read()
connection.execute("ROLLBACK")
"""


@contextlib.contextmanager
def lock_held(store: Path) -> Iterator[subprocess.Popen]:
    """The store locked by another process for the block's time."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder
    finally:
        release(holder)


def release(holder: subprocess.Popen) -> None:
    if holder.poll() is None:
        holder.stdin.close()
        holder.wait(timeout=30)


def waiting(store: Path, limit: str) -> str:
    """The line a command says on stderr, out of a terminal, while it waits for the lock."""
    return (
        f"waiting for the store's lock, held by another process ({store}; giving up after "
        f"{limit})...\n"
    )


def locked(store: Path, waited: str) -> str:
    return (
        f"mpbench: error: the store {store} is locked: another process holds it (an mpbench "
        f"store add, or any program writing to it); gave up after waiting {waited}; try again "
        "when it is done\n"
    )


def test_a_store_locked_past_the_wait_says_so_once_and_waits_no_longer(tmp_path):
    """Issue 55: readers waited 121 s and said "waited 60 s", every command named "another
    mpbench store add" as the holder, and nothing was said while waiting. A reader opened the
    file twice (read-write, then read-only), each open waiting the whole limit."""
    store = stored(tmp_path, runs=1)
    limit = 3.0
    with lock_held(store):
        for command in (
            ("store", "list", "--store", store),
            ("history", store),
            ("compare", store),
            ("store", "add", make_run(tmp_path, 1), "--store", store),
            ("store", "remove", "20260301-100000-aa00", "--store", store),
        ):
            start = time.monotonic()
            done = run_mpbench(*command, env={BUSY_ENV: str(limit)})
            took = time.monotonic() - start
            assert done.returncode == 2, (command, done.stderr)
            assert done.stderr == waiting(store, "3.0 s") + locked(store, "3.0 s"), command
            # One wait of the stated limit, not two in sequence (issue 55: 2 x 60 s).
            assert limit <= took < 2 * limit, (command, took)
    assert listed(store) == ["20260301-100000-aa00"]
    assert add(store, make_run(tmp_path, 1)).returncode == 0


def test_a_store_add_inside_its_transaction_blocks_no_reader(tmp_path):
    store = stored(tmp_path, runs=1)
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another `store add`, inside its transaction
    try:
        done = run_mpbench("store", "list", "--store", store, env={BUSY_ENV: "1"})
        assert done.returncode == 0 and done.stderr == "", done.stderr
        adding = ("store", "add", make_run(tmp_path, 1), "--store", store)
        refused(
            run_mpbench(*adding, env={BUSY_ENV: "0.5"}),
            f"the store {store} is locked: another process holds it",
            "gave up after waiting 0.5 s",
        )
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_command_that_gets_the_lock_in_time_says_it_waited_and_goes_on(tmp_path):
    """Out of a terminal, the notice is one plain line, left where it was said."""
    store = stored(tmp_path, runs=1)
    with lock_held(store) as holder:
        reader = subprocess.Popen(
            [sys.executable, "-m", "mpbench", "store", "list", "--store", str(store)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, BUSY_ENV: "60"},
        )
        try:
            assert reader.stderr.readline() == waiting(store, "60 s")
            release(holder)  # the lock goes while the reader waits for it
            out, err = reader.communicate(timeout=60)
        finally:
            if reader.poll() is None:
                reader.kill()
    assert reader.returncode == 0, err
    assert err == "" and out.endswith("1 run, integrity ok (quick_check)\n")


def test_on_a_terminal_the_notice_counts_the_seconds_and_goes(tmp_path):
    """On a terminal, as the run's progress does, one line redrawn in place, erased once
    the lock is taken: what the command prints next starts on a clean line."""
    store = stored(tmp_path, runs=1)
    primary, secondary = pty.openpty()
    with lock_held(store) as holder:
        reader = subprocess.Popen(
            [sys.executable, "-m", "mpbench", "store", "list", "--store", str(store)],
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            env={**os.environ, BUSY_ENV: "60"},
        )
        os.close(secondary)
        try:
            said = _read_until(primary, b" 2 s\x1b[K")
            release(holder)
            said += _read_until(primary, b"(quick_check)")
            assert reader.wait(timeout=60) == 0
        finally:
            if reader.poll() is None:
                reader.kill()
            os.close(primary)
    text = said.decode()
    notice = waiting(store, "60 s").rstrip("\n")
    assert text.startswith(f"\r{notice} 1 s\x1b[K\r{notice} 2 s\x1b[K"), text
    erased = text.index("\r\x1b[K")
    assert text[erased + 4 :].startswith("20260301-100000-aa00 "), text


def _read_until(fd: int, end: bytes, timeout: float = 60) -> bytes:
    """What a terminal showed, up to and with `end`."""
    got = b""
    deadline = time.monotonic() + timeout
    while end not in got:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, got
        got += os.read(fd, 4096)
    return got
