"""Display of wide ranges (issue 22, item 9): intervals with significant figures in every text
format (never `0.00–3.95×`), and plot axes clipped to the values, with an arrow and the true
end where a whisker or a step leaves them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from builders import record, write_run
from compare_helpers import whiskers

from mpbench.compare import CompareOptions, build_report, render
from mpbench.compare.summary import fmt
from mpbench.compare.summary.estimate import REPEATS, WITHIN_RUN, Estimate
from mpbench.results import CellRecord, StepTimeStats, read_records

# --- the formatting rule -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0031, "0.0031"),  # tiny: two significant figures, never 0.00
        (0.000123, "0.00012"),
        (0.05, "0.050"),
        (0.18, "0.18"),  # below 1: two decimals as before
        (0.95, "0.95"),
        (1.0, "1.00"),
        (3.95, "3.95"),
        (9.996, "10.0"),  # rounding up into the next decade keeps three figures
        (70.11, "70.1"),  # large: three figures, no noise digits
        (307.64, "308"),
        (12_500.4, "12500"),
        (0.0, "0.00"),
        (-0.0031, "-0.0031"),
    ],
)
def test_significant_keeps_two_to_three_figures(value: float, text: str) -> None:
    assert fmt.significant(value) == text


def test_extreme_bounds_are_written_in_scientific_notation() -> None:
    # What a t-interval of two repeats on a busy machine can reach: digits there are noise.
    assert fmt.ratio_range(1.1e-13, 7.41412135e10) == "1.1e-13–7.4e+10×"
    assert fmt.significant(0.00012) == "0.00012" and fmt.significant(99_999.0) == "99999"


def test_significant_spells_non_finite_values() -> None:
    assert fmt.significant(float("inf")) == "inf"
    assert fmt.significant(float("nan")) == "nan"


@pytest.mark.parametrize(
    ("low", "high", "text"),
    [
        (0.0031, 3.95, "0.0031–3.95×"),  # a tiny lower bound: never 0.00–3.95×
        (70.11, 355.2, "70.1–355×"),  # a huge interval
        (0.1, 12_500.0, "0.10–12500×"),
        (0.17, 0.19, "0.17–0.19×"),  # below 1
        (0.95, 1.05, "0.95–1.05×"),  # straddling 1
        (2.41, 2.52, "2.41–2.52×"),  # the usual case is unchanged
        (2.0, 2.0, "2.00–2.00×"),  # equal bounds
        (2.451, 2.454, "2.451–2.454×"),  # would read alike at 2 decimals: both get one more
        (0.00010, 0.00011, "0.00010–0.00011×"),
    ],
)
def test_ratio_range(low: float, high: float, text: str) -> None:
    assert fmt.ratio_range(low, high) == text


def test_ratio_points_and_intervals_use_the_same_rule() -> None:
    assert fmt.ratio(0.003) == "0.0030×"  # a point too: never 0.00×
    assert fmt.ratio(2.45) == "2.45×" and fmt.ratio(307.6) == "308×"
    within = Estimate(0.0042, 0.0031, 0.0057, WITHIN_RUN)
    assert fmt.ratio_interval(within) == "0.0042× (0.0031–0.0057)†"
    repeats = Estimate(36.1, 0.1, 12_500.0, REPEATS, 3)
    assert fmt.ratio_interval(repeats) == "36.1× (0.10–12500)"
    assert fmt.ratio_interval(Estimate.point(2.0)) == "2.00×"


def test_changes_and_efficiencies_keep_one_decimal_and_at_most_three_figures() -> None:
    # Changes vs the baseline: a ratio shifted by -1, in percent.
    assert fmt.change_interval(Estimate(0.2, 0.176, 0.225, REPEATS, 3)) == (
        "+20.0 % (+17.6 to +22.5)"
    )
    assert fmt.change_interval(Estimate(3.549, 0.2, 354.0, REPEATS, 3)) == (
        "+355 % (+20.0 to +35400)"
    )
    assert fmt.percent_change(-0.0004) == "+0.0 %"  # no "-0.0"
    assert fmt.percent_change(-0.997) == "-99.7 %"
    assert fmt.efficiency_range(0.881, 0.959) == "88.1–95.9 %"
    assert fmt.efficiency_range(0.00041, 0.125) == "0.041–12.5 %"


def test_step_times_keep_three_figures_below_a_tenth_of_a_millisecond() -> None:
    assert fmt.ms(0.00412) == "4.12" and fmt.ms(0.0412) == "41.2" and fmt.ms(0.4123) == "412"
    assert fmt.ms(0.000412) == "0.412"
    assert fmt.ms(0.0000412) == "0.0412"  # was 0.041
    assert fmt.ms_range(0.0000004, 0.0254) == "0.000400–25.4"  # was 0.000–25.4


# --- in the rendered report ------------------------------------------------------------------

# (median ms, accuracy, training MiB) per repeat. torch fp16 is hugely slower in one repeat
# and bf16 hugely faster in two: their speed-up intervals span several decades, with a tiny
# positive lower bound. torch bf16's memory varies tenfold.
WILD = {
    ("torch", "float32"): [(2.4, 0.9712, 48), (2.5, 0.9702, 49), (2.3, 0.9692, 50)],
    ("torch", "mixed_float16"): [(13.1, 0.97, 52), (900.0, 0.50, 52), (12.9, 0.97, 53)],
    ("torch", "mixed_bfloat16"): [(0.03, 0.9699, 31), (0.98, 0.9690, 32), (0.01, 0.9689, 300)],
    ("tensorflow", "float32"): [(3.1, 0.9708, 96), (3.2, 0.9705, 97), (3.0, 0.9701, 95)],
    ("tensorflow", "mixed_bfloat16"): [(1.45, 0.9690, 70), (1.5, 0.9688, 71), (1.4, 0.9691, 69)],
}
OUTLIER_S = 2.0  # one step of tf float32, repeat 1: a 2 s pause among 3 ms steps


def _wild_records() -> list[CellRecord]:
    out = []
    for (framework, policy), repeats in WILD.items():
        for repeat, (ms, accuracy, mib) in enumerate(repeats):
            rec = record(framework, "mnist_dense", policy, median_ms=ms, accuracy=accuracy,
                         rss_mib=600, training_mib=mib, repeat=repeat)  # fmt: skip
            if (framework, policy, repeat) == ("tensorflow", "float32", 1):
                raw = [*rec.step_time.raw_s, OUTLIER_S]
                rec.step_time = StepTimeStats.from_samples([0.003] * 5 + raw, warmup_steps=5)
            out.append(rec)
    return out


def _wild_report(tmp_path: Path, **options):
    records = read_records(write_run(tmp_path / "run", _wild_records()))
    return build_report(records, CompareOptions(**options))


# A bound printed as zero: `0.00–`, `0.000 to` (not `10.00–`, not `0.0031–`).
ZERO_BOUND = re.compile(r"(?<![\d.])[-+]?0\.0+(?!\d)\s*(–|to )")


def test_rendered_intervals_never_show_a_positive_bound_as_zero(tmp_path: Path) -> None:
    report = _wild_report(tmp_path, min_speedup={"mixed_bfloat16": 1.5})
    group = report.sections[0].groups[0]
    fp16 = group.comparisons["mixed_float16"].speedup
    assert fp16.has_interval and 0 < fp16.low < 0.005  # the case this is about
    bf16 = group.comparisons["mixed_bfloat16"].speedup
    assert bf16.high > 1000
    for format in ("markdown", "table"):
        text = render(report, format, terminal=False)
        assert not ZERO_BOUND.search(text), ZERO_BOUND.search(text)
        # The table cell, the verdict and the gate message show the same bounds.
        span = fmt.ratio_range(fp16.low, fp16.high)
        assert fmt.ratio_interval(fp16) in " ".join(text.split())
        assert f"95 % {span}" in " ".join(text.split())
        assert fmt.ratio_range(bf16.low, bf16.high) in " ".join(text.split())


def test_verdict_of_a_tiny_ratio_keeps_its_figures(tmp_path: Path) -> None:
    from mpbench.compare.summary.verdict import _speed, policy_verdict

    tiny = Estimate(0.0031, 0.0012, 0.0079, REPEATS, 3)
    assert _speed(tiny) == "323× slower (0.0031×), 95 % 0.0012–0.0079×"
    slow = Estimate(0.18, 0.17, 0.19, WITHIN_RUN)
    assert _speed(slow) == "5.6× slower (0.18×), 95 % 0.17–0.19×†"
    fast = Estimate(36.14, 0.1, 12_500.0, REPEATS, 3)
    assert _speed(fast) == "36.1× faster, 95 % 0.10–12500×"
    group = _wild_report(tmp_path).sections[0].groups[0]
    evidence = policy_verdict(group, "mixed_float16").evidence
    fp16 = group.comparisons["mixed_float16"].speedup
    assert f"95 % {fmt.ratio_range(fp16.low, fp16.high)}" in evidence
    assert not ZERO_BOUND.search(evidence)


# --- the plot --------------------------------------------------------------------------------


def _axes(fig) -> dict[str, object]:
    out: dict[str, object] = {}
    for ax in fig.axes:
        title = ax.get_title().split("\n")[0]
        out.setdefault(title, ax)
    return out


def _arrows(ax, marker: str) -> list[tuple[float, float]]:
    """(x, y) of the arrowheads style.mark_beyond drew in `ax` (^ up, v down)."""
    from mpbench.compare.plot.style import CLIPPED

    return [
        (float(line.get_xdata()[0]), float(line.get_ydata()[0]))
        for line in ax.lines
        if line.get_gid() == CLIPPED and line.get_marker() == marker
    ]


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_plot_axes_are_clipped_and_far_whiskers_marked(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from mpbench.compare.plot.figure import build_figure
    from mpbench.compare.plot.style import REACH, sane_range

    report = _wild_report(tmp_path)
    group = report.sections[0].groups[0]  # torch
    axes = _axes(build_figure(report))

    # Speed-up: log axis (the points span 0.18-36x); bf16's upper bound is far above it.
    speedup = axes["speed-up vs fp32 (synced step)"]
    bf16 = group.comparisons["mixed_bfloat16"].speedup
    top = speedup.get_ylim()[1]
    assert top < bf16.high / 10  # the axis does not follow the whisker
    assert top >= bf16.value  # ... but shows every bar
    x = 2 - 0.2  # bf16 is the third policy; torch the left of two bars
    assert _arrows(speedup, "^") == [pytest.approx((x, top))]
    assert fmt.ratio(bf16.high) in _texts(speedup)
    # The whisker itself is drawn to its true end (the axes cut it at the edge).
    assert whiskers(speedup)[round(x, 6)] == pytest.approx((bf16.low, bf16.high))

    # Memory: torch bf16's interval reaches far above the tallest bar; the axis stops at
    # 1.2 x (the tallest bar and the whiskers within reach), the arrow says where it ends.
    memory = axes["training mem (process RSS sampled)"]
    bf16_mem = group.cells["mixed_bfloat16"].memory_bytes.scaled(1 / 2**20)
    tallest = max(p.get_height() for p in memory.patches)
    assert memory.get_ylim()[1] <= tallest * (1 + REACH) * 1.2 + 1e-9
    assert bf16_mem.high > memory.get_ylim()[1]
    assert [y for _, y in _arrows(memory, "^")] == [pytest.approx(memory.get_ylim()[1])]

    # Accuracy: fp16's interval (one repeat at 50 %) leaves the zoomed axis both ways.
    accuracy = axes["test accuracy"]
    fp16_acc = group.cells["mixed_float16"].accuracy.scaled(100)
    low, high = accuracy.get_ylim()
    assert fp16_acc.low < low and fp16_acc.high > high
    assert len(_arrows(accuracy, "^")) == 1 and len(_arrows(accuracy, "v")) == 1
    assert f"{fp16_acc.low:.2f}" in _texts(accuracy)

    # The rule itself: whisker ends within REACH x the points' extent count, the rest not.
    assert sane_range([1.0, 2.0], [2.9, 3.1, 50.0], origin=0.0) == (0.0, 2.9)
    assert sane_range([1.0, 10.0], [0.5, 40.0, 1000.0], log=True) == (0.5, 10.0)


def test_plot_step_time_outlier_is_cut_and_marked(tmp_path: Path) -> None:
    """One 2 s step among ~2 ms steps: the boxes keep the axis, the step gets an arrow."""
    pytest.importorskip("matplotlib")
    from mpbench.compare.plot.figure import build_figure

    records = [r for r in _wild_records() if r.framework == "tensorflow"]
    records = read_records(write_run(tmp_path / "run", records))
    axes = _axes(build_figure(build_report(records, CompareOptions())))
    steps = axes["step time per policy"]
    assert steps.get_yscale() == "linear"
    low, high = steps.get_ylim()
    assert low == 0 and 3.2 < high < 10  # the boxes' scale (ms), not the 2,000 ms step
    assert _arrows(steps, "^") == [pytest.approx((0.0, high))]  # float32, the only framework
    assert fmt.ms(OUTLIER_S) in _texts(steps)  # its true value, as the tables write it


def test_plot_without_far_whiskers_draws_no_arrow(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from builders import cpu_run

    from mpbench.compare.plot.figure import build_figure

    report = build_report(read_records(write_run(tmp_path / "run", cpu_run())), CompareOptions())
    fig = build_figure(report)
    for ax in fig.axes:
        assert not _arrows(ax, "^") and not _arrows(ax, "v"), ax.get_title()
