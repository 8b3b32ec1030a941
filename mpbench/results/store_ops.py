"""What can be done to a store, whole: add runs (or replace them), list them, remove them.

One place for each operation, which `mpbench store` (history/store_cli.py) and the fleet's
driver (fleet/driver.py, adding each machine's run as it finishes) both call; the commands
only parse and print. The store's own rules (a run is its run id; a copy that would lose
what the store holds is refused unless replaced on purpose; every fault one line) are
results/store.py's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from mpbench.results.commits import attach_commits, check_commit
from mpbench.results.store import AddResult, RunSource, Store, StoredRun, read_run_dir


def add_runs(
    run_dirs: Sequence[Path],
    store: Path,
    commit: str | None = None,
    commit_time: str | None = None,
    repo: Path | None = None,
    replace: bool = False,
) -> Iterator[tuple[RunSource, AddResult]]:
    """Add runs to the store (made where missing): every run read and checked first, its
    commit attached, then each added in its own transaction (none where a copy would lose
    what the store holds and not `replace`: Store.add's rule), yielded as it is added, so a
    fault later leaves what was said true. InvalidInput, one line, for a bad run or store."""
    if commit is not None:
        check_commit(commit)
    runs = [run for path in run_dirs for run in read_run_dir(path)]  # all checked first
    attach_commits(runs, commit, commit_time, repo)
    with Store.create(store) as db:
        db.check_replacements(runs, replace=replace)  # a poorer copy: nothing is added
        for run in runs:
            yield run, db.add(run, replace=replace)


def list_runs(store: Path) -> list[StoredRun]:
    """The store's runs in history's order, once SQLite has checked the file (PRAGMA
    quick_check): a damaged store is one line, InvalidInput."""
    with Store.read(store) as db:
        db.check_integrity()
        return db.runs()


def remove_runs(store: Path, run_ids: Sequence[str]) -> list[StoredRun]:
    """Remove these runs in one transaction; the runs removed, in history's order. An id
    the store does not hold removes nothing (InvalidInput naming a few it holds)."""
    with Store.read(store) as db:
        return db.remove(run_ids)
