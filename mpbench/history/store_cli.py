"""The `mpbench store` commands (registered in mpbench/cli.py): add, list, remove.

Parses, validates, delegates: the store itself is results/store.py, which also says every
fault of the store (damaged, read-only, locked, a full disk) in one line, exit 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mpbench.history import DEFAULT_STORE

if TYPE_CHECKING:
    from mpbench.results.store import AddResult, RunSource, StoredRun

store_app = typer.Typer(
    name="store",
    help="Keep runs of many commits and machines in one SQLite file (docs/history.md).",
    no_args_is_help=True,
    add_completion=False,
)


@store_app.command("add")
def store_add(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories (or results.jsonl files)."),
    store: Path = typer.Option(
        DEFAULT_STORE, "--store", help="The store's file (made if missing)."
    ),
    commit: str | None = typer.Option(
        None,
        "--commit",
        help="The commit the runs measured: a commit id, or 'auto' for git rev-parse HEAD in "
        "--repo. Default: what each run's environment.json recorded.",
    ),
    commit_time: str | None = typer.Option(
        None,
        "--commit-time",
        help="That commit's time, ISO 8601 (default: asked of git in --repo).",
    ),
    repo: Path | None = typer.Option(
        None, "--repo", help="The git repository commits are looked up in (default: here)."
    ),
    replace: bool = typer.Option(
        False,
        "--replace",
        help="Replace a stored run even with a copy that lacks or changes some of what the "
        "store holds of it: a record, its environment.json or run.json (refused without).",
    ),
) -> None:
    """Add runs to the store, each in one transaction.

    Adding a run again changes nothing, a fuller copy of it (resumed: every stored record
    unchanged, and more) replaces the stored one, and a copy that lacks or changes what the
    store holds (a record lost or edited, run.json moved aside) is refused unless --replace."""
    counts: dict[str, int] = {}
    for run, result in add_runs(run_dirs, store, commit, commit_time, repo, replace):
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
        what = f"{result.outcome} {run.run_id} ({result.records} records"
        if result.before is not None:
            what += f", had {result.before}"
        what += f"; commit {run.git_commit[:12]}" if run.git_commit else "; commit unknown"
        what += f" at {run.commit_time}" if run.commit_time else ""
        typer.echo(what + ")")
    summary = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    typer.echo(f"{store}: {summary}")


def add_runs(
    run_dirs: list[Path],
    store: Path,
    commit: str | None = None,
    commit_time: str | None = None,
    repo: Path | None = None,
    replace: bool = False,
) -> Iterator[tuple[RunSource, AddResult]]:
    """`store add`'s work, for it and the fleet's driver: every run read and checked first,
    its commit attached, then each added in its own transaction (none where a copy would
    lose what the store holds: Store.add's rule), yielded as it is added, so a fault later
    leaves what was said true. InvalidInput, one line, for a bad run or store."""
    from mpbench.results.commits import attach_commits, check_commit
    from mpbench.results.store import Store, read_run_dir

    if commit is not None:
        check_commit(commit)
    runs = [run for path in run_dirs for run in read_run_dir(path)]  # all checked first
    attach_commits(runs, commit, commit_time, repo)
    with Store.create(store) as db:
        db.check_replacements(runs, replace=replace)  # a poorer copy: nothing is added
        for run in runs:
            yield run, db.add(run, replace=replace)


@store_app.command("list")
def store_list(
    store: Path = typer.Option(DEFAULT_STORE, "--store", help="The store's file."),
) -> None:
    """The store's runs, in history's order, and SQLite's check of the file.

    History's order: commit time, else the run's start. The file is checked first (PRAGMA
    quick_check): a damaged store is one line and exit 2."""
    from mpbench.results.store import Store

    with Store.read(store) as db:
        db.check_integrity()
        runs = db.runs()
    for run in runs:
        typer.echo(_run_line(run))
    count = f"{len(runs)} run" + ("" if len(runs) == 1 else "s")
    typer.echo(f"{store}: {count}, integrity ok (quick_check)")


@store_app.command("remove")
def store_remove(
    run_ids: list[str] = typer.Argument(..., help="Run ids, as 'mpbench store list' shows."),
    store: Path = typer.Option(DEFAULT_STORE, "--store", help="The store's file."),
) -> None:
    """Remove runs from the store, in one transaction.

    A run id the store does not hold removes nothing."""
    from mpbench.results.store import Store

    with Store.read(store) as db:
        removed = db.remove(run_ids)
    for run in removed:
        typer.echo(f"removed {_run_line(run)}")
    typer.echo(f"{store}: {len(removed)} removed")


def _run_line(run: StoredRun) -> str:
    commit = run.short_commit or "-"
    return (
        f"{run.run_id}  {commit:8}  {run.when[:19]:19}  {run.record_count:4} records  {run.devices}"
    )
