"""The per-step and per-epoch panels of `--plot`: the step-time distribution of each policy,
and the training-loss curve of each policy, per framework."""

from __future__ import annotations

import math
import statistics
import textwrap

from mpbench.compare.cells import CellSummary, PolicyGroup, Section
from mpbench.compare.plot_style import (
    LABEL_SIZE,
    NOTE_COLOUR,
    POLICY_MARKERS,
    TITLE_SIZE,
    VALUE_SIZE,
    Palette,
    empty_panel,
    log_axis,
    missing_text,
    offsets,
    policies,
    policy_colour,
    policy_label,
    style_axes,
)
from mpbench.results import Status

# Medians of the policies spanning more than this (slowest / fastest): a log axis.
LOG_SPREAD = 10.0
# Beyond this (slowest / fastest step) no axis can show the boxes: the panel says so.
MAX_SPAN = 1e30


def _steps_ms(cell: CellSummary) -> list[float]:
    """Every timed step of every finished repeat (warm-up already left out), in ms."""
    return [t * 1000 for r in cell.ok_records if r.step_time for t in r.step_time.raw_s]


def _counts(section: Section) -> str:
    """`35 steps × 3 repeats per box` when every box has as many; else the range."""
    steps, repeats = set(), set()
    for group in section.groups:
        for cell in group.cells.values():
            timed = [r for r in cell.ok_records if r.step_time and r.step_time.raw_s]
            if timed:
                steps.update(len(r.step_time.raw_s) for r in timed)
                repeats.add(len(timed))
    if not steps:
        return ""

    def span(values: set[int]) -> str:
        return str(min(values)) if len(values) == 1 else f"{min(values)}–{max(values)}"

    times = "" if repeats == {1} else f" × {span(repeats)} repeats"
    return f"{span(steps)} steps{times} per box"


def _wide(data: list[list[float]]) -> bool:
    """A log axis when the policies' medians differ more than tenfold, or when the steps of
    the panel (5th to 95th percentile) do: on a linear axis the fast ones would be a line."""
    medians = [statistics.median(d) for d in data]
    steps = sorted(t for d in data for t in d)
    p5, p95 = steps[int(0.05 * (len(steps) - 1))], steps[int(0.95 * (len(steps) - 1))]
    return min(medians) > 0 and (max(medians) / min(medians) > LOG_SPREAD or p95 / p5 > LOG_SPREAD)


def step_time_panel(ax, section: Section, palette: Palette) -> None:
    names = policies(section)
    shifts, width = offsets(len(section.groups))
    data, positions, colours, missing = [], [], [], []
    for index, group in enumerate(section.groups):
        for x, policy in enumerate(names):
            cell = group.cells.get(policy)
            if cell is None:
                continue
            steps = _steps_ms(cell)
            if steps:
                data.append(steps)
                positions.append(x + shifts[index])
                colours.append(palette.colour(group.key))
            else:
                text = missing_text(cell, group)
                missing.append((x + shifts[index], "no steps" if text == "n/a" else text))
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([policy_label(p) for p in names])
    ax.set_xlim(-0.6, len(names) - 0.4)
    style_axes(ax)
    counts = _counts(section)
    ax.set_title(
        "step time per policy" + (f"\n({counts})" if counts else ""),
        fontsize=TITLE_SIZE,
        fontweight="bold",
    )
    if not data:
        empty_panel(ax, "no timed steps: no cell finished")
        return
    fastest, slowest = min(min(d) for d in data), max(max(d) for d in data)
    if not math.isfinite(slowest * 1000) or slowest / fastest > MAX_SPAN:
        decades = math.log10(slowest) - math.log10(fastest)
        empty_panel(ax, f"step times span {decades:.0f} decades\n(too wide to draw)")
        return
    boxes = ax.boxplot(
        data,
        positions=positions,
        widths=width * 0.75,
        patch_artist=True,
        manage_ticks=False,
        medianprops={"color": "black", "linewidth": 1.4},
        flierprops={"marker": ".", "markersize": 3, "alpha": 0.5, "markeredgecolor": "none"},
        whiskerprops={"linewidth": 1},
        capprops={"linewidth": 1},
    )
    for patch, flier, colour in zip(boxes["boxes"], boxes["fliers"], colours, strict=True):
        patch.set_facecolor(colour)
        patch.set_alpha(0.75)
        flier.set_markerfacecolor(colour)
    log = _wide(data)
    if log:
        ax.set_yscale("log")
        log_axis(ax)
        ax.set_ylabel("ms per synced step (log scale)", fontsize=LABEL_SIZE)
    else:
        ax.set_ylim(0, max(max(d) for d in data) * 1.08)
        ax.set_ylabel("ms per synced step", fontsize=LABEL_SIZE)
    bottom = ax.get_ylim()[0]
    for x, text in missing:
        ax.text(
            x,
            bottom,
            text,
            rotation=90,
            ha="center",
            va="bottom",
            fontsize=VALUE_SIZE,
            color=NOTE_COLOUR,
        )


# --- training loss -------------------------------------------------------------------------


def _curves(cell: CellSummary) -> list[list[float]]:
    """Per-epoch training losses of each repeat that recorded any (a diverged repeat too: its
    curve shows where it went)."""
    return [
        list(r.accuracy.train_loss_per_epoch)
        for r in cell.records
        if r.accuracy.train_loss_per_epoch and r.status in (Status.OK, Status.DIVERGED)
    ]


def _mean_curve(curves: list[list[float]]) -> list[float]:
    longest = max(len(c) for c in curves)
    return [statistics.fmean(c[i] for c in curves if len(c) > i) for i in range(longest)]


def _loss_note(cell: CellSummary) -> str:
    if cell.ok:
        return "no loss recorded"
    return cell.status


def loss_panel(ax, section: Section, group: PolicyGroup, name: str) -> None:
    names = [p for p in policies(section) if p in group.cells]
    curves = {p: _curves(group.cells[p]) for p in names}
    epochs = max((len(c) for cs in curves.values() for c in cs), default=0)
    style_axes(ax, grid_axis="both")
    label = "\n".join(textwrap.wrap(name, 28))
    if epochs == 0:
        ax.set_title(f"{label}\ntraining loss", fontsize=TITLE_SIZE, fontweight="bold")
        empty_panel(ax, "no training loss recorded")
        return
    if epochs == 1:
        title = f"{label}\ntraining loss (1 epoch: points)"
        _loss_points(ax, names, group, curves)
    else:
        title = f"{label}\ntraining loss per epoch"
        _loss_lines(ax, names, group, curves, epochs)
    ax.set_title(title, fontsize=TITLE_SIZE, fontweight="bold")
    ax.set_ylabel("training loss", fontsize=LABEL_SIZE)


def _loss_points(ax, names: list[str], group: PolicyGroup, curves: dict) -> None:
    """One epoch: a point per repeat at its policy, the mean as a bar-less marker."""
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([policy_label(p) for p in names])
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.grid(axis="x", visible=False)
    values = [c[0] for cs in curves.values() for c in cs]
    low, high = min(values), max(values)
    span = max(high - low, abs(high) * 0.05, 1e-6)  # 1 % apart must not fill the axis
    ax.set_ylim(low - 0.45 * span, high + 0.35 * span)
    for x, policy in enumerate(names):
        colour = policy_colour(policy, x)
        finals = [c[0] for c in curves[policy]]
        if not finals:
            ax.text(
                x,
                ax.get_ylim()[0],
                _loss_note(group.cells[policy]),
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=VALUE_SIZE,
                color=NOTE_COLOUR,
            )
            continue
        marker = _marker(policy)
        if len(finals) > 1:
            ax.plot([x] * len(finals), finals, marker, color=colour, alpha=0.4, markersize=5)
        mean = statistics.fmean(finals)
        ax.plot(x, mean, marker, color=colour, markersize=8, zorder=3)
        ax.annotate(
            f"{mean:.4g}",
            (x, mean),
            xytext=(9, 0),
            textcoords="offset points",
            va="center",
            fontsize=VALUE_SIZE,
        )


def _marker(policy: str) -> str:
    return POLICY_MARKERS.get(policy, "o")


def _loss_lines(ax, names: list[str], group: PolicyGroup, curves: dict, epochs: int) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    handles, labels = [], []
    for index, policy in enumerate(names):
        colour = policy_colour(policy, index)
        marker = _marker(policy)
        own = curves[policy]
        if not own:
            handles.append(Line2D([], [], linestyle="none"))
            labels.append(f"{policy_label(policy)}: {_loss_note(group.cells[policy])}")
            continue
        if len(own) > 1:
            for curve in own:
                xs = range(1, len(curve) + 1)
                ax.plot(xs, curve, "-", color=colour, alpha=0.3, linewidth=1)
        mean = _mean_curve(own)
        (line,) = ax.plot(
            range(1, len(mean) + 1),
            mean,
            "-",
            marker=marker,
            color=colour,
            linewidth=2,
            markersize=6,
            zorder=3,
        )
        handles.append(line)
        cell = group.cells[policy]
        suffix = f" (mean of {len(own)})" if len(own) > 1 else ""
        if not cell.all_ok:
            suffix += f" ({cell.status})"
        labels.append(policy_label(policy) + suffix)
    ax.set_xlabel("epoch", fontsize=LABEL_SIZE)
    ax.set_xlim(0.7, epochs + 0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(handles, labels, loc="best", fontsize=8, framealpha=0.85, handlelength=1.6)
