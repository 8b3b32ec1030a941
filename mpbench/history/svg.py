"""One series as a small SVG chart for history's html page, written by hand (no matplotlib, no
script): a point per run in history's order with its 95 % interval, each level the change-point
detector found as a line, each change point as a dashed line with its size. Hovering a point
shows its commit, date, value and interval (an SVG <title>); a point compare distrusts (a busy
machine) is hollow and says why. The chart's <title> and <desc> are its text alternative.
Colours come from the page's CSS (html_page.py), so they follow light and dark."""

from __future__ import annotations

import math
from statistics import geometric_mean

from mpbench.compare.render.html_page import esc
from mpbench.history.render import run_name, value_text
from mpbench.history.series import STEP_TIME, Point, Series

WIDTH, HEIGHT = 560, 210
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 24, 34  # room for the value axis, the labels, the dates


def series_svg(series: Series, by: str, ident: str) -> str:
    """The chart of `series`; `ident` makes its element ids unique in the page."""
    scale = 1000.0 if series.metric == STEP_TIME else 1.0  # step times in ms
    points = series.points
    low, high = _value_range(points, scale)
    width, height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: float) -> float:
        return LEFT + (index + 0.5) * width / len(points)

    def y(value: float) -> float:
        return TOP + (high - value) / (high - low) * height

    out = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-labelledby="{ident}-t {ident}-d">',
        f'<title id="{ident}-t">{esc(chart_title(series))}</title>',
        f'<desc id="{ident}-d">{esc(description(series, by))}</desc>',
    ]
    out += _axes(low, high, y, series.metric)
    out += _levels(series, x, y, scale)
    radius = max(1.6, min(4.0, width / len(points) / 3))
    trusted = set(series.trusted)
    for index, point in enumerate(points):
        estimate = point.estimate
        cx, cy = x(index), y(estimate.value * scale)
        if estimate.has_interval:
            top, bottom = y(estimate.high * scale), y(estimate.low * scale)
            out.append(
                f'<line class="interval" x1="{cx:.1f}" y1="{top:.1f}" x2="{cx:.1f}" '
                f'y2="{bottom:.1f}"/>'
            )
        css = "point" if index in trusted else "untrusted"
        out.append(
            f'<circle class="{css}" cx="{cx:.1f}" cy="{cy:.1f}" r="{radius:.1f}">'
            f"<title>{esc(point_text(series, point))}</title></circle>"
        )
    out += _changes(series, by, x)
    out += _run_labels(points, by, x)
    out.append("</svg>")
    return "\n".join(out)


def chart_title(series: Series) -> str:
    group = series.group
    return f"{series.label} {series.metric}, {group.workload} on {group.device}"


def point_text(series: Series, point: Point) -> str:
    """What hovering a point shows: `commit 0a0a0a0a · 2026-03-05 · 2.40 ms (2.31–2.49) ·
    run 20260301-…`, and why it is not used where compare distrusts it."""
    run = point.run
    where = f"commit {run.short_commit}" if run.short_commit else "commit unknown"
    date = run.when[:10] if run.when else "date unknown"
    parts = [where, date, value_text(series, point.estimate), f"run {run.run_id}"]
    if point.distrust:
        parts.append(f"not used: {point.distrust}")
    return " · ".join(parts)


def description(series: Series, by: str) -> str:
    """The chart in words: its points, first and newest value, and each change point."""
    first, newest = series.points[0], series.points[-1]
    text = (
        f"{len(series.points)} runs from {run_name(first.run, by)} "
        f"({value_text(series, first.estimate)}) to {run_name(newest.run, by)} "
        f"({value_text(series, newest.estimate)})"
    )
    changes = [
        f"{change.change * 100:+.1f} % at {run_name(after.run, by)}"
        for change, _, after in series.changes()
    ]
    return text + (f"; change points: {', '.join(changes)}" if changes else "; no change point")


def _value_range(points: list[Point], scale: float) -> tuple[float, float]:
    values = []
    for point in points:
        estimate = point.estimate
        values.append(estimate.value * scale)
        if estimate.has_interval:
            values += [estimate.low * scale, estimate.high * scale]
    low, high = min(values), max(values)
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round values between low and high, about `count` of them."""
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(count + 2) if first + i * step <= high]


def _axes(low: float, high: float, y, metric: str) -> list[str]:
    unit = "ms" if metric == STEP_TIME else "×"
    out = [
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}"/>',
        f'<text x="4" y="{TOP - 10}">{esc(metric)} ({unit})</text>',
    ]
    for tick in _ticks(low, high):
        ty = y(tick)
        out.append(
            f'<line class="axis" x1="{LEFT - 4}" y1="{ty:.1f}" x2="{WIDTH - RIGHT}" '
            f'y2="{ty:.1f}" stroke-opacity=".5"/>'
        )
        out.append(f'<text x="{LEFT - 7}" y="{ty + 4:.1f}" text-anchor="end">{tick:.4g}</text>')
    return out


def _levels(series: Series, x, y, scale: float) -> list[str]:
    """Each segment's level (the geometric mean of its trusted points, as plot.py draws it)."""
    if series.detection is None:
        return []
    out = []
    for start, end in series.detection.segments:
        indexes = series.trusted[start:end]
        if not indexes:
            continue
        level = geometric_mean([series.points[i].estimate.value * scale for i in indexes])
        out.append(
            f'<line class="level" x1="{x(indexes[0] - 0.4):.1f}" y1="{y(level):.1f}" '
            f'x2="{x(indexes[-1] + 0.4):.1f}" y2="{y(level):.1f}"/>'
        )
    return out


def _changes(series: Series, by: str, x) -> list[str]:
    out = []
    for change, _, after in series.changes():
        at = x(series.points.index(after) - 0.5)
        size = f"{change.change * 100:+.1f} %"
        said = (
            f"change point: {size} (95 %: {change.low * 100:+.1f} to "
            f"{change.high * 100:+.1f}) at {run_name(after.run, by)}"
        )
        out.append(
            f'<line class="change" x1="{at:.1f}" y1="{TOP}" x2="{at:.1f}" '
            f'y2="{HEIGHT - BOTTOM}"><title>{esc(said)}</title></line>'
        )
        out.append(f'<text class="change" x="{at + 3:.1f}" y="{TOP + 10}">{esc(size)}</text>')
    return out


def _run_labels(points: list[Point], by: str, x) -> list[str]:
    """The first and the newest run's names under the axis."""
    base = HEIGHT - BOTTOM + 16
    first = esc(run_name(points[0].run, by))
    out = [f'<text x="{x(0) - 4:.1f}" y="{base}">{first}</text>']
    if len(points) > 1:
        newest = esc(run_name(points[-1].run, by))
        out.append(
            f'<text x="{x(len(points) - 1) + 4:.1f}" y="{base}" text-anchor="end">{newest}</text>'
        )
    return out
