"""`--plot FILE.png`: grouped bars of speed-up, memory and accuracy per policy.

One row of three panels per workload (and machine); in each panel the policies are groups
of bars, one bar per framework, each labelled with its value. Cells that did not finish are
marked where their bar would be, so a missing bar is never mistaken for a zero.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

from mpbench.compare import fmt
from mpbench.compare.cells import CellSummary, PolicyGroup, Section
from mpbench.compare.estimate import WITHIN_RUN, Estimate
from mpbench.compare.labels import short_fingerprint
from mpbench.compare.report import Report
from mpbench.compare.rows import WITHIN_RUN_NOTE, interval_kinds
from mpbench.errors import InvalidInput
from mpbench.policies import BASELINE, POLICIES

# Fixed colours per framework, far apart so the two read apart at a glance (and in grey).
_COLOURS = {"torch": "#d1495b", "tensorflow": "#2e6f9e"}
_OTHER = ["#66a182", "#edae49", "#8d6a9f", "#6c757d"]
_SHORT = {"float32": "float32", "tf32": "tf32", "mixed_float16": "fp16", "mixed_bfloat16": "bf16"}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise InvalidInput("--plot needs matplotlib: pip install 'mpbench[plot]'") from None
    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    return plt


def _policies(section: Section) -> list[str]:
    seen = {p for g in section.groups for p in g.cells}
    ordered = [p for p in POLICIES if p in seen]
    return ordered + sorted(seen - set(ordered))


def _colour(framework: str, index: int) -> str:
    return _COLOURS.get(framework, _OTHER[index % len(_OTHER)])


def _memory_unit(section: Section) -> tuple[float, str, str]:
    cells = [c for g in section.groups for c in g.cells.values()]
    peaks = [c.memory_bytes.value for c in cells if c.memory_bytes]
    kinds = {c.memory_kind for c in cells if c.memory_kind}
    kind = kinds.pop() if len(kinds) == 1 else "memory (kinds differ between cells)"
    if peaks and max(peaks) >= 2**30:
        return 2**30, "GiB", kind
    return 2**20, "MiB", kind


def _caption(report: Report) -> str:
    """What the whiskers are, kind by kind, in the tables' words."""
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
    return (
        f"bars: values · whiskers: 95 % intervals, {whiskers} · skipped or failed cells are "
        "named where their bar would be"
    )


def _status_mark(cell: CellSummary) -> str:
    return cell.status if not cell.ok else ""


def write_plot(report: Report, path: Path) -> Path:
    plt = _pyplot()
    sections = report.sections
    rows = len(sections)
    fig, axes = plt.subplots(rows, 3, figsize=(16, 4.6 * rows + 0.8), squeeze=False)
    for row, section in enumerate(sections):
        _draw_section(section, axes[row], report)
    machines = {(s.device, s.fingerprint) for s in sections}
    where = "; ".join(f"{d} [{short_fingerprint(f)}]" for d, f in sorted(machines))
    fig.suptitle(
        f"Mixed precision vs float32 on {where}   (runs: {', '.join(report.runs)})",
        fontsize=14,
        fontweight="bold",
        y=1 - 0.25 / fig.get_figheight(),
    )
    frameworks = list(dict.fromkeys(g.key.framework for s in sections for g in s.groups))
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=_colour(name, i)) for i, name in enumerate(frameworks)
    ]
    top = 1 - 1.1 / fig.get_figheight()  # room for the title and the legend, whatever the rows
    fig.legend(
        handles,
        frameworks,
        loc="upper center",
        bbox_to_anchor=(0.5, top + 0.35 / fig.get_figheight()),
        ncol=len(frameworks),
        fontsize=12,
        frameon=False,
    )
    fig.text(
        0.5,
        0.004,
        "\n".join(textwrap.wrap(_caption(report), 190)),
        ha="center",
        va="bottom",
        fontsize=9,
        color="#444444",
    )
    fig.tight_layout(rect=(0, 0.55 / fig.get_figheight(), 1, top))
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InvalidInput(f"cannot write --plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return path


def _draw_section(section: Section, axes, report: Report) -> None:
    policies = _policies(section)
    scale, unit, source = _memory_unit(section)
    panels = [
        ("speed-up vs float32", "× (float32 = 1; higher = faster)", _speedup, "{:.2f}×"),
        (
            "memory",
            f"{source}\n{unit} (lower = less)",
            _memory(scale),
            "{:.2f}" if unit == "GiB" else "{:.0f}",
        ),
        ("test accuracy", "% (higher = better)", _accuracy, "{:.2f}"),
    ]
    for ax, (title, ylabel, value_of, label) in zip(axes, panels, strict=True):
        _bars(ax, section, policies, value_of, label)
        ax.set_title(f"{section.workload}: {title}", fontsize=13, fontweight="bold")
        ax.set_ylabel(ylabel, fontsize=10)
        ax.set_xticks(range(len(policies)))
        ax.set_xticklabels([_SHORT.get(p, p) for p in policies], fontsize=11)
        ax.spines[["top", "right"]].set_visible(False)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0].axhline(1.0, color="black", linewidth=1, linestyle="--", zorder=1.5)
    axes[2].set_ylim(0, 105)


def _speedup(group: PolicyGroup, policy: str) -> Estimate | None:
    if policy == BASELINE:
        return Estimate.point(1.0) if group.reference is not None else None
    return group.speedup(policy)


def _memory(scale: float):
    def value(group: PolicyGroup, policy: str) -> Estimate | None:
        cell = group.cells.get(policy)
        if cell is None or not cell.ok or cell.memory_bytes is None:
            return None
        return cell.memory_bytes.scaled(1 / scale)

    return value


def _accuracy(group: PolicyGroup, policy: str) -> Estimate | None:
    cell = group.cells.get(policy)
    if cell is None or not cell.ok or cell.accuracy is None:
        return None
    return cell.accuracy.scaled(100)


def _drawable(estimate: Estimate) -> bool:
    return all(math.isfinite(v) for v in (estimate.value, estimate.low, estimate.high))


def _bars(ax, section: Section, policies: list[str], value_of, label: str) -> None:
    """One bar per framework and policy, a whisker for its 95 % interval, its value."""
    count = len(section.groups)
    width = 0.8 / max(count, 1)
    tallest = 0.0
    for index, group in enumerate(section.groups):
        offset = (index - (count - 1) / 2) * width
        for x, policy in enumerate(policies):
            cell = group.cells.get(policy)
            if cell is None:
                continue
            estimate = value_of(group, policy)
            position = x + offset
            if estimate is not None and not _drawable(estimate):
                estimate = None  # an overflowed ratio has no bar height: named, not drawn
            if estimate is None:
                ax.text(
                    position,
                    0,
                    _status_mark(cell) or "n/a",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=9,
                    color="#555555",
                )
                continue
            value, top = estimate.value, max(estimate.high, estimate.value)
            tallest = max(tallest, top)
            ax.bar(position, value, width * 0.92, color=_colour(group.key.framework, index))
            if estimate.high > estimate.low:
                ax.errorbar(
                    position,
                    value,
                    yerr=[[value - estimate.low], [estimate.high - value]],
                    color="#222222",
                    capsize=3,
                    linewidth=1,
                )
            mark = fmt.WITHIN_RUN_MARK if estimate.kind == WITHIN_RUN else ""
            ax.text(
                position,
                top,
                label.format(value) + mark,
                ha="center",
                va="bottom",
                fontsize=9,
                zorder=4,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.6, "alpha": 0.8},
            )
    if tallest > 0:
        ax.set_ylim(0, tallest * 1.18)
