"""`compare()` in this process, the committed fixtures, and what a plot drew (the command
itself runs through cli.py)."""

from __future__ import annotations

import io
from pathlib import Path

from mpbench.compare import CompareOptions, compare

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"


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
