"""The per-step and per-epoch panels of `--plot`: the step-time distribution of each policy
(a contended cell's box hatched, style.mark_contended), the training-loss curve of each
policy, per framework, and, from the telemetry side files (v4 runs), the per-step training
loss and the fp16 loss-scale trajectory per framework."""

from __future__ import annotations

import math
import statistics

from mpbench.compare.plot.style import (
    LABEL_SIZE,
    NOTE_COLOUR,
    POLICY_MARKERS,
    TITLE_SIZE,
    VALUE,
    VALUE_SIZE,
    Palette,
    empty_panel,
    log_axis,
    mark_beyond,
    mark_contended,
    missing_text,
    offsets,
    policies,
    policy_label,
    row_colours,
    sane_range,
    style_axes,
    tick_label,
)
from mpbench.compare.summary import fmt
from mpbench.compare.summary.cells import (
    CellSummary,
    PolicyGroup,
    Section,
)
from mpbench.results import CellRecord, Status
from mpbench.results.identity import Row, record_key
from mpbench.results.sidefile import SideFile

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
    data, positions, colours, missing, busy = [], [], [], [], []
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
                busy.append(cell.contended)  # the table's `contended` status
            else:
                text = missing_text(cell, group)
                missing.append((x + shifts[index], "no steps" if text == "n/a" else text))
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([tick_label(p) for p in names])
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
    for patch, flier, colour, contended in zip(
        boxes["boxes"], boxes["fliers"], colours, busy, strict=True
    ):
        patch.set_facecolor(colour)
        patch.set_alpha(0.75)
        flier.set_markerfacecolor(colour)
        if contended:
            mark_contended(patch)
    log = _wide(data)
    # The boxes (quartiles) set the scale (style.sane_range); a box whisker or outlier
    # step past it (a GC pause of 2 s among 2 ms steps) is cut at the edge and marked.
    quartiles = [y for line in boxes["whiskers"] for y in line.get_ydata()[:1]]
    ends = [y for line in boxes["whiskers"] for y in line.get_ydata()[1:]]
    ends += [y for flier in boxes["fliers"] for y in flier.get_ydata()]
    low, high = sane_range(quartiles, ends, origin=None if log else 0.0, log=log)
    if log:
        ax.set_yscale("log")
        ax.set_ylim(low / 1.25, high * 1.25)
        log_axis(ax)
        ax.set_ylabel("ms per synced step (log scale)", fontsize=LABEL_SIZE)
    else:
        ax.set_ylim(0, high * 1.08)
        ax.set_ylabel("ms per synced step", fontsize=LABEL_SIZE)
    for index, x in enumerate(positions):
        own = [*boxes["whiskers"][2 * index : 2 * index + 2], boxes["fliers"][index]]
        mark_beyond(ax, x, [y for line in own for y in line.get_ydata()], _ms_text)
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


def _ms_text(value: float) -> str:
    """A step cut at the axis edge, in ms as the tables write it: `2000`, `41.2`."""
    return fmt.ms(value / 1000)


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
    """`name` is the group's, as the legend says it; wrapped to the panel when the figure is
    laid out (plot.py)."""
    names = [p for p in policies(section) if p in group.cells]
    curves = {p: _curves(group.cells[p]) for p in names}
    epochs = max((len(c) for cs in curves.values() for c in cs), default=0)
    colours = row_colours(policies(section))
    style_axes(ax, grid_axis="both")
    if epochs == 0:
        ax.set_title(f"{name}\ntraining loss", fontsize=TITLE_SIZE, fontweight="bold")
        empty_panel(ax, "no training loss recorded")
        return
    if epochs == 1:
        title = f"{name}\ntraining loss (1 epoch: points)"
        _loss_points(ax, names, group, curves, colours)
    else:
        title = f"{name}\ntraining loss per epoch"
        _loss_lines(ax, names, group, curves, epochs, colours)
    ax.set_title(title, fontsize=TITLE_SIZE, fontweight="bold")
    ax.set_ylabel("training loss", fontsize=LABEL_SIZE)


def _loss_points(
    ax, names: list[str], group: PolicyGroup, curves: dict, colours: dict[str, str]
) -> None:
    """One epoch: a point per repeat at its policy, the mean as a bar-less marker."""
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([tick_label(p) for p in names])
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.grid(axis="x", visible=False)
    values = [c[0] for cs in curves.values() for c in cs]
    low, high = min(values), max(values)
    span = max(high - low, abs(high) * 0.05, 1e-6)  # 1 % apart must not fill the axis
    ax.set_ylim(low - 0.45 * span, high + 0.35 * span)
    for x, policy in enumerate(names):
        colour = colours[policy]
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
            gid=VALUE,
        )


def _marker(row: Row) -> str:
    """The policy's marker, for its variants too: the colour tells them apart."""
    return POLICY_MARKERS.get(row.policy, "o")


def _loss_lines(
    ax, names: list[str], group: PolicyGroup, curves: dict, epochs: int, colours: dict[str, str]
) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    handles, labels = [], []
    for policy in names:
        colour = colours[policy]
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


# --- per-step numerics from the telemetry side files ---------------------------------------


def _float(value) -> float:
    """A side-file value for drawing: null (not recorded, non-finite) becomes a gap."""
    return math.nan if value is None else float(value)


def _side_curves(cell: CellSummary, side_files: dict) -> list[tuple[CellRecord, SideFile]]:
    """(record, side file) of each repeat that has one, finished or diverged: a diverged
    repeat's curve ends where it stopped."""
    out = []
    for record in cell.records:
        side = side_files.get(record_key(record))
        if side is not None and record.status in (Status.OK, Status.DIVERGED):
            out.append((record, side))
    return out


def _has_scale(side: SideFile) -> bool:
    return any(v is not None for v in side.numerics.columns.get("loss_scale", []))


def has_step_losses(group: PolicyGroup, side_files: dict) -> bool:
    return any(_side_curves(cell, side_files) for cell in group.cells.values())


def has_loss_scales(group: PolicyGroup, side_files: dict) -> bool:
    return any(
        _has_scale(side)
        for cell in group.cells.values()
        for _, side in _side_curves(cell, side_files)
    )


def _diverged_at(record: CellRecord, side: SideFile) -> int | None:
    """The step a diverged repeat stopped at: its record says, else its last kept step."""
    if record.status is not Status.DIVERGED:
        return None
    if record.divergence is not None:
        return record.divergence.step
    steps = side.numerics.columns.get("step") or []
    return steps[-1] if steps else None


def _curve_label(policy: str, curves: list[tuple[CellRecord, SideFile]]) -> str:
    stops = [s for s in (_diverged_at(r, side) for r, side in curves) if s is not None]
    label = policy_label(policy)
    if len(curves) > 1:
        label += f" ({len(curves)} repeats)"
    if stops:
        label += f" (diverged at step {', '.join(str(s) for s in stops)})"
    return label


def _stride_text(curves: list[tuple[CellRecord, SideFile]]) -> str:
    strides = {side.numerics.stride for _, side in curves}
    if strides == {1} or not strides:
        return "optimizer step"
    shown = "/".join(str(s) for s in sorted(strides))
    return f"optimizer step (1 in {shown} kept)"


def _per_step_lines(ax, section: Section, group: PolicyGroup, side_files: dict, column: str):
    """One line per repeat of each policy row (legend once per row), in the row's colour
    (style.row_colours); a fallback row dashed. Yields the values drawn, for the axis scale."""
    names = [p for p in policies(section) if p in group.cells]
    colours = row_colours(policies(section))
    drawn: list[float] = []
    strides: list[tuple[CellRecord, SideFile]] = []
    for policy in names:
        cell = group.cells[policy]
        curves = [(r, s) for r, s in _side_curves(cell, side_files)]
        if column == "loss_scale":
            curves = [(r, s) for r, s in curves if _has_scale(s)]
        if not curves:
            continue
        strides += curves
        colour = colours[policy]
        style = "--" if policy.fallback else "-"
        thin = len(curves) > 1
        label = _curve_label(policy, curves)
        for number, (record, side) in enumerate(curves):
            columns = side.numerics.columns
            steps = columns["step"]
            values = [_float(v) for v in columns[column]]
            if column == "loss_scale":
                values = [v if v > 0 else math.nan for v in values]
            ax.plot(
                steps,
                values,
                style,
                color=colour,
                linewidth=1.0 if thin else 1.6,
                alpha=0.7 if thin else 1.0,
                label=label if number == 0 else "_nolegend_",
            )
            drawn += [v for v in values if math.isfinite(v)]
            stop = _diverged_at(record, side)
            finite = [(s, v) for s, v in zip(steps, values, strict=True) if math.isfinite(v)]
            if stop is not None and finite:
                ax.scatter(*finite[-1], marker="X", s=60, color=colour, zorder=4)
            if column == "loss_scale":
                skipped = [
                    (s, v)
                    for s, v, skip in zip(steps, values, columns["skipped"], strict=True)
                    if skip and math.isfinite(v)
                ]
                if skipped:
                    xs, ys = zip(*skipped, strict=True)
                    ax.scatter(xs, ys, marker="o", s=14, facecolors="none", edgecolors=colour)
    return drawn, strides


def step_loss_panel(ax, section: Section, group: PolicyGroup, name: str, side_files: dict):
    """The training loss at every kept step, per policy (telemetry side files)."""
    style_axes(ax, grid_axis="both")
    ax.set_title(f"{name}\ntraining loss per step", fontsize=TITLE_SIZE, fontweight="bold")
    drawn, curves = _per_step_lines(ax, section, group, side_files, "loss")
    positive = [v for v in drawn if v > 0]
    if not drawn:
        empty_panel(ax, "no finite loss in the telemetry")
        return
    if positive and len(positive) == len(drawn) and max(positive) / min(positive) > LOG_SPREAD:
        log_axis(ax)
        ax.set_ylabel("training loss (log scale)", fontsize=LABEL_SIZE)
    else:
        ax.set_ylabel("training loss", fontsize=LABEL_SIZE)
    ax.set_xlabel(_stride_text(curves), fontsize=LABEL_SIZE)
    ax.legend(loc="best", fontsize=8, framealpha=0.85, handlelength=1.6)


def loss_scale_panel(ax, section: Section, group: PolicyGroup, name: str, side_files: dict):
    """The dynamic loss scale at every kept step (fp16), log2 axis; rings: skipped steps."""
    from matplotlib.ticker import FuncFormatter

    style_axes(ax, grid_axis="both")
    ax.set_title(f"{name}\nloss scale (o: skipped step)", fontsize=TITLE_SIZE, fontweight="bold")
    drawn, curves = _per_step_lines(ax, section, group, side_files, "loss_scale")
    if not drawn:
        empty_panel(ax, "no loss scale in the telemetry")
        return
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(
        FuncFormatter(lambda v, _: f"2^{math.log2(v):.0f}" if v > 0 else "")
    )
    ax.set_ylabel("loss scale (log2)", fontsize=LABEL_SIZE)
    ax.set_xlabel(_stride_text(curves), fontsize=LABEL_SIZE)
    ax.legend(loc="best", fontsize=8, framealpha=0.85, handlelength=1.6)
