"""The three summary panels of `--plot`: speed-up vs float32, memory, test accuracy.

Policies on the x axis, one bar (or point) per framework, a whisker for each value's 95 %
interval (the same Estimate the tables print), its value written at the tip. A cell without
a value (skipped, failed, no float32 to divide by, a ratio that overflowed) is named where
its bar would be, so a missing bar is never read as a zero. The axis is set by the values; a
whisker reaching past it is cut at the edge and marked with an arrow and its true end. A
speed-up that rests on a contended cell (the table's `contended` status, for the cell or its
float32) is hatched (style.mark_contended).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mpbench.compare.plot.style import (
    LABEL_SIZE,
    NOTE_COLOUR,
    TITLE_SIZE,
    VALUE,
    VALUE_SIZE,
    Palette,
    empty_panel,
    finite,
    log_axis,
    mark_beyond,
    mark_contended,
    missing_text,
    offsets,
    policies,
    sane_range,
    style_axes,
    tick_label,
    wrap_words,
)
from mpbench.compare.summary import fmt
from mpbench.compare.summary.cells import CellSummary, PolicyGroup, Section
from mpbench.compare.summary.estimate import WITHIN_RUN, Estimate
from mpbench.policies import BASELINE

# Ratios spanning more than this (largest / smallest) are drawn on a log axis, from 1.
LOG_SPREAD = 10.0

ValueOf = Callable[[PolicyGroup, str], Estimate | None]


@dataclass
class Entry:
    """One bar: where it goes, whose it is, and its value (None: `missing` says why)."""

    x: float
    index: int  # the group's position in the section (its colour)
    group: PolicyGroup
    cell: CellSummary
    estimate: Estimate | None
    missing: str


def entries(section: Section, value_of: ValueOf, needs_reference: bool = False) -> list[Entry]:
    names = policies(section)
    shifts, _ = offsets(len(section.groups))
    out = []
    for index, group in enumerate(section.groups):
        for x, policy in enumerate(names):
            cell = group.cells.get(policy)
            if cell is None:
                continue
            estimate = value_of(group, policy)
            missing = ""
            if estimate is not None and not finite(estimate):
                estimate, missing = None, "not finite"  # an overflowed ratio has no height
            elif estimate is None:
                missing = missing_text(cell, group, needs_reference)
            out.append(Entry(x + shifts[index], index, group, cell, estimate, missing))
    return out


def _mark(estimate: Estimate) -> str:
    return fmt.WITHIN_RUN_MARK if estimate.kind == WITHIN_RUN else ""


@dataclass
class Label:
    x: float
    value: float
    tip: float  # the end of the whisker on the label's side
    text: str
    below: bool = False


# A whisker longer than this (fraction of the axis height) would carry its label far from the
# bar: the label then sits at the bar's end, on the whisker, instead of past the cap.
_FAR = 0.18


def _labels(ax, labels: list[Label]) -> None:
    """Each value written at its whisker's end, or at its bar's end when the whisker is long:
    in data coordinates of that end, 3 points past it, so it stays with its bar on any scale.
    Drawn after the axis limits are set, so that the whisker's length can be measured; where
    labels crowd, the layout stands them upright (style.fit_values), never moves them away."""
    to_axes = ax.transAxes.inverted()

    def height(y: float) -> float:
        return to_axes.transform(ax.transData.transform((0.0, y)))[1]

    for label in labels:
        tip = height(label.tip)
        # A whisker cut at the axis edge (style.mark_beyond) has its tip outside.
        far = abs(tip - height(label.value)) > _FAR or not 0.0 <= tip <= 1.0
        anchor = label.value if far else label.tip
        ax.annotate(
            label.text,
            (label.x, anchor),
            xytext=(0, -3 if label.below else 3),
            textcoords="offset points",
            ha="center",
            va="top" if label.below else "bottom",
            fontsize=VALUE_SIZE,
            zorder=4,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.85},
            gid=VALUE,
        )


def _whisker(ax, x: float, estimate: Estimate) -> None:
    """The 95 % interval, drawn to its true ends: the axes cut one that leaves them, and
    `_clipped` marks it at the edge."""
    if estimate.high <= estimate.low:
        return  # a single value: nothing to show
    value = estimate.value
    ax.errorbar(
        x,
        value,
        # A bootstrap interval may sit a hair beside its anchored point: never a negative arm.
        yerr=[[max(value - estimate.low, 0.0)], [max(estimate.high - value, 0.0)]],
        color="#222222",
        capsize=3,
        linewidth=1,
        zorder=3,
    )


def _clipped(ax, entries_: list[Entry], text: Callable[[float], str]) -> None:
    """After the limits are set: an arrow and the true bound where a whisker leaves the axis."""
    for entry in entries_:
        if entry.estimate is not None:
            mark_beyond(ax, entry.x, (entry.estimate.low, entry.estimate.high), text)


def _limits(values: list[Estimate], **rule) -> tuple[float, float]:
    """style.sane_range of the values (points) and their whiskers' ends."""
    ends = [v for e in values for v in (e.low, e.high)]
    return sane_range([e.value for e in values], ends, **rule)


def _missing(ax, entries_: list[Entry], y: float) -> None:
    for entry in entries_:
        if entry.estimate is None:
            ax.text(
                entry.x,
                y,
                entry.missing,
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=VALUE_SIZE,
                color=NOTE_COLOUR,
            )


def _policy_ticks(ax, section: Section) -> None:
    names = policies(section)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([tick_label(p) for p in names])
    ax.set_xlim(-0.6, len(names) - 0.4)


# --- speed-up ------------------------------------------------------------------------------


def _speedup_bar(group: PolicyGroup, policy: str) -> Estimate | None:
    if policy == BASELINE:
        return Estimate.point(1.0) if group.reference is not None else None
    return group.comparisons[policy].speedup


def _rests_on_contended(group: PolicyGroup, cell: CellSummary) -> bool:
    """Whether a speed-up rests on a cell the table's status calls contended: the cell's own
    or its float32's (CellSummary.contended, the fact behind the `contended` status)."""
    reference = group.reference
    return cell.contended or (reference is not None and reference.contended)


def _ratio_text(value: float) -> str:
    """As the tables write it (fmt.significant): `2.45×`, `0.0031×`, `308×`."""
    return fmt.ratio(value)


def _open_panel(
    ax, section: Section, title: str, value_of: ValueOf, empty: str, needs_reference: bool = False
) -> tuple[list[Entry], list[Estimate]]:
    """Every bar panel starts alike: policy ticks, the house style, a title, the entries;
    with no value at all it says `empty` in the panel (and the values list comes back empty)."""
    drawn = entries(section, value_of, needs_reference=needs_reference)
    values = [e.estimate for e in drawn if e.estimate is not None]
    _policy_ticks(ax, section)
    style_axes(ax)
    ax.set_title(title, fontsize=TITLE_SIZE, fontweight="bold")
    if not values:
        empty_panel(ax, empty)
    return drawn, values


def speedup_panel(ax, section: Section, palette: Palette) -> None:
    title, empty = (
        "speed-up vs fp32 (synced step)",
        "no speed-up: no finished float32 and policy pair",
    )
    drawn, values = _open_panel(ax, section, title, _speedup_bar, empty, needs_reference=True)
    if not values:
        return
    # The points decide the scale; a whisker past the sane range is cut and marked (_clipped).
    points = [e.value for e in values]
    log = min(points) > 0 and max(points) / min(points) > LOG_SPREAD
    low, high = _limits(values, origin=1.0 if log else 0.0, log=log)
    _, width = offsets(len(section.groups))
    labels = []
    for entry in drawn:
        estimate = entry.estimate
        if estimate is None:
            continue
        colour = palette.colour(entry.group.key)
        value = estimate.value
        if log:  # bars grow from 1 (as fast as float32), up when faster, down when slower
            (bar,) = ax.bar(entry.x, value - 1, width * 0.92, bottom=1, color=colour, zorder=2)
        else:
            (bar,) = ax.bar(entry.x, value, width * 0.92, color=colour, zorder=2)
        if _rests_on_contended(entry.group, entry.cell):
            mark_contended(bar)
        _whisker(ax, entry.x, estimate)
        below = log and value < 1
        tip = min(estimate.low, value) if below else max(estimate.high, value)
        if entry.cell.row != BASELINE:  # float32 against itself: 1, said once below
            labels.append(Label(entry.x, value, tip, _ratio_text(value) + _mark(estimate), below))
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", zorder=1.5)
    if any(e.estimate is not None and e.cell.row == BASELINE for e in drawn):
        ax.annotate(
            "ref",
            (policies(section).index(BASELINE), 1.0),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=VALUE_SIZE,
        )
    if log:
        ax.set_yscale("log")
        ax.set_ylim(min(low, 1.0) / 3, max(high, 1.0) * 3)
        log_axis(ax, "×")
        ax.set_ylabel("× vs fp32 (log scale; higher = faster)", fontsize=LABEL_SIZE)
    else:
        ax.set_ylim(0, max(high, 1.0) * 1.2)
        ax.set_ylabel("× vs fp32 (higher = faster)", fontsize=LABEL_SIZE)
    _labels(ax, labels)
    _clipped(ax, drawn, _ratio_text)
    _missing(ax, drawn, ax.get_ylim()[0])


# --- memory --------------------------------------------------------------------------------


def _memory_unit(section: Section) -> tuple[float, str, str]:
    cells = [c for g in section.groups for c in g.cells.values()]
    peaks = [c.memory_bytes.value for c in cells if c.memory_bytes]
    kinds = {c.memory_kind for c in cells if c.memory_kind}
    if not kinds:
        kind = "memory"
    else:
        kind = kinds.pop() if len(kinds) == 1 else "memory (kinds differ between cells)"
    if peaks and max(peaks) >= 2**30:
        return 2**30, "GiB", kind
    return 2**20, "MiB", kind


def memory_panel(ax, section: Section, palette: Palette) -> None:
    scale, unit, kind = _memory_unit(section)

    def value_of(group: PolicyGroup, policy: str) -> Estimate | None:
        cell = group.cells.get(policy)
        if cell is None or not cell.ok or cell.memory_bytes is None:
            return None
        return cell.memory_bytes.scaled(1 / scale)

    title = "\n".join(wrap_words(kind, 34))
    drawn, values = _open_panel(ax, section, title, value_of, "no memory figures recorded")
    if not values:
        return

    def label(value: float) -> str:
        """Each value with the figures it needs: `2.3` beside `16`, never `2`."""
        if unit == "GiB":
            return f"{value:.2f}"
        return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"

    _, width = offsets(len(section.groups))
    tallest = _limits(values, origin=0.0)[1]
    labels = []
    for entry in drawn:
        estimate = entry.estimate
        if estimate is None:
            continue
        colour = palette.colour(entry.group.key)
        ax.bar(entry.x, estimate.value, width * 0.92, color=colour, zorder=2)
        _whisker(ax, entry.x, estimate)
        top = max(estimate.high, estimate.value)
        text = label(estimate.value) + _mark(estimate)
        labels.append(Label(entry.x, estimate.value, top, text))
    ax.set_ylim(0, tallest * 1.2 if tallest > 0 else 1.0)
    _labels(ax, labels)
    _clipped(ax, drawn, label)
    ax.set_ylabel(f"{unit} (lower = better)", fontsize=LABEL_SIZE)
    _missing(ax, drawn, 0.0)


# --- accuracy ------------------------------------------------------------------------------


def _accuracy(group: PolicyGroup, policy: str) -> Estimate | None:
    cell = group.cells.get(policy)
    if cell is None or not cell.ok or cell.accuracy is None:
        return None
    return cell.accuracy.scaled(100)


def accuracy_panel(ax, section: Section, palette: Palette) -> None:
    """Points, not bars: differences of tenths of a point matter here, so the axis is zoomed
    to the values, and a bar on a zoomed axis would exaggerate them."""
    drawn, values = _open_panel(
        ax, section, "test accuracy", _accuracy, "no test accuracy recorded"
    )
    if not values:
        return
    low, high = _limits(values, least=2.0)
    span = max(high - low, 2.0)  # a few tenths of a point must not fill the axis
    bottom, top = max(low - 0.45 * span, 0.0), min(high + 0.35 * span, 100.0)
    ax.set_ylim(bottom, top)
    labels = []
    for entry in drawn:
        estimate = entry.estimate
        if estimate is None:
            continue
        colour = palette.colour(entry.group.key)
        ax.plot(entry.x, estimate.value, "o", color=colour, markersize=7, zorder=3)
        _whisker(ax, entry.x, estimate)
        tip = max(estimate.high, estimate.value)
        labels.append(
            Label(entry.x, estimate.value, tip, f"{estimate.value:.2f}" + _mark(estimate))
        )
    ax.set_ylabel("% (higher = better; axis zoomed)", fontsize=LABEL_SIZE)
    _labels(ax, labels)
    _clipped(ax, drawn, lambda v: f"{v:.2f}")
    _missing(ax, drawn, bottom)
