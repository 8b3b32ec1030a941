"""`--plot`: the figure is built in-process (`build_figure`) and its axes inspected; the file
is written through `write_plot` and `mpbench compare --plot`, and its size read back."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from builders import cpu_run, record, write_run
from cli import run_mpbench
from compare_helpers import whiskers

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.plot.figure import build_figure, write_plot
from mpbench.results import CellRecord, Status, read_records

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LOSSES = {"float32": [2.10, 1.62, 1.31], "mixed_bfloat16": [2.12, 1.66, 1.35]}


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    return struct.unpack(">II", data[16:24])


def _three_repeats(epochs: int = 3) -> list[CellRecord]:
    """torch/mnist_dense float32, tf32 (skipped) and bf16, 3 repeats each, with loss curves."""
    out = []
    for repeat, (f32, bf16) in enumerate([(2.40, 0.98), (2.52, 1.01), (2.31, 0.97)]):
        out.append(
            record("torch", "mnist_dense", "tf32", status=Status.SKIPPED, reason="no TF32 here",
                   repeat=repeat)
        )  # fmt: skip
        for policy, ms in (("float32", f32), ("mixed_bfloat16", bf16)):
            rec = record("torch", "mnist_dense", policy, median_ms=ms,
                         accuracy=0.9712 - repeat / 1e3, rss_mib=612, training_mib=48 + repeat,
                         repeat=repeat)  # fmt: skip
            losses = [v + repeat / 100 for v in LOSSES[policy]]
            rec.accuracy.train_loss_per_epoch = losses[:epochs]
            out.append(rec)
    return out


def _report(records: list[CellRecord], tmp_path: Path | None = None):
    if tmp_path is not None:  # through the real writer and reader, as compare reads them
        records = read_records(write_run(tmp_path / "run", records))
    return build_report(records, CompareOptions())


@pytest.fixture(scope="module")
def cpu_run_plotted(tmp_path_factory: pytest.TempPathFactory):
    """A default run on this CPU (builders.cpu_run), written, read back, compared and drawn
    once for the tests that only inspect it (a figure takes seconds to lay out)."""
    report = _report(cpu_run(), tmp_path_factory.mktemp("cpu_run"))
    return report, build_figure(report)


@pytest.fixture(scope="module")
def three_repeats_plotted(tmp_path_factory: pytest.TempPathFactory):
    """_three_repeats(), written, read back, compared and drawn once."""
    report = _report(_three_repeats(), tmp_path_factory.mktemp("three_repeats"))
    return report, build_figure(report)


def _axes(fig) -> dict[str, object]:
    """Axes by title (first line), in drawing order; a repeated title gets a #n suffix."""
    out: dict[str, object] = {}
    for ax in fig.axes:
        title = ax.get_title().split("\n")[0]
        name, n = title, 1
        while name in out:
            n += 1
            name = f"{title} #{n}"
        out[name] = ax
    return out


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def _figure_texts(fig) -> list[str]:
    return [t.get_text() for sub in fig.subfigs for t in sub.texts]


def test_the_figure_has_every_panel_per_workload(cpu_run_plotted) -> None:
    _, fig = cpu_run_plotted
    titles = [ax.get_title() for ax in fig.axes]
    # Two workloads x (speed-up, memory, accuracy, step time, one loss panel per framework).
    assert len(fig.axes) == 2 * 6
    for expected in ("speed-up vs fp32", "training mem (process RSS sampled)", "test accuracy"):
        assert sum(t.startswith(expected) for t in titles) == 2, expected
    assert sum(t.startswith("step time per policy") for t in titles) == 2
    assert sum(t.startswith("torch\ntraining loss") for t in titles) == 2
    assert sum(t.startswith("tf\ntraining loss") for t in titles) == 2
    sections = [t for t in _figure_texts(fig) if " · cpu: AMD EPYC" in t]
    assert [s.split(" · ")[0] for s in sections] == ["mnist_dense", "cifar10_cnn"]
    assert "batch 128" in sections[0] and "units 64" in sections[0]
    # Short policy names on every policy axis, never the long ones.
    labels = {t.get_text() for ax in fig.axes for t in ax.get_xticklabels()}
    assert {"fp32", "tf32", "fp16", "bf16"} <= labels
    assert not labels & {"float32", "mixed_float16", "mixed_bfloat16"}
    # The frameworks' legend, once for the figure.
    legend_texts = [t.get_text() for sub in fig.subfigs for lg in sub.legends for t in lg.texts]
    assert legend_texts == ["torch", "tf"]  # the tables' row names (labels.Labeler.group)


def test_skipped_and_failed_cells_are_named_not_drawn(cpu_run_plotted) -> None:
    _, fig = cpu_run_plotted
    axes = _axes(fig)
    speedup = axes["speed-up vs fp32 (synced step)"]
    assert _texts(speedup).count("skipped") == 2  # tf32 in torch and in tensorflow
    cifar = axes["speed-up vs fp32 (synced step) #2"]
    assert "timeout" in _texts(cifar)  # tensorflow's fp16 cell on the CNN timed out
    for name in ("step time per policy #2", "test accuracy #2", "tf #2"):
        assert "timeout" in _texts(axes[name]), name
    # Nothing is drawn for them: no bar at tf32's tick in the speed-up panel.
    assert all(abs(bar.get_x() + bar.get_width() / 2 - 1) > 0.3 for bar in speedup.patches)


def test_whiskers_are_the_reports_95_percent_intervals(three_repeats_plotted) -> None:
    report, fig = three_repeats_plotted
    group = report.sections[0].groups[0]
    axes = _axes(fig)
    # Policies on the axis: fp32 (0), tf32 (1), bf16 (2); one framework: no offset.
    speedup = group.comparisons["mixed_bfloat16"].speedup
    assert speedup.kind == "repeats" and speedup.n == 3
    low, high = whiskers(axes["speed-up vs fp32 (synced step)"])[2.0]
    assert (low, high) == pytest.approx((speedup.low, speedup.high))
    memory = group.cells["mixed_bfloat16"].memory_bytes
    low, high = whiskers(axes["training mem (process RSS sampled)"])[2.0]
    assert (low, high) == pytest.approx((memory.low / 2**20, memory.high / 2**20))
    accuracy = group.cells["float32"].accuracy
    low, high = whiskers(axes["test accuracy"])[0.0]
    assert (low, high) == pytest.approx((accuracy.low * 100, accuracy.high * 100))
    assert "skipped" in _texts(axes["speed-up vs fp32 (synced step)"])
    # Values written at the bars: the speed-up in the table's precision.
    assert f"{speedup.value:.2f}×" in _texts(axes["speed-up vs fp32 (synced step)"])


def test_one_repeat_whiskers_are_within_run_and_marked(cpu_run_plotted) -> None:
    report, fig = cpu_run_plotted
    speedup = _axes(fig)["speed-up vs fp32 (synced step)"]
    group = report.sections[0].groups[0]  # torch, mnist_dense
    estimate = group.comparisons["mixed_bfloat16"].speedup
    assert estimate.kind == "within-run only"
    # Two frameworks: torch's bar sits left of the policy's tick (bf16 is the 4th policy).
    low, high = whiskers(speedup)[round(3 - 0.2, 6)]
    assert (low, high) == pytest.approx((estimate.low, estimate.high))
    assert f"{estimate.value:.2f}×†" in _texts(speedup)
    assert "within-run only" in " ".join(_figure_texts(fig))


def test_loss_curves_per_policy_with_each_repeat_and_the_mean(three_repeats_plotted) -> None:
    _, fig = three_repeats_plotted
    (loss,) = [ax for ax in fig.axes if "training loss per epoch" in ax.get_title()]
    assert loss.get_title().startswith("torch\n")
    assert loss.get_xlabel() == "epoch" and loss.get_ylabel() == "training loss"
    lines = [line for line in loss.get_lines() if len(line.get_xdata()) == 3]
    assert len(lines) == 2 * 3 + 2  # each repeat thin, the mean bold, per finished policy
    means = [line for line in lines if line.get_linewidth() == 2]
    expected = [sum(v + r / 100 for r in range(3)) / 3 for v in LOSSES["float32"]]
    assert list(means[0].get_ydata()) == pytest.approx(expected)
    legend = [t.get_text() for t in loss.get_legend().texts]
    assert legend == ["fp32 (mean of 3)", "tf32: skipped", "bf16 (mean of 3)"]


def test_one_epoch_is_points_and_says_so(tmp_path: Path) -> None:
    fig = build_figure(_report(_three_repeats(epochs=1), tmp_path))
    (loss,) = [ax for ax in fig.axes if "training loss" in ax.get_title()]
    assert "1 epoch: points" in loss.get_title()
    assert all(line.get_linestyle() == "None" for line in loss.get_lines())
    assert "skipped" in _texts(loss)


def test_log_axes_when_policies_differ_tenfold_linear_otherwise(
    cpu_run_plotted, three_repeats_plotted
) -> None:
    wide = _axes(cpu_run_plotted[1])
    # On this CPU fp16 is ~5x slower and bf16 ~2.5x faster than float32: a 13x spread.
    assert wide["speed-up vs fp32 (synced step)"].get_yscale() == "log"
    assert wide["step time per policy"].get_yscale() == "log"
    assert "log scale" in wide["step time per policy"].get_ylabel()
    narrow = _axes(three_repeats_plotted[1])
    assert narrow["speed-up vs fp32 (synced step)"].get_yscale() == "linear"
    assert narrow["step time per policy"].get_yscale() == "linear"
    assert narrow["step time per policy"].get_ylabel() == "ms per synced step"


def test_the_png_is_written_at_a_readable_size(tmp_path: Path) -> None:
    path = write_plot(_report(cpu_run(), tmp_path), tmp_path / "out" / "compare.png")
    width, height = _png_size(path)
    assert 1000 <= width <= 1400
    assert 1200 <= height <= 2000  # two workloads, two rows of panels each
    single = write_plot(_report(_three_repeats(), tmp_path / "one"), tmp_path / "one.png")
    width, height = _png_size(single)
    assert 1000 <= width <= 1400 and 700 <= height <= 1100  # one workload
    assert path.stat().st_size > 60_000  # drawn panels, not an empty canvas


def test_the_cli_writes_it_with_the_agg_backend(tmp_path: Path) -> None:
    import matplotlib

    run = write_run(tmp_path / "run", _three_repeats())
    outcome = run_mpbench("compare", run, "--plot", tmp_path / "plot.png", "--format", "json")
    assert outcome.returncode == 0, outcome.stderr
    assert _png_size(tmp_path / "plot.png")[0] == 1300
    write_plot(_report(_three_repeats(), tmp_path / "again"), tmp_path / "again.png")
    assert matplotlib.get_backend().lower() == "agg"


def test_values_that_cannot_be_drawn_are_said_in_the_panel(tmp_path: Path) -> None:
    # Finite, valid step times whose ratio overflows: float32 1e300 ms, bf16 1e-300 ms.
    extreme = [
        record("torch", "mnist_dense", policy, median_ms=ms, accuracy=0.9, rss_mib=100, repeat=r)
        for r in range(2)
        for policy, ms in (("float32", 1e300), ("mixed_bfloat16", 1e-300))
    ]
    axes = _axes(build_figure(_report(extreme, tmp_path)))
    assert "not finite" in _texts(axes["speed-up vs fp32 (synced step)"])
    assert any("too wide to draw" in t for t in _texts(axes["step time per policy"]))


def test_without_float32_or_measurements_the_panels_say_so(tmp_path: Path) -> None:
    bf16_only = [record("torch", "mnist_dense", "mixed_bfloat16", median_ms=1.0, accuracy=0.9,
                        rss_mib=100)]  # fmt: skip
    axes = _axes(build_figure(_report(bf16_only, tmp_path / "a")))
    assert any("no speed-up" in t for t in _texts(axes["speed-up vs fp32 (synced step)"]))
    skipped = [r for r in cpu_run() if r.status is Status.SKIPPED]
    fig = build_figure(_report(skipped, tmp_path / "b"))
    axes = _axes(fig)
    assert any("no speed-up" in t for t in _texts(axes["speed-up vs fp32 (synced step)"]))
    assert any("no memory" in t for t in _texts(axes["memory"]))
    assert any("no timed steps" in t for t in _texts(axes["step time per policy"]))
    assert any("no training loss" in t for ax in fig.axes for t in _texts(ax))
    write_plot(_report(skipped, tmp_path / "c"), tmp_path / "skipped.png")


def test_a_diverged_repeat_keeps_its_curve_and_says_so(tmp_path: Path) -> None:
    records = _three_repeats()
    bf16 = next(r for r in records if r.policy == "mixed_bfloat16" and r.repeat == 2)
    bf16.status, bf16.reason = Status.DIVERGED, "loss became NaN at step 40"
    fig = build_figure(_report(records, tmp_path))
    (loss,) = [ax for ax in fig.axes if "training loss per epoch" in ax.get_title()]
    legend = [t.get_text() for t in loss.get_legend().texts]
    assert "bf16 (mean of 3) (diverged)" in legend


def test_one_framework_with_two_configs_gets_two_colours_and_names(tmp_path: Path) -> None:
    custom = [
        record("tensorflow", "mnist_dense", policy, median_ms=ms, accuracy=0.97, rss_mib=1400,
               training_mib=80, run_id="custom-loop", config_overrides={"loop": "custom"})
        for policy, ms in (("float32", 3.0), ("mixed_bfloat16", 1.4))
    ]  # fmt: skip
    fig = build_figure(_report([*cpu_run(), *custom], tmp_path))
    legend = [t.get_text() for sub in fig.subfigs for lg in sub.legends for t in lg.texts]
    assert legend == ["torch", "tf [loop=custom]", "tf [loop=fit]"]
    colours = {
        p.get_facecolor() for sub in fig.subfigs for lg in sub.legends for p in lg.legend_handles
    }
    assert len(colours) == 3
    titles = [ax.get_title() for ax in fig.axes]
    assert sum("training loss" in t for t in titles) == 3 + 2  # mnist: 3 groups; cifar: 2


# --- contended cells (issue 33, item 4) -----------------------------------------------------


def _busy(records: list[CellRecord], **where: str) -> list[CellRecord]:
    """`records` with the cells matching `where` marked contended, as a busy machine's run."""
    from mpbench.results import ContentionStats

    for rec in records:
        if rec.status is Status.OK and all(getattr(rec, k) == v for k, v in where.items()):
            rec.contention = ContentionStats(
                wall_s=436.0, cpus=2, busy_cores=2.0, own_cores=0.99, other_cores=1.01,
                contended=True, why=["other processes used 1.01 of 2 cores"],
            )  # fmt: skip
    return records


def _bars_at(ax) -> dict[float, object]:
    """x (rounded) -> the bar drawn there."""
    from matplotlib.patches import Rectangle

    return {
        round(p.get_x() + p.get_width() / 2, 6): p
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_width() > 0
    }


def _legend_texts(fig) -> list[str]:
    return [t.get_text() for sub in fig.subfigs for lg in sub.legends for t in lg.texts]


def test_a_contended_cell_is_hatched_where_its_timing_is_drawn(tmp_path: Path) -> None:
    from mpbench.compare.plot.style import CONTENDED, CONTENDED_LABEL
    from mpbench.compare.render.tables import status_text

    records = _busy(cpu_run(), framework="torch", workload="mnist_dense", policy="mixed_bfloat16")
    report = _report(records, tmp_path)
    torch, tf = report.sections[0].groups  # mnist_dense: torch, then tensorflow
    # The same fact as the table's status: torch bf16 says contended, nothing else does.
    assert "contended" in status_text(torch.cells["mixed_bfloat16"])
    assert not any("contended" in status_text(c) for c in tf.cells.values())
    fig = build_figure(report)
    axes = _axes(fig)
    bars = _bars_at(axes["speed-up vs fp32 (synced step)"])
    # Policies fp32, tf32, fp16, bf16 at 0..3; torch 0.2 left of the tick, tf 0.2 right.
    busy, quiet = bars[round(3 - 0.2, 6)], bars[round(3 + 0.2, 6)]
    assert busy.get_hatch() and busy.get_gid() == CONTENDED
    assert not quiet.get_hatch() and quiet.get_gid() != CONTENDED
    assert [x for x, bar in bars.items() if bar.get_hatch()] == [round(3 - 0.2, 6)]
    # Its step-time box too, and no other box of the figure.
    steps = axes["step time per policy"]
    hatched = [p for p in steps.patches if p.get_hatch()]
    assert len(hatched) == 1
    box = hatched[0].get_path().get_extents()
    assert (box.x0 + box.x1) / 2 == pytest.approx(3 - 0.2)  # torch's bf16 box
    assert not any(p.get_hatch() for ax in fig.axes for p in ax.patches if ax is not steps
                   and ax is not axes["speed-up vs fp32 (synced step)"])  # fmt: skip
    # The memory bars are drawn as usual (a busy machine distorts time, not memory).
    assert not any(p.get_hatch() for p in axes["training mem (process RSS sampled)"].patches)
    # The legend says what hatching means, once.
    assert _legend_texts(fig) == ["torch", "tf", CONTENDED_LABEL]
    assert "re-measure on a quiet machine" in CONTENDED_LABEL


def test_a_contended_float32_hatches_the_speedups_that_rest_on_it(tmp_path: Path) -> None:
    records = _busy(_three_repeats(), policy="float32", repeat=1)
    fig = build_figure(_report(records, tmp_path))
    axes = _axes(fig)
    bars = _bars_at(axes["speed-up vs fp32 (synced step)"])
    assert bars[0.0].get_hatch() and bars[2.0].get_hatch()  # fp32 itself, and bf16 / fp32
    steps = axes["step time per policy"]
    assert [p.get_hatch() is not None for p in steps.patches] == [True, False]  # fp32, bf16


def test_a_quiet_run_has_no_hatching_and_no_contended_entry(cpu_run_plotted) -> None:
    _, fig = cpu_run_plotted
    assert not any(p.get_hatch() for ax in fig.axes for p in ax.patches)
    assert _legend_texts(fig) == ["torch", "tf"]


def test_the_contended_plot_is_written(tmp_path: Path) -> None:
    records = _busy(cpu_run(), framework="torch", policy="mixed_bfloat16")
    run = write_run(tmp_path / "run", records)
    outcome = run_mpbench("compare", run, "--plot", tmp_path / "busy.png", "--format", "json")
    assert outcome.returncode == 0, outcome.stderr
    assert _png_size(tmp_path / "busy.png")[0] == 1300
