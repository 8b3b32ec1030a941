"""`--plot` stays readable with many rows: tick labels never overprint each other, each variant
of a policy has its own colour, and every title fits inside the figure.

The figure is drawn with Agg and its text measured by the same renderer that writes the PNG,
so "overlap" and "inside" mean what the file shows.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from compare_records import record, variant_run, write_run

from mpbench.compare import CompareOptions, build_report
from mpbench.results import DeviceInfo, read_records

pytest.importorskip("matplotlib")

LONG_CPU = DeviceInfo(
    kind="cpu", name="Intel(R) Xeon(R) Platinum 8488C CPU @ 2.40GHz (Sapphire Rapids)"
)


def _figure(tmp_path: Path, records):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from mpbench.compare.plot.figure import build_figure

    run = write_run(tmp_path / "run", records)
    fig = build_figure(build_report(read_records(run), CompareOptions()))
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # the layout the file gets (savefig draws the same way)
    return fig, canvas.get_renderer()


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _long_run():
    """The variant run on a CPU with a long name, beside a TensorFlow run with another loop:
    long group names, a long section title, eight rows on the policy axis."""
    records = variant_run()
    for rec in records:
        rec.device = LONG_CPU
    for loop in ("fit", "custom"):
        for policy, ms in (("float32", 3.1), ("mixed_float16", 16.8), ("mixed_bfloat16", 1.45)):
            records.append(
                record("tensorflow", "mnist_dense", policy, median_ms=ms, accuracy=0.97,
                       rss_mib=1400, training_mib=90, device=LONG_CPU, run_id=f"tf-{loop}",
                       config_overrides={"loop": loop})
            )  # fmt: skip
    return records


def test_policy_tick_labels_never_overlap(tmp_path: Path) -> None:
    fig, renderer = _figure(tmp_path, _long_run())
    checked = 0
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in labels]
        for (a, ta), (b, tb) in itertools.combinations(zip(boxes, labels, strict=True), 2):
            assert not _overlaps(a, b), (ax.get_title(), ta.get_text(), tb.get_text())
        checked += len(labels) > 5
    assert checked >= 4  # speed-up, memory, accuracy, step time: every row of the run named
    names = {" ".join(t.get_text().split()) for ax in fig.axes for t in ax.get_xticklabels()}
    assert {"fp16 [loss scale 1024]", "bf16 (fallback)", "bf16 @256"} <= names


def test_each_variant_of_a_policy_has_its_own_colour(tmp_path: Path) -> None:
    from matplotlib.colors import to_hex

    fig, _ = _figure(tmp_path, variant_run())
    # The plain group's loss panel: the one with the static-scale, fallback and @256 rows.
    loss = max((ax for ax in fig.axes if "training loss" in ax.get_title()),
               key=lambda ax: len(ax.get_lines()))  # fmt: skip
    ticks = {round(x): " ".join(t.get_text().split())
             for x, t in zip(loss.get_xticks(), loss.get_xticklabels(), strict=True)}  # fmt: skip
    colours = {}
    for line in loss.get_lines():
        (x,) = {round(float(v)) for v in line.get_xdata()}
        colours.setdefault(ticks[x], to_hex(line.get_color()))
    fp16 = [colours[n] for n in ("fp16", "fp16 [loss scale 1024]")]
    bf16 = [colours[n] for n in ("bf16", "bf16 (fallback)", "bf16 @256")]
    assert len(set(fp16)) == len(fp16) and len(set(bf16)) == len(bf16), colours
    assert not set(fp16) & set(bf16)


def test_every_title_and_the_legend_fit_inside_the_figure(tmp_path: Path) -> None:
    fig, renderer = _figure(tmp_path, _long_run())
    inside = fig.bbox
    texts = [sub._suptitle for sub in fig.subfigs if sub._suptitle is not None]
    texts += [ax.title for ax in fig.axes if ax.get_title()]
    assert len(texts) >= 2 + 4 + 3
    for text in texts:
        box = text.get_window_extent(renderer)
        where = " ".join(text.get_text().split())
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1, where
    for legend in (lg for sub in fig.subfigs for lg in sub.legends):
        box = legend.get_window_extent(renderer)
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1
    # Titles of panels side by side do not run into each other either.
    rows = {}
    for ax in fig.axes:
        rows.setdefault(round(ax.get_position().y1, 2), []).append(ax.title)
    for titles in rows.values():
        for a, b in itertools.combinations(titles, 2):
            assert not _overlaps(a.get_window_extent(renderer), b.get_window_extent(renderer)), (
                a.get_text(),
                b.get_text(),
            )
