"""The `mpbench store` commands (registered in mpbench/cli.py): add, list.

Parses, validates, delegates: the store itself is results/store.py.
"""

from __future__ import annotations

from pathlib import Path

import typer

from mpbench.history import DEFAULT_STORE

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
) -> None:
    """Add runs to the store: each in one transaction; adding a run again changes nothing,
    and a run whose records changed since (resumed) replaces its copy."""
    from mpbench.results.commits import attach_commits, check_commit
    from mpbench.results.store import Store, read_run_dir

    if commit is not None:
        check_commit(commit)
    runs = [run for path in run_dirs for run in read_run_dir(path)]  # all checked first
    attach_commits(runs, commit, commit_time, repo)
    counts: dict[str, int] = {}
    with Store.create(store) as db:
        for run in runs:
            result = db.add(run)
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
def store_list(
    store: Path = typer.Option(DEFAULT_STORE, "--store", help="The store's file."),
) -> None:
    """The store's runs, in history's order (commit time, else the run's start)."""
    from mpbench.results.store import stored_runs

    for run in stored_runs(store):
        commit = run.short_commit or "-"
        typer.echo(
            f"{run.run_id}  {commit:8}  {run.when[:19]:19}  {run.record_count:4} records  "
            f"{run.devices}"
        )
