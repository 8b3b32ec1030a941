"""What every panel of `--plot` shares: colours, short names, bar positions, the missing-value
note. Matplotlib is imported by the caller (plot.py), never at import time here."""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Callable, Iterable

from mpbench.compare.summary.cells import (
    CellSummary,
    GroupKey,
    PolicyGroup,
    Section,
    policy_rank,
    row_policy,
)
from mpbench.compare.summary.estimate import Estimate
from mpbench.compare.summary.verdict import short

# Fixed colours per framework, far apart so the two read apart at a glance (and in grey).
FRAMEWORK_COLOURS = {"torch": "#d1495b", "tensorflow": "#2e6f9e"}
_OTHER = ["#66a182", "#edae49", "#8d6a9f", "#6c757d"]
# Per policy, for the loss curves (where a panel is one framework): float32 the neutral one.
POLICY_COLOURS = {
    "float32": "#222222",
    "tf32": "#8d6a9f",
    "mixed_float16": "#e07b00",
    "mixed_bfloat16": "#2a9d5c",
}
POLICY_MARKERS = {"float32": "o", "tf32": "D", "mixed_float16": "s", "mixed_bfloat16": "^"}
NOTE_COLOUR = "#555555"
TITLE_SIZE = 11.5
LABEL_SIZE = 9.5
TICK_SIZE = 9.5
VALUE_SIZE = 8


def policies(section: Section) -> list[str]:
    """The rows of a section in the contract's order (float32, tf32, fp16, bf16), each
    policy's recipe rows after it (`bf16 @512`, compare/summary/cells.py)."""
    seen = {p for g in section.groups for p in g.cells}
    return sorted(seen, key=policy_rank)


def framework_colour(framework: str, index: int) -> str:
    return FRAMEWORK_COLOURS.get(framework, _OTHER[index % len(_OTHER)])


# A family's later members, as fractions of the way to white (+) or black (-): far enough apart
# to read apart, near enough to read as the same family.
_SHADES = (0.45, -0.35, 0.7, -0.55, 0.85)
_LIGHTER = (0.4, 0.6, 0.75, 0.85, 0.92)  # for a dark colour (float32's), which cannot darken


def shade(colour: str, variant: int) -> str:
    """`colour` for a family's first member (variant 0), lighter and darker shades of it for
    the next ones: a framework's configs, a policy's variants."""
    if variant == 0:
        return colour
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    dark = 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2] < 0.25
    shades = _LIGHTER if dark else _SHADES
    amount = shades[(variant - 1) % len(shades)]
    towards = 1.0 if amount > 0 else 0.0
    mixed = [c + (towards - c) * abs(amount) for c in rgb]
    return "#" + "".join(f"{round(c * 255):02x}" for c in mixed)


class Palette:
    """One colour per framework (and config, where one framework ran several), the same in
    every panel and in the figure's legend. `label_of` names a group as the tables do."""

    def __init__(self, keys: Iterable[GroupKey], label_of: Callable[[GroupKey], str]) -> None:
        self._label_of = label_of
        self._colours: dict[str, str] = {}
        frameworks: dict[str, int] = {}  # framework -> configs seen
        for key in keys:
            label = label_of(key)
            if label in self._colours:
                continue
            variant = frameworks.get(key.framework, 0)
            frameworks[key.framework] = variant + 1
            base = framework_colour(key.framework, list(frameworks).index(key.framework))
            self._colours[label] = shade(base, variant)

    def colour(self, key: GroupKey) -> str:
        return self._colours[self._label_of(key)]

    def name(self, key: GroupKey) -> str:
        return self._label_of(key)

    def entries(self) -> list[tuple[str, str]]:
        """(label, colour) in order of appearance: the figure's legend."""
        return list(self._colours.items())


def row_colours(rows: Iterable[str]) -> dict[str, str]:
    """A colour per row of a section: its policy's colour for the policy's first row, shades
    of it for the others (`fp16 [loss scale 1024]`, `bf16 (fallback)`, `bf16 @512`), so each
    variant has its own colour and a policy's variants read as one family. Built from every
    row of the section, a row keeps its colour in each panel."""
    colours: dict[str, str] = {}
    members: dict[str, int] = {}
    for index, row in enumerate(sorted(set(rows), key=policy_rank)):
        policy = row_policy(row)
        base = POLICY_COLOURS.get(policy, _OTHER[index % len(_OTHER)])
        colours[row] = shade(base, members.get(policy, 0))
        members[policy] = members.get(policy, 0) + 1
    return colours


def policy_label(policy: str) -> str:
    return short(policy)


def tick_label(policy: str) -> str:
    """A row's tick: the policy, and its recipe mark on a second line (`fp16` /
    `[loss scale 1024]`), so neighbouring ticks do not run into each other."""
    return short(policy).replace(" ", "\n", 1)


def offsets(count: int) -> tuple[list[float], float]:
    """x offsets of `count` side-by-side bars (or boxes) around a policy's tick, and a width."""
    width = 0.8 / max(count, 1)
    return [(i - (count - 1) / 2) * width for i in range(count)], width


def finite(estimate: Estimate | None) -> bool:
    return estimate is not None and all(
        math.isfinite(v) for v in (estimate.value, estimate.low, estimate.high)
    )


def missing_text(cell: CellSummary, group: PolicyGroup, needs_reference: bool = False) -> str:
    """What stands where a value cannot be drawn: the cell's status, or why it has none."""
    if not cell.ok:
        return cell.status
    if needs_reference and group.reference is None:
        return "no fp32 ref"
    return "n/a"


# --- clipping: one huge whisker must not flatten every bar ------------------------------------
#
# An axis shows every point value (a bar's height, an accuracy, a box's quartiles) and every
# whisker end that lies within REACH times the points' own extent beyond them: from 0 for
# bars, so up to 1.5 x the tallest bar; on a log axis the extent is measured in decades. A
# whisker (box whisker, outlier) that reaches further is cut at the axis edge and marked there
# with an arrow and its true value (mark_beyond).
REACH = 0.5
CLIP_COLOUR = "#222222"
CLIPPED = "clipped"  # the gid of mark_beyond's arrowheads and texts


def sane_range(
    points: Iterable[float],
    ends: Iterable[float] = (),
    *,
    origin: float | None = None,
    log: bool = False,
    least: float = 0.0,
) -> tuple[float, float]:
    """The lowest and highest value the axis must show (before the panel's own margins):
    the points, `origin` (where bars start: 0, or 1 for ratios on a log axis), and each whisker
    end in `ends` that lies within REACH x the points' extent of them. `least`: the smallest
    extent the window is measured from (a zoomed axis: noise must not set the scale). On a log
    axis, values <= 0 are left out."""
    keep = [v for v in points if math.isfinite(v) and (v > 0 or not log)]
    if origin is not None:
        keep.append(origin)
    if not keep:
        return (1.0, 10.0) if log else (0.0, 1.0)
    to = (lambda v: math.log10(v)) if log else (lambda v: v)
    low, high = to(min(keep)), to(max(keep))
    reach = REACH * max(high - low, least)
    inside = [
        v
        for v in ends
        if math.isfinite(v) and (v > 0 or not log) and low - reach <= to(v) <= high + reach
    ]
    return min(keep + inside), max(keep + inside)


def mark_beyond(ax, x: float, ends: Iterable[float], text: Callable[[float], str]) -> list:
    """After the axis limits are set: for the whisker ends of `x` past them, an arrowhead at
    the edge they pass (the whisker, drawn to its true end, is cut there by the axes) and the
    true value, `text(value)`, just inside the edge. The farthest end per side is marked once.
    Returns the artists drawn (markers and texts), for tests."""
    bottom, top = sorted(ax.get_ylim())
    values = [v for v in ends if math.isfinite(v)]
    drawn = []
    for beyond, edge, marker, up in (
        ([v for v in values if v > top], top, "^", True),
        ([v for v in values if v < bottom], bottom, "v", False),
    ):
        if not beyond:
            continue
        value = max(beyond) if up else min(beyond)
        (arrow,) = ax.plot(
            [x],
            [edge],
            marker=marker,
            color=CLIP_COLOUR,
            markersize=6,
            clip_on=False,
            zorder=5,
            gid=CLIPPED,
        )
        label = ax.annotate(
            text(value),
            (x, edge),
            xytext=(0, -6 if up else 6),
            textcoords="offset points",
            ha="center",
            va="top" if up else "bottom",
            fontsize=VALUE_SIZE - 1,
            color=CLIP_COLOUR,
            zorder=5,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.85},
            gid=CLIPPED,
        )
        drawn += [arrow, label]
    return drawn


def style_axes(ax, grid_axis: str = "y") -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis=grid_axis, alpha=0.3)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=TICK_SIZE)


def empty_panel(ax, text: str) -> None:
    """A panel with nothing to draw says so, instead of showing empty axes."""
    ax.text(
        0.5,
        0.5,
        text,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=LABEL_SIZE,
        color=NOTE_COLOUR,
        wrap=True,
    )
    ax.set_xticks([])
    ax.set_yticks([])


def log_axis(ax, unit: str = "") -> None:
    """A log y axis labelled in plain numbers (`0.1×`, `200`), never `2×10²`; on an axis
    spanning less than two decades the 2s and 5s between the powers of ten are labelled too."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_yscale("log")
    low, high = ax.get_ylim()
    few = high / low < 300

    def major(value: float, _: int) -> str:
        return f"{value:g}{unit}"

    def minor(value: float, _: int) -> str:
        mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9), 6)
        return f"{value:g}{unit}" if few and mantissa in (2.0, 5.0) else ""

    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(2, 10))))
    ax.yaxis.set_major_formatter(FuncFormatter(major))
    ax.yaxis.set_minor_formatter(FuncFormatter(minor))
    ax.tick_params(axis="y", which="minor", labelsize=TICK_SIZE - 1)


# --- fitting text into the figure ------------------------------------------------------------
#
# Where text goes is known only once the figure is laid out (constrained layout sizes every
# panel around its labels), so plot.py lays it out, measures with the renderer that writes the
# file, and fixes what does not fit: a title wider than its place is wrapped, and tick labels
# that would overprint each other are staggered, stood upright or, as a last resort, thinned.


def fit_text(text, room: float, renderer, vertical: bool = False) -> bool:
    """Wrap `text` (a matplotlib Text) at spaces until it is at most `room` pixels wide (tall,
    for an upright axis label: `vertical`), keeping its own line breaks. Returns whether it
    changed."""

    def size() -> float:
        box = text.get_window_extent(renderer)
        return box.height if vertical else box.width

    extent = size()
    if extent <= room:
        return False
    lines = text.get_text().split("\n")
    longest = max(len(line) for line in lines)
    # A first guess from the size per character, then narrower until it fits.
    chars = max(int(longest * room / extent), 1)
    while True:
        wrapped = [part for line in lines for part in (textwrap.wrap(line, chars) or [""])]
        text.set_text("\n".join(wrapped))
        if chars <= 8 or size() <= room:
            return True
        chars -= 1


_GAP = 3  # pixels that must stay between two tick labels


def _label_boxes(ax, renderer, stagger: float) -> list[tuple[float, float, float, float]]:
    """(left, right, top, bottom) in pixels of each shown x tick label, tops aligned, every
    other one `stagger` pixels lower: where the next layout will put them."""
    boxes = []
    for index, label in enumerate(ax.get_xticklabels()):
        if not (label.get_visible() and label.get_text()):
            continue
        box = label.get_window_extent(renderer)
        top = -stagger if index % 2 else 0.0
        boxes.append((box.x0, box.x1, top, top - box.height))
    return boxes


def _overprint(ax, renderer, stagger: float = 0.0) -> bool:
    """Whether two x tick labels of `ax` would overlap (or come closer than _GAP)."""
    boxes = _label_boxes(ax, renderer, stagger)
    return any(
        a[0] < b[1] + _GAP and b[0] < a[1] + _GAP and a[3] < b[2] + _GAP and b[3] < a[2] + _GAP
        for a, b in itertools.combinations(boxes, 2)
    )


def _stagger(ax) -> float:
    """How much lower (pixels) every other tick label sits now (_set_ticks)."""
    ticks = ax.xaxis.get_major_ticks()
    if len(ticks) < 2:
        return 0.0
    return (ticks[1].get_pad() - ticks[0].get_pad()) * ax.figure.dpi / 72


def _set_ticks(ax, labels: list[str], upright: bool, stagger: float = 0.0) -> None:
    """The labels through the axis (a draw renews the Text objects from its formatter), upright
    or level, every other one `stagger` pixels lower."""
    import matplotlib

    ax.set_xticks(ax.get_xticks(), labels=labels, rotation=90 if upright else 0, ha="center")
    pad = matplotlib.rcParams["xtick.major.pad"]
    lower = stagger * 72 / ax.figure.dpi
    for index, tick in enumerate(ax.xaxis.get_major_ticks()):
        tick.set_pad(pad + (lower if index % 2 else 0.0))


def fit_ticks(ax, renderer) -> bool:
    """Make the x tick labels of `ax` readable side by side. In order, the first that fits:
    as they are; level with every other one a line of labels lower (staggered); upright
    (`fp16` / `[loss scale 1024]`, read bottom to top); upright on one line; upright with
    every k-th one shown, the fewest left out. A later pass (after the layout changed) goes on
    from where the last one stopped. Returns whether it changed anything."""
    stagger = _stagger(ax)
    if not _overprint(ax, renderer, stagger):
        return False
    labels = ax.get_xticklabels()
    texts = [t.get_text() for t in labels]
    upright = any(t.get_rotation() == 90 for t in labels)
    one_line = [" ".join(t.split()) for t in texts]
    options: list[tuple[list[str], bool, bool]] = []  # (labels, upright, staggered)
    if not upright and not stagger:
        options.append((texts, False, True))
    if not upright:
        options.append((texts, True, False))
    if one_line != texts or not upright:
        options.append((one_line, True, False))
    shown = [i for i, t in enumerate(one_line) if t]
    for step in range(2, len(shown) + 1):
        keep = set(shown[::step])
        options.append(([t if i in keep else "" for i, t in enumerate(one_line)], True, False))
    for option, stand, staggered in options:
        _set_ticks(ax, option, stand)
        lower = 0.0
        if staggered:
            boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
            lower = max(box.height for box in boxes) + _GAP
        if not _overprint(ax, renderer, lower):
            _set_ticks(ax, option, stand, lower)
            return True
    return True
