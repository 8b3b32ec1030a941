"""What `mpbench history` was asked to do: HistoryOptions, a field per entry of its option table
(mpbench/result_options.py's HISTORY_OPTIONS), which cli.py builds the command from and fills
it through. Which records to read are SourceChoice's fields, shared with compare; the output
options are compare's too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mpbench.results.sources import SourceChoice


@dataclass
class HistoryOptions(SourceChoice):
    paths: list[Path] = field(default_factory=list)  # none: results/store.sqlite
    by: str = "commit"  # commit, date or device (the fleet)
    metric: str = "all"  # all, step-time or speed-up
    points: bool = False  # every point of every series, too
    ci: bool = False  # exit 1 when the newest run brings a regression past threshold
    threshold: float = 0.05  # fraction
    penalty: float | None = None  # the change-point penalty's factor; None: the default
    repo: Path | None = None  # where run directories' commit times are asked of git
    format: str = "table"
    output: Path | None = None
    plot: Path | None = None
