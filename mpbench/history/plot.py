"""`mpbench history --plot FILE`: one panel per series, points with their 95 % intervals in
history's order, each level found as a horizontal line, each change point as a dashed line.
matplotlib is imported only here, when a plot is asked for."""

from __future__ import annotations

from pathlib import Path

from mpbench.errors import InvalidInput
from mpbench.history.findings import HistoryReport
from mpbench.history.render import run_name
from mpbench.history.series import STEP_TIME, Series

MAX_PANELS = 24  # more series than this: the first ones, and a note in the title


def write_plot(report: HistoryReport, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise InvalidInput("--plot needs matplotlib: pip install 'mpbench[plot]'") from None
    matplotlib.use("Agg")  # files only: never needs a display
    from matplotlib.figure import Figure

    shown = report.series[:MAX_PANELS]
    if not shown:
        raise InvalidInput("--plot: no series to draw (the filters kept none)")
    columns = 1 if len(shown) == 1 else 2
    rows = -(-len(shown) // columns)
    figure = Figure(figsize=(7 * columns, 2.8 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for ax, series in zip(axes, shown, strict=False):
        _panel(ax, series, report.by)
    for ax in axes[len(shown) :]:
        ax.set_visible(False)
    more = len(report.series) - len(shown)
    title = "mpbench history" + (
        f" (first {len(shown)} of {len(report.series)} series)" if more else ""
    )
    figure.suptitle(title)
    try:
        figure.savefig(path, dpi=110)
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"cannot write --plot {path}: {exc}") from None


def _panel(ax, series: Series, by: str) -> None:
    scale = 1000.0 if series.metric == STEP_TIME else 1.0
    xs = list(range(len(series.points)))
    values = [p.estimate.value * scale for p in series.points]
    low = [max(v - p.estimate.low * scale, 0) for v, p in zip(values, series.points, strict=True)]
    high = [max(p.estimate.high * scale - v, 0) for v, p in zip(values, series.points, strict=True)]
    trusted = set(series.trusted)
    colours = ["tab:blue" if i in trusted else "tab:gray" for i in xs]
    ax.errorbar(xs, values, yerr=[low, high], fmt="none", ecolor="lightgray", zorder=1)
    ax.scatter(xs, values, c=colours, s=16, zorder=2)
    if series.detection is not None:
        for start, end in series.detection.segments:
            level = [
                series.points[series.trusted[i]].estimate.value * scale for i in range(start, end)
            ]
            if level:
                from statistics import geometric_mean

                x0, x1 = series.trusted[start], series.trusted[end - 1]
                ax.hlines(geometric_mean(level), x0 - 0.3, x1 + 0.3, colors="tab:orange", zorder=3)
        for change, _, after in series.changes():
            x = series.points.index(after) - 0.5
            ax.axvline(x, color="tab:red", linestyle="--", linewidth=1)
            ax.annotate(
                f"{change.change * 100:+.0f} %", (x, max(values)), fontsize=7, color="tab:red"
            )
    unit = "step time (ms)" if series.metric == STEP_TIME else "speed-up (×)"
    ax.set_title(
        f"{series.label} {series.metric}, {series.group.workload} on {series.group.device}",
        fontsize=9,
    )
    ax.set_ylabel(unit, fontsize=8)
    step = max(1, len(xs) // 12)
    ax.set_xticks(xs[::step])
    ax.set_xticklabels(
        [run_name(series.points[i].run, by) for i in xs[::step]],
        rotation=45,
        fontsize=6,
        ha="right",
    )
