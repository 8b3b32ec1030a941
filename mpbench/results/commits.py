"""Which commit a run measured, and when that commit was made: said, read, or asked of git.

Explicit by design: a run's commit is what `--commit SHA` says, else what its environment.json
recorded (`mpbench run` writes `git rev-parse HEAD` of the directory it ran in), else unknown;
git is asked for HEAD only with `--commit auto`. The commit's time orders history: it comes
from `--commit-time`, else environment.json's `git_commit_time` where a run wrote one, else
`git show` in the repository (`--repo`, default the current directory), else it is unknown and
the run sits at its start time.

Used by `mpbench store add` and by results/sources.py, which reads run directories as a store.
"""

from __future__ import annotations

import re
from pathlib import Path

from mpbench.errors import InvalidInput
from mpbench.git import git
from mpbench.results.store import RunSource, iso_utc, parse_time

AUTO = "auto"
_HEX = re.compile(r"^[0-9a-fA-F]{7,64}$")


def head_commit(repo: Path) -> str:
    commit = git(repo, "rev-parse", "--verify", "HEAD")
    if commit is None:
        raise InvalidInput(f"--commit auto: {repo} is not in a git repository with a commit")
    return commit


def full_commit(commit: str, repo: Path) -> str:
    """A commit as given, lengthened to its full id where the repository knows it."""
    return git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}") or commit


def commit_time(commit: str, repo: Path) -> str | None:
    """The commit's committer date (UTC), None where the repository does not have it."""
    found = git(repo, "show", "-s", "--format=%cI", commit)
    try:
        return iso_utc(found) if found else None
    except ValueError:
        return None


def check_commit(text: str) -> str:
    if text != AUTO and not _HEX.match(text):
        raise InvalidInput(
            f"--commit {text!r}: a commit id (7 to 64 hex digits) or 'auto' (git rev-parse "
            "HEAD in --repo)"
        )
    return text


def attach_commits(
    runs: list[RunSource],
    commit: str | None = None,
    when: str | None = None,
    repo: Path | None = None,
    ask_git: bool = True,
) -> None:
    """Set each run's commit, its time and where the commit came from (module rules).
    `ask_git=False`: only what was said or recorded (compare, which orders runs by their
    recorded times and must not depend on the directory it runs in)."""
    where = repo or Path.cwd()
    given = None
    if commit is not None:
        check_commit(commit)
        given = head_commit(where) if commit == AUTO else full_commit(commit, where)
    given_time = parse_time("--commit-time", when) if when is not None else None
    if given_time is not None and given is None and any(_recorded(r) is None for r in runs):
        raise InvalidInput("--commit-time needs --commit, or runs whose environment.json names one")
    for run in runs:
        if given is not None:
            run.git_commit = given
            run.commit_source = f"git rev-parse HEAD in {where}" if commit == AUTO else "--commit"
        else:
            run.git_commit = _recorded(run)
            run.commit_source = "environment.json" if run.git_commit else None
        if run.git_commit is None:
            continue
        recorded_time = (run.environment or {}).get("git_commit_time")
        if given_time is not None:
            run.commit_time = given_time
        elif given is None and isinstance(recorded_time, str):
            run.commit_time = parse_time("environment.json git_commit_time", recorded_time)
        elif ask_git:
            run.commit_time = commit_time(run.git_commit, where)


def _recorded(run: RunSource) -> str | None:
    value = (run.environment or {}).get("git_commit")
    return value if isinstance(value, str) and _HEX.match(value) else None
