"""`--plot FILE.png`: one figure that says what each policy buys, and how sure that is.

Per workload (and machine), two rows:
- speed-up vs float32, memory and test accuracy per policy: one bar (accuracy: one point)
  per framework, a whisker for the 95 % interval the tables print, the value at its tip;
- the step-time distribution of every policy (a box per group, log axis when the policies
  differ more than tenfold), and per group the training-loss curve of every policy (points
  when the cells trained one epoch), each variant of a policy in its own shade;
- where the records name telemetry side files (v4 runs), a third row: per group the
  training loss at every kept step, and the loss-scale trajectory of the cells that scale
  (fp16; log2 axis, skipped steps marked). A diverged cell's curve ends where it stopped.
  Without side files (older runs) the figure has the two rows only.
A value that does not exist (a skipped or failed cell, no float32 to divide by, a ratio that
overflowed) is named where it would be drawn, never drawn as a zero. Each value axis spans the
values, not the longest whisker: one past it is cut at the edge and marked with an arrow and
its true end (style.sane_range, mark_beyond). Groups are named as the tables name them
(labels.Labeler.group), each in a colour clearly apart from the others' (style.Palette).
A contended cell (the table's `contended` status) has its speed-up bar and step-time box
hatched, and the legend says what that means. Text that would not fit once laid out is fixed
before the file is written (_fit): titles wrapped at spaces (never inside a word) or set
smaller, crowded policy names staggered, upright or thinned, crowded values stood upright
beside their bars. Drawn with Agg: files only, no display needed.
"""

from __future__ import annotations

from pathlib import Path

from mpbench.compare.plot.bars import accuracy_panel, memory_panel, speedup_panel
from mpbench.compare.plot.series import (
    has_loss_scales,
    has_step_losses,
    loss_panel,
    loss_scale_panel,
    step_loss_panel,
    step_time_panel,
)
from mpbench.compare.plot.style import (
    CONTENDED_LABEL,
    Palette,
    contended_patch,
    fit_text,
    fit_ticks,
    fit_values,
    wrap_words,
)
from mpbench.compare.render.tables import WITHIN_RUN_NOTE, config_text, interval_kinds
from mpbench.compare.report import Report
from mpbench.compare.summary.estimate import TOO_FEW_STEPS, Estimate
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
                speedup = group.comparisons[policy].speedup
                estimates += [speedup, cell.memory_bytes, cell.accuracy]
    repeats, within_run = interval_kinds(estimates)
    kinds = []
    if repeats is not None:
        kinds.append(f"over {repeats} repeats (separate processes)")
    if within_run:
        kinds.append(WITHIN_RUN_NOTE)
    if any(e is not None and e.no_interval == TOO_FEW_STEPS for e in estimates):
        kinds.append(f"none where there were {TOO_FEW_STEPS}")
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
    where = section.machine.label()
    return " · ".join(t for t in (section.workload, where, config) if t)


def build_figure(report: Report):
    """The whole figure (a matplotlib Figure, not yet saved): tests inspect its axes."""
    _matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    sections = report.sections
    side_files = report.side_files()
    telemetry = [_telemetry_panels(section, side_files) for section in sections]
    caption = wrap_words(_caption(report, side_files), 175)
    footer_in = LINE_IN * len(caption) + 0.2
    heights = [(3 if panels else 2) * ROW_IN + SECTION_TITLE_IN for panels in telemetry]
    height = HEADER_IN + sum(heights) + footer_in
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, layout="constrained")
    # Header, a part per section, footer; _fit may make a section taller later.
    grid = fig.add_gridspec(len(sections) + 2, 1, height_ratios=[HEADER_IN, *heights, footer_in])
    parts = [fig.add_subfigure(grid[index]) for index in range(len(sections) + 2)]
    header, footer = parts[0], parts[-1]
    runs = ", ".join(report.runs)
    title = header.suptitle(
        "\n".join(wrap_words(f"Mixed precision vs float32 (runs: {runs})", 110)),
        fontsize=14,
        fontweight="bold",
    )
    keys = [g.key for s in sections for g in s.groups]
    palette = Palette(keys, report.labeler.group)  # the tables' names for the groups
    entries = palette.entries()
    handles = [Patch(color=colour) for _, colour in entries]
    names = [label for label, _ in entries]
    if any(cell.contended for _, _, cell in report.policy_cells()):
        handles.append(contended_patch())
        names.append(CONTENDED_LABEL)
    legend = header.legend(
        handles,
        names,
        loc="lower center",
        ncols=max(min(len(handles), 4), 1),
        fontsize=11,
        frameon=False,
    )
    titles = [title]
    for section, sub, panels in zip(sections, parts[1:-1], telemetry, strict=True):
        titles.append(_draw_section(sub, section, report, palette, panels, side_files))
    footer.text(
        0.5,
        0.5,
        "\n".join(caption),
        ha="center",
        va="center",
        fontsize=8.5,
        color="#444444",
    )
    _fit(fig, grid, [HEADER_IN, *heights, footer_in], titles, legend)
    return fig


def _fit(fig, grid, heights: list[float], titles: list, legend) -> None:
    """Lay the figure out, measure its text with the renderer that writes the file, and fix
    what does not fit (style.fit_text, fit_ticks; _grow_rows); then lay it out again,
    since a wrapped title or an upright label changes the room the panels get. A few passes
    settle it. `grid`: the figure's parts (header, sections, footer), `heights` theirs in
    inches; `titles`: the figure's and the sections' titles; `legend`: the figure's."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    _fit_legend(legend, fig.bbox.width, canvas.get_renderer())
    for _ in range(5):
        # The layout alone, not a whole draw: every text measured below is placed by it.
        renderer = canvas.get_renderer()
        fig.get_layout_engine().execute(fig)
        changed = _grow_rows(fig, grid, heights, renderer)
        for ax in fig.axes:
            changed |= fit_ticks(ax, renderer)
            changed |= fit_values(ax, renderer)
            if ax.get_title():
                changed |= fit_text(ax.title, _title_room(ax), renderer)
            if ax.get_ylabel():  # no taller than its panel, or it runs into the titles
                changed |= fit_text(ax.yaxis.label, ax.bbox.height, renderer, vertical=True)
        for title in titles:
            changed |= fit_text(title, _suptitle_room(title), renderer)
        changed |= _grow_header(fig, grid, heights, titles[0], legend, renderer)
        if not changed:
            return


_MARGIN = 6  # pixels between a text and the edge of its place
LEVEL_TICKS_PX = 40  # what two lines of level tick labels take below a panel


def _grow_rows(fig, grid, heights: list[float], renderer) -> bool:
    """A row of panels whose tick labels stand upright (fit_ticks) grows by the height they
    take beyond level ones, and the figure with it, so that its panels keep their height."""
    extra: dict[tuple[int, int], float] = {}  # (part, row) -> inches
    parts = list(fig.subfigs)
    for ax in fig.axes:
        upright = [
            t.get_window_extent(renderer).height
            for t in ax.get_xticklabels()
            if t.get_visible() and t.get_text() and t.get_rotation() == 90
        ]
        if not upright:
            continue
        where = (parts.index(ax.figure), _row_of(ax).rowspan.start)
        grow = max(max(upright) - LEVEL_TICKS_PX, 0.0) / fig.dpi
        extra[where] = max(extra.get(where, 0.0), grow)
    sizes = list(heights)
    changed = False
    for part, sub in enumerate(parts):
        own = {row: inches for (p, row), inches in extra.items() if p == part}
        if not own:
            continue
        rows = _row_of(sub.axes[0]).get_gridspec()
        ratios = [ROW_IN + own.get(row, 0.0) for row in range(rows.nrows)]
        sizes[part] += sum(ratios) - ROW_IN * rows.nrows
        if list(rows.get_height_ratios() or []) != ratios:
            rows.set_height_ratios(ratios)
            changed = True
    if changed:
        grid.set_height_ratios(sizes)
        fig.set_size_inches(WIDTH_IN, sum(sizes))
    return changed


def _grow_header(fig, grid, heights: list[float], title, legend, renderer) -> bool:
    """The header grows to hold its title and the legend (a third row of entries: many
    groups, or the `contended` entry), and the figure with it; `heights[0]` is its height."""
    needed = title.get_window_extent(renderer).height + legend.get_window_extent(renderer).height
    needed = (needed + 3 * _MARGIN) / fig.dpi
    if needed <= heights[0] + 0.01:
        return False
    grow = needed - heights[0]
    heights[0] = needed
    ratios = list(grid.get_height_ratios())
    ratios[0] += grow
    grid.set_height_ratios(ratios)
    fig.set_size_inches(WIDTH_IN, sum(ratios))
    return True


def _row_of(ax):
    """The row of its section's grid that a panel is in (_draw_section)."""
    return ax.get_subplotspec().get_topmost_subplotspec()


def _title_room(ax) -> float:
    """How wide the title of `ax` may be: centred over the panel, it must end halfway across
    the gap to the panel beside it (the neighbour's title ends there too) and inside the
    section."""
    row = [other for other in ax.figure.axes if _row_of(other) == _row_of(ax)]
    box, section = ax.bbox, ax.figure.bbox
    left = max([(o.bbox.x1 + box.x0) / 2 for o in row if o.bbox.x1 <= box.x0], default=section.x0)
    right = min([(o.bbox.x0 + box.x1) / 2 for o in row if o.bbox.x0 >= box.x1], default=section.x1)
    centre = (box.x0 + box.x1) / 2
    return 2 * max(min(centre - left, right - centre), 0) - 2 * _MARGIN


def _suptitle_room(title) -> float:
    """The width left to a section's or the figure's title from where it starts (a section's
    is left-aligned, the figure's centred)."""
    box = title.figure.bbox  # the (sub)figure it is the title of
    if title.get_horizontalalignment() == "left":
        return box.x1 - (box.x0 + title.get_position()[0] * box.width) - _MARGIN
    return box.width - 2 * _MARGIN


def _fit_legend(legend, width: float, renderer) -> None:
    """The figure's legend in as many columns (at most its own) as fit the figure's width.
    Its size does not depend on the layout, so it is fitted once, before it."""
    entries = len(legend.texts)
    for columns in range(max(min(entries, 4), 1), 0, -1):
        legend.set_ncols(columns)
        if legend.get_window_extent(renderer).width <= width - 2 * _MARGIN:
            return


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
):
    """The section's panels in `sub`; returns its title (a Text), for _fit."""
    groups = section.groups
    # A grid per row of panels: the rows' columns are independent, so a wide label in one row
    # never shifts (or squeezes) a panel of another.
    rows = sub.add_gridspec(3 if telemetry else 2, 1)
    top = rows[0].subgridspec(1, 3)
    low = rows[1].subgridspec(1, 1 + len(groups))  # step time, then a loss panel per group
    title = sub.suptitle(
        _section_title(section), fontsize=12.5, fontweight="bold", x=0.01, ha="left"
    )
    speedup_panel(sub.add_subplot(top[0, 0]), section, palette)
    memory_panel(sub.add_subplot(top[0, 1]), section, palette)
    accuracy_panel(sub.add_subplot(top[0, 2]), section, palette)
    step_time_panel(sub.add_subplot(low[0, 0]), section, palette)
    for index, group in enumerate(groups, start=1):
        loss_panel(sub.add_subplot(low[0, index]), section, group, palette.name(group.key))
    if telemetry:
        third = rows[2].subgridspec(1, len(telemetry))
        for index, (panel, group) in enumerate(telemetry):
            ax = sub.add_subplot(third[0, index])
            panel(ax, section, group, palette.name(group.key), side_files)
    return title


def write_plot(report: Report, path: Path, fig=None) -> Path:
    """Write the report's figure (`fig`: the one build_figure drew already, or None)."""
    fig = build_figure(report) if fig is None else fig
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
    except OSError as exc:
        raise InvalidInput(f"cannot write --plot {path}: {exc.strerror or exc}") from None
    return path
