"""The `mpbench store` commands (registered in mpbench/cli.py): add, list, remove.

Parses, validates, delegates: what each command does to the store is results/store_ops.py
(which the fleet's driver calls too), the store itself results/store.py, which also says
every fault of the store (damaged, read-only, locked, a full disk) in one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mpbench.options import STORE, Option, takes

if TYPE_CHECKING:
    from mpbench.results.store import StoredRun

store_app = typer.Typer(
    name="store",
    help="Keep runs of many commits and machines in one SQLite file (docs/history.md).",
    no_args_is_help=True,
    add_completion=False,
)


# Each command's options (mpbench/options.py's model; --store is declared there, once).
ADD_OPTIONS: tuple[Option, ...] = (
    Option("run_dirs", (), "Run directories (or results.jsonl files).", list[Path], ...),
    STORE.but(help="The store's file (made if missing)."),
    Option(
        "commit",
        ("--commit",),
        "The commit the runs measured: a commit id, or 'auto' for git rev-parse HEAD in "
        "--repo. Default: what each run's environment.json recorded.",
    ),
    Option(
        "commit_time",
        ("--commit-time",),
        "That commit's time, ISO 8601 (default: asked of git in --repo).",
    ),
    Option(
        "repo",
        ("--repo",),
        "The git repository commits are looked up in (default: here).",
        kind=Path,
    ),
    Option(
        "replace",
        ("--replace",),
        "Replace a stored run even with a copy that lacks or changes some of what the store "
        "holds of it: a record, its environment.json or run.json (refused without).",
        kind=bool,
        default=False,
    ),
)
LIST_OPTIONS: tuple[Option, ...] = (STORE,)
REMOVE_OPTIONS: tuple[Option, ...] = (
    Option("run_ids", (), "Run ids, as 'mpbench store list' shows.", list[str], ...),
    STORE,
)


@store_app.command("add")
@takes(ADD_OPTIONS)
def store_add(
    run_dirs: list[Path],
    store: Path,
    commit: str | None,
    commit_time: str | None,
    repo: Path | None,
    replace: bool,
) -> None:
    """Add runs to the store, each in one transaction.

    Adding a run again changes nothing, a fuller copy of it (resumed: every stored record
    unchanged, and more) replaces the stored one, and a copy that lacks or changes what the
    store holds (a record lost or edited, run.json moved aside) is refused unless --replace."""
    from mpbench.results.store_ops import add_runs

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


@store_app.command("list")
@takes(LIST_OPTIONS)
def store_list(store: Path) -> None:
    """The store's runs, in history's order, and SQLite's check of the file.

    History's order: commit time, else the run's start. The file is checked first (PRAGMA
    quick_check): a damaged store is one line and exit 2."""
    from mpbench.results.store_ops import list_runs

    runs = list_runs(store)
    for run in runs:
        typer.echo(_run_line(run))
    count = f"{len(runs)} run" + ("" if len(runs) == 1 else "s")
    typer.echo(f"{store}: {count}, integrity ok (quick_check)")


@store_app.command("remove")
@takes(REMOVE_OPTIONS)
def store_remove(run_ids: list[str], store: Path) -> None:
    """Remove runs from the store, in one transaction.

    A run id the store does not hold removes nothing."""
    from mpbench.results.store_ops import remove_runs

    removed = remove_runs(store, run_ids)
    for run in removed:
        typer.echo(f"removed {_run_line(run)}")
    typer.echo(f"{store}: {len(removed)} removed")


def _run_line(run: StoredRun) -> str:
    commit = run.short_commit or "-"
    return (
        f"{run.run_id}  {commit:8}  {run.when[:19]:19}  {run.record_count:4} records  {run.devices}"
    )
