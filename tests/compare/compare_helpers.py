"""Running `mpbench compare` in tests: in this process (fast) or as a real subprocess."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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
    """`python -m mpbench compare ARGS` in a child process, as CI would run it."""
    full_env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    full_env.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "mpbench", "compare", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env=full_env,
        timeout=120,
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
