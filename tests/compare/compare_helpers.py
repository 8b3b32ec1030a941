"""Running `mpbench compare` in tests: in this process (fast) or as a real subprocess."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from forked import run_mpbench

from mpbench.compare import CompareOptions, compare

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPO = HERE.parents[1]


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


def run_cli(*args: object, cwd: Path | None = None, env: dict | None = None) -> Outcome:
    """`mpbench compare ARGS` in a process of its own, as CI would run it (forked.py)."""
    done = run_mpbench(
        ["compare", *args],
        env=env,
        cwd=cwd or REPO,
        timeout=120,
        unset=("GITHUB_STEP_SUMMARY",),
    )
    return Outcome(done.returncode, done.stdout, done.stderr)


def run_inprocess(*paths: Path, **options: object) -> tuple[int, str]:
    """compare() in this process; returns (exit code, what it printed)."""
    out = io.StringIO()
    opts = CompareOptions(paths=list(paths), **options)
    return compare(opts, stdout=out), out.getvalue()


def whiskers(ax) -> dict[float, tuple[float, float]]:
    """x -> (low, high) of every error bar drawn in `ax`."""
    from matplotlib.container import ErrorbarContainer

    out = {}
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            (segment,) = container.lines[2][0].get_segments()
            (x, low), (_, high) = segment
            out[round(float(x), 6)] = (float(low), float(high))
    return out
