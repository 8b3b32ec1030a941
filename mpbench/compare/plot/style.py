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
)
from mpbench.compare.summary.comparison import short
from mpbench.compare.summary.estimate import Estimate
from mpbench.policies import POLICIES

# Fixed colours per framework, far apart so the two read apart at a glance (and in grey).
FRAMEWORK_COLOURS = {"torch": "#d1495b", "tensorflow": "#2e6f9e"}
_OTHER = ["#66a182", "#edae49", "#8d6a9f", "#6c757d"]
# A framework's further groups (its other configs) take the next colours of its family, torch
# warm and TensorFlow cool (Tableau 10's hues, made to be told apart), never shades of one hue:
# two lighter reds read as one.
GROUP_FAMILIES = {
    "torch": ["#d1495b", "#f28e2b", "#9c755f", "#ff9da7", "#7a1f2b", "#edc948"],
    "tensorflow": ["#2e6f9e", "#76b7b2", "#59a14f", "#b07aa1", "#1b2a5e", "#6a3d9a"],
}
# No two groups' colours closer than this (CIE76 colour difference, ΔE in CIELAB: about 2.3 is
# the least an eye notices side by side; 25 is clearly another colour).
MIN_GROUP_DISTANCE = 25.0
# Per policy, for the loss curves (where a panel is one framework): the policies' own
# (mpbench.policies); a policy without a colour takes a spare one by its row's place.
POLICY_COLOURS = {p.name: p.colour for p in POLICIES.values() if p.colour is not None}
POLICY_MARKERS = {p.name: p.marker for p in POLICIES.values()}
NOTE_COLOUR = "#555555"
TITLE_SIZE = 11.5
LABEL_SIZE = 9.5
TICK_SIZE = 9.5
VALUE_SIZE = 8
MIN_TEXT_SIZE = 6.5  # a title or label whose words do not fit is made smaller, down to this
VALUE = "value"  # the gid of a value written at its bar or point (fit_values)

# A cell the table's status calls `contended` (CellSummary.contended: a repeat ran beside other
# work) has its timing drawn hatched: its speed-up bar (also where its float32 is contended:
# the ratio rests on both) and its step-time box.
CONTENDED = "contended"  # the gid of a hatched bar or box
CONTENDED_HATCH = "////"
CONTENDED_EDGE = "#222222"
CONTENDED_LABEL = "contended (hatched): re-measure on a quiet machine"


def mark_contended(patch) -> None:
    """Hatch a bar or box of a contended cell (its outline and hatch in CONTENDED_EDGE)."""
    patch.set_hatch(CONTENDED_HATCH)
    patch.set_edgecolor(CONTENDED_EDGE)
    patch.set_linewidth(0.8)
    patch.set_gid(CONTENDED)


def contended_patch():
    """The legend's entry for hatched cells."""
    from matplotlib.patches import Patch

    return Patch(facecolor="white", edgecolor=CONTENDED_EDGE, hatch=CONTENDED_HATCH, linewidth=0.8)


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


def _lab(colour: str) -> tuple[float, float, float]:
    """CIELAB (D65) of a `#rrggbb` colour."""

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def colour_distance(a: str, b: str) -> float:
    """How far apart two `#rrggbb` colours look: CIE76 ΔE, the distance in CIELAB."""
    return math.dist(_lab(a), _lab(b))


def _hues() -> list[str]:
    """Evenly spaced hues at two lightnesses: where the families run out."""
    import colorsys

    out = []
    for lightness, saturation in ((0.45, 0.65), (0.7, 0.55)):
        for step in range(24):
            rgb = colorsys.hls_to_rgb(step / 24, lightness, saturation)
            out.append("#" + "".join(f"{round(c * 255):02x}" for c in rgb))
    return out


def group_colour(framework: str, index: int, taken: list[str]) -> str:
    """The colour of a framework's next group: the first of its family (then of the others,
    then of evenly spaced hues) at least MIN_GROUP_DISTANCE from every colour `taken`; if none
    is, the one farthest from them. `index`: the framework's position, for an unknown one."""
    own = GROUP_FAMILIES.get(framework, [framework_colour(framework, index)])
    # Another framework's own colour is kept for it (torch's tenth group never takes
    # TensorFlow's blue), as are the other families' colours until the hues run out.
    reserved = [family[0] for name, family in GROUP_FAMILIES.items() if name != framework]
    others = [c for family in GROUP_FAMILIES.values() for c in family[1:]] + _OTHER
    candidates = list(dict.fromkeys([*own, *_OTHER, *_hues(), *others]))

    def nearest(colour: str) -> float:
        return min((colour_distance(colour, t) for t in [*taken, *reserved]), default=math.inf)

    for colour in candidates:
        if nearest(colour) >= MIN_GROUP_DISTANCE:
            return colour
    return max(candidates, key=nearest)


class Palette:
    """One colour per framework (and config, where one framework ran several), the same in
    every panel and in the figure's legend; no two closer than MIN_GROUP_DISTANCE where the
    palette has colours enough (group_colour). `label_of` names a group as the tables do."""

    def __init__(self, keys: Iterable[GroupKey], label_of: Callable[[GroupKey], str]) -> None:
        self._label_of = label_of
        self._colours: dict[str, str] = {}
        frameworks: list[str] = []
        for key in keys:
            label = label_of(key)
            if label in self._colours:
                continue
            if key.framework not in frameworks:
                frameworks.append(key.framework)
            index = frameworks.index(key.framework)
            self._colours[label] = group_colour(key.framework, index, list(self._colours.values()))

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
        policy = row.policy
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


def wrap_words(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` characters, broken at spaces only: never inside a
    word, a name (`[accumulate=2]`) or a run id (`20260301-101500-cpu`); a longer word has a
    line of its own."""
    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def fit_text(text, room: float, renderer, vertical: bool = False) -> bool:
    """Wrap `text` (a matplotlib Text) at spaces until it is at most `room` pixels wide (tall,
    for an upright axis label: `vertical`), keeping its own line breaks and never breaking a
    word (wrap_words); when its longest word alone is too wide, its type is made smaller, down
    to MIN_TEXT_SIZE. Returns whether it changed."""

    def size() -> float:
        box = text.get_window_extent(renderer)
        return box.height if vertical else box.width

    extent = size()
    if extent <= room:
        return False
    lines = text.get_text().split("\n")
    longest = max(len(line) for line in lines)
    # A first guess from the size per character, then narrower until it fits, or until every
    # line too long is one word (no break left that would help).
    chars = max(int(longest * room / extent), 1)
    while chars >= 1:
        wrapped = [part for line in lines for part in (wrap_words(line, chars) or [""])]
        text.set_text("\n".join(wrapped))
        extent = size()
        if extent <= room:
            return True
        per_char = extent / max(len(line) for line in wrapped)
        if all(" " not in line for line in wrapped if len(line) * per_char > room):
            break
        chars -= 1
    while size() > room and text.get_fontsize() > MIN_TEXT_SIZE:
        text.set_fontsize(max(text.get_fontsize() - 0.5, MIN_TEXT_SIZE))
    return True


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


# --- values written at their bars and points ---------------------------------------------------
#
# A value is an annotation at its bar's end (or whisker tip, or point) in data coordinates, a
# few points beside it: it moves with its bar whatever the axis scale. What crowding changes
# is its direction and size, never its anchor.


def _value_labels(ax) -> list:
    return [t for t in ax.texts if t.get_gid() == VALUE and t.get_visible() and t.get_text()]


def _overlap(a, b, gap: float = 1.0) -> bool:
    return a.x0 < b.x1 + gap and b.x0 < a.x1 + gap and a.y0 < b.y1 + gap and b.y0 < a.y1 + gap


def _obstacles(ax, renderer) -> list[tuple[float, object]]:
    """(x in data, box in pixels) of each bar and each point marker of `ax`: what a value
    must not cover, unless it is its own (at its own x)."""
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Bbox

    out: list[tuple[float, object]] = []
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible():
            out.append((patch.get_x() + patch.get_width() / 2, patch.get_window_extent(renderer)))
    for line in ax.get_lines():
        if not line.get_visible() or line.get_marker() in (None, "None", "", " "):
            continue
        half = line.get_markersize() * ax.figure.dpi / 72 / 2
        for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
            px, py = ax.transData.transform((float(x), float(y)))
            out.append((float(x), Bbox([[px - half, py - half], [px + half, py + half]])))
    return out


def _crowded(labels, boxes, obstacles) -> bool:
    """Whether two values overprint each other, or a value covers another's bar or point."""
    if any(_overlap(a, b) for a, b in itertools.combinations(boxes, 2)):
        return True
    return any(
        abs(x - float(t.xy[0])) > 1e-9 and _overlap(box, other, gap=0.0)
        for t, box in zip(labels, boxes, strict=True)
        for x, other in obstacles
    )


def fit_values(ax, renderer) -> bool:
    """Keep the values of `ax` (texts with gid VALUE) readable beside what they belong to:
    where two would overprint each other, or one would cover another's bar or point, every
    value of the panel stands upright (a bar's just past its end, a point's beside it), then
    in smaller type, down to MIN_TEXT_SIZE; a
    value that would stick out of the panel goes to the other side of its anchor (inside its
    bar). Returns whether it changed anything."""
    labels = _value_labels(ax)
    if not labels:
        return False
    changed = False
    obstacles = _obstacles(ax, renderer)

    def boxes() -> list:
        return [t.get_window_extent(renderer) for t in labels]

    if _crowded(labels, boxes(), obstacles):
        if any(t.get_rotation() != 90 for t in labels):
            for t in labels:
                t.set_rotation(90)
            changed = True
        while (
            _crowded(labels, boxes(), obstacles)
            and min(t.get_fontsize() for t in labels) > MIN_TEXT_SIZE
        ):
            for t in labels:
                t.set_fontsize(max(t.get_fontsize() - 0.5, MIN_TEXT_SIZE))
            changed = True
    inside = ax.bbox
    for t, box in zip(labels, boxes(), strict=True):
        va = t.get_verticalalignment()
        out = (va == "bottom" and box.y1 > inside.y1) or (va == "top" and box.y0 < inside.y0)
        if out and not getattr(t, "_mpbench_flipped", False):  # once: no see-saw
            dx, dy = t.xyann
            t.xyann = (dx, -dy)
            t.set_verticalalignment("top" if va == "bottom" else "bottom")
            t._mpbench_flipped = True
            changed = True
    return changed
