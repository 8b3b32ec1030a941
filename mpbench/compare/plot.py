"""`--plot FILE.png`: one figure that says what each policy buys, and how sure that is.

Per workload (and machine), two rows:
- speed-up vs float32, memory and test accuracy per policy: one bar (accuracy: one point)
  per framework, a whisker for the 95 % interval the tables print, the value at its tip;
- the step-time distribution of every policy (a box per framework, log axis when the
  policies differ more than tenfold), and per framework the training-loss curve of every
  policy (points when the cells trained one epoch);
- where the records name telemetry side files (v4 runs), a third row: per framework the
  training loss at every kept step, and the loss-scale trajectory of the cells that scale
  (fp16; log2 axis, skipped steps marked). A diverged cell's curve ends where it stopped.
  Without side files (older runs) the figure has the two rows only.
A value that does not exist (a skipped or failed cell, no float32 to divide by, a ratio that
overflowed) is named where it would be drawn, never drawn as a zero. Each value axis spans the
values, not the longest whisker: one past it is cut at the edge and marked with an arrow and
its true end (plot_style.sane_range, mark_beyond). Drawn with Agg: files only, no display
needed.
"""

from __future__ import annotations

import math
import textwrap
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from mpbench.compare.cells import GroupKey
from mpbench.compare.estimate import Estimate
from mpbench.compare.labels import config_suffix, short_fingerprint, varying_entries
from mpbench.compare.plot_bars import accuracy_panel, memory_panel, speedup_panel
from mpbench.compare.plot_series import (
    has_loss_scales,
    has_step_losses,
    loss_panel,
    loss_scale_panel,
    step_loss_panel,
    step_time_panel,
)
from mpbench.compare.plot_style import Palette
from mpbench.compare.report import Report
from mpbench.compare.rows import WITHIN_RUN_NOTE, config_text, interval_kinds
from mpbench.errors import InvalidInput

__all__ = ["build_figure", "write_plot"]

WIDTH_IN = 13.0  # 1,300 px at DPI: what a README or a CI artifact page shows unscaled
DPI = 100
ROW_IN = 3.4  # one row of panels
SECTION_TITLE_IN = 0.45
HEADER_IN = 0.8
LINE_IN = 0.19  # one line of the caption


def _matplotlib():
    try:
        import matplotlib
    except ImportError:
        raise InvalidInput("--plot needs matplotlib: pip install 'mpbench[plot]'") from None
    matplotlib.use("Agg")  # files only: never needs a display
    return matplotlib


def _caption(report: Report, side_files: dict | None = None) -> str:
    """What the whiskers, boxes and curves are, kind by kind, in the tables' words."""
    estimates: list[Estimate | None] = []
    for section in report.sections:
        for group in section.groups:
            for policy, cell in group.cells.items():
                estimates += [group.speedup(policy), cell.memory_bytes, cell.accuracy]
    repeats, within_run = interval_kinds(estimates)
    kinds = []
    if repeats is not None:
        kinds.append(f"over {repeats} repeats (separate processes)")
    if within_run:
        kinds.append(WITHIN_RUN_NOTE)
    whiskers = "; ".join(kinds) if kinds else "none (single values)"
    per_step = ""
    if side_files:
        per_step = (
            " · per step (telemetry): one line per repeat, X where a diverged cell stopped; "
            "loss scale on a log2 axis, rings at skipped steps; a fallback row dashed"
        )
    unread = sum("telemetry side file not used" in note for note in report.notes)
    if unread:
        per_step += (
            f" · {unread} telemetry side file{'s' if unread > 1 else ''} could not be used: "
            "those curves are left out (see the report's notes)"
        )
    return (
        f"bars and points: values · whiskers: 95 % intervals, {whiskers} · boxes: quartiles "
        "of every timed step (warm-up excluded), whiskers to 1.5 × IQR, dots beyond · ▲/▼ at "
        "an axis edge: a whisker or step beyond the axis range, its true value beside · loss: "
        "mean over repeats in bold, each repeat thin · skipped or failed cells are named where "
        "their value would be" + per_step
    )


def _section_title(section) -> str:
    """`mnist_dense · cpu: AMD EPYC [a68400abb00f] · batch 128, epochs 3, ...`: the config
    entries every framework of the section shares."""
    parts = None
    for group in section.groups:
        own = config_text(group)[1:-1].split(", ")
        parts = own if parts is None else [p for p in parts if p in own]
    config = ", ".join(p for p in parts or [] if p)
    where = f"{section.device} [{short_fingerprint(section.fingerprint)}]"
    return " · ".join(t for t in (section.workload, where, config) if t)


def build_figure(report: Report):
    """The whole figure (a matplotlib Figure, not yet saved): tests inspect its axes."""
    _matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    sections = report.sections
    side_files = report.side_files()
    telemetry = [_telemetry_panels(section, side_files) for section in sections]
    caption = textwrap.wrap(_caption(report, side_files), 175)
    footer_in = LINE_IN * len(caption) + 0.2
    heights = [(3 if panels else 2) * ROW_IN + SECTION_TITLE_IN for panels in telemetry]
    height = HEADER_IN + sum(heights) + footer_in
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, layout="constrained")
    parts = fig.subfigures(
        len(sections) + 2,
        1,
        height_ratios=[HEADER_IN, *heights, footer_in],
    )
    header, footer = parts[0], parts[-1]
    runs = ", ".join(report.runs)
    header.suptitle(
        "\n".join(textwrap.wrap(f"Mixed precision vs float32 (runs: {runs})", 110)),
        fontsize=14,
        fontweight="bold",
    )
    keys = [g.key for s in sections for g in s.groups]
    palette = Palette(keys, _group_namer(keys))
    legend = palette.entries()
    header.legend(
        [Patch(color=colour) for _, colour in legend],
        [label for label, _ in legend],
        loc="lower center",
        ncol=max(min(len(legend), 4), 1),
        fontsize=11,
        frameon=False,
    )
    for section, sub, panels in zip(sections, parts[1:-1], telemetry, strict=True):
        _draw_section(sub, section, report, palette, panels, side_files)
    footer.text(
        0.5,
        0.5,
        "\n".join(caption),
        ha="center",
        va="center",
        fontsize=8.5,
        color="#444444",
    )
    return fig


def _group_namer(keys: list[GroupKey]) -> Callable[[GroupKey], str]:
    """A framework's name, plus the config entries that tell its groups apart anywhere in the
    report (`tensorflow [loop="fit"]`) and a data-parallel group's world size (`torch ×2`):
    one name, one colour, in every workload's panels."""
    by_place: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for key in keys:
        by_place[(key.framework, key.workload)].append(dict(key.config))
    varying: dict[str, set[str]] = defaultdict(set)
    for (framework, _), configs in by_place.items():
        varying[framework] |= set(varying_entries(configs))

    def name(key: GroupKey) -> str:
        entries = sorted(varying.get(key.framework, ()))
        return key.framework + config_suffix(dict(key.config), entries)

    return name


def _telemetry_panels(section, side_files: dict) -> list:
    """The third row of a section, from the side files: per framework, the per-step loss,
    then the loss scale where a cell has one (fp16). Empty (no third row) without side files."""
    panels = []
    for group in section.groups:
        if has_step_losses(group, side_files):
            panels.append((step_loss_panel, group))
        if has_loss_scales(group, side_files):
            panels.append((loss_scale_panel, group))
    return panels


def _draw_section(
    sub, section, report: Report, palette: Palette, telemetry: list, side_files: dict
) -> None:
    groups = section.groups
    lower = 1 + len(groups)  # the step-time panel, then one loss panel per framework
    columns = math.lcm(3, lower, len(telemetry) or 1)
    grid = sub.add_gridspec(3 if telemetry else 2, columns)
    top_span, low_span = columns // 3, columns // lower
    sub.suptitle(_section_title(section), fontsize=12.5, fontweight="bold", x=0.01, ha="left")
    speedup_panel(sub.add_subplot(grid[0, 0:top_span]), section, palette)
    memory_panel(sub.add_subplot(grid[0, top_span : 2 * top_span]), section, palette)
    accuracy_panel(sub.add_subplot(grid[0, 2 * top_span :]), section, palette)
    step_time_panel(sub.add_subplot(grid[1, 0:low_span]), section, palette)
    for index, group in enumerate(groups, start=1):
        ax = sub.add_subplot(grid[1, index * low_span : (index + 1) * low_span])
        loss_panel(ax, section, group, palette.name(group.key))
    span = columns // max(len(telemetry), 1)
    for index, (panel, group) in enumerate(telemetry):
        ax = sub.add_subplot(grid[2, index * span : (index + 1) * span])
        panel(ax, section, group, palette.name(group.key), side_files)


def write_plot(report: Report, path: Path) -> Path:
    fig = build_figure(report)
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
    except OSError as exc:
        raise InvalidInput(f"cannot write --plot {path}: {exc.strerror or exc}") from None
    return path
