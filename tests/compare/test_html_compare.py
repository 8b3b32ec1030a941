"""`compare --format html` without a browser: the page of the committed fixtures byte for byte,
the same numbers as markdown and JSON (one table model), names escaped, where the page goes,
the figure inline, and the one dispatch every format goes through (compare/render/dispatch.py).
test_html_browser.py opens the pages in Chromium."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from builders import record, write_run
from cli import run_mpbench
from compare_helpers import FIXTURES, run_inprocess
from html_reading import markdown_tables, read_tables
from test_compare_formats import _gate_options

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.dispatch import COMPARE_RENDERERS, renderer
from mpbench.compare.render.report_tables import report_tables
from mpbench.compare.run import load
from mpbench.formats import COMPARE, HISTORY, names
from mpbench.history.render import FLEET_RENDERERS, HISTORY_RENDERERS

EXPECTED = FIXTURES / "expected"
HOSTILE = """<script>alert(1)</script>"&'"""


def test_the_page_matches_the_expected_file(cpu_run_dir: Path) -> None:
    # Regenerated with tests/compare/make_fixtures.py (write_html), as the markdown is.
    code, out = run_inprocess(cpu_run_dir, format="html")
    assert code == 0
    assert out == (EXPECTED / "cpu_run.html").read_text(encoding="utf-8")


def test_the_gated_page_matches_the_expected_file(cpu_run_dir: Path, baseline_dir) -> None:
    code, out = run_inprocess(cpu_run_dir, format="html", **_gate_options(baseline_dir))
    assert code == 1
    assert out == (EXPECTED / "cpu_run_vs_baseline.html").read_text(encoding="utf-8")
    assert '<p class="outcome fail" role="status">FAIL: 2 of 56 gate checks failed' in out


def _report(cpu_run_dir: Path, baseline_dir: Path):
    options = CompareOptions(**_gate_options(baseline_dir))
    return build_report(load([cpu_run_dir]), options, load([baseline_dir]))


def test_html_markdown_and_json_carry_the_same_numbers(cpu_run_dir, baseline_dir) -> None:
    gates = _gate_options(baseline_dir)
    _, page = run_inprocess(cpu_run_dir, format="html", **gates)
    _, markdown = run_inprocess(cpu_run_dir, format="markdown", **gates)
    _, text = run_inprocess(cpu_run_dir, format="json", **gates)
    model = report_tables(_report(cpu_run_dir, baseline_dir))
    read, md = read_tables(page), markdown_tables(markdown)
    assert len(read) == len(md) == len(model) == 4  # two sections, the baseline, the gates
    for table, html_table, md_table in zip(model, read, md, strict=True):
        assert html_table.title == table.title
        assert html_table.rows == [table.headers, *table.rows]
        # markdown writes a cell's lines joined by "; ", gate results with a mark before
        assert [r[1:] for r in md_table] == [[c.replace("\n", "; ") for c in r[1:]]
                                             for r in [table.headers, *table.rows]]  # fmt: skip
    # The JSON's numbers, spelled by hand here, are the ones the page shows.
    cells = json.loads(text)["cells"]
    rows = [row for table in read[:2] for row in table.rows[1:]]
    assert len(rows) == len(cells) == 16
    header = read[0].rows[0]
    step, speedup, accuracy = (header.index(h) for h in ("step ms", "speed-up", "accuracy"))
    checked = 0
    for row, cell in zip(rows, cells, strict=True):
        assert row[0].split()[0] == cell["group"]
        if cell["status"] != "ok":
            assert row[step] == "—" and row[-1].startswith(cell["status"])
            continue
        ms = cell["step_time_ms"]["value"]
        assert float(row[step]) == pytest.approx(ms, rel=0.006)
        assert row[accuracy] == f"{cell['test_accuracy']['value'] * 100:.2f} %"
        if cell["policy"] != "float32":
            ratio = cell["speedup_vs_float32"]
            interval = ratio["interval"]
            spelled = f"{ratio['value']:.2f}× ({interval['low']:.2f}–{interval['high']:.2f})"
            assert row[speedup].startswith(spelled)
            checked += 1
    assert checked == 7  # fp16 and bf16 of both frameworks and workloads, less a timeout


def hostile_run(directory: Path) -> Path:
    """A run whose workload is named like markup (as a user's workload file may name it)."""
    records = [
        dataclasses.replace(
            record("torch", "mnist_dense", policy, median_ms=ms, accuracy=0.97, rss_mib=60),
            workload=HOSTILE,
        )
        for policy, ms in (("float32", 2.4), ("mixed_bfloat16", 1.0))
    ]
    return write_run(directory, records)


def test_a_hostile_name_is_text(tmp_path: Path) -> None:
    code, page = run_inprocess(hostile_run(tmp_path / "run"), format="html")
    assert code == 0
    assert "<script" not in page  # the page has no script of its own either
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&amp;&#x27;" in page
    (table,) = read_tables(page)
    assert table.title.startswith(HOSTILE + " on cpu: AMD EPYC")


def test_the_page_goes_to_output_or_stdout_and_failures_to_stderr(
    cpu_run_dir: Path, baseline_dir: Path, tmp_path: Path
) -> None:
    from make_fixtures import GATE_ARGS

    page = tmp_path / "out" / "report.html"
    args = ["compare", cpu_run_dir, "--baseline", baseline_dir, *GATE_ARGS, "--format", "html"]
    written = run_mpbench(*args, "--output", page)
    printed = run_mpbench(*args)
    assert written.returncode == printed.returncode == 1
    assert written.stdout == ""
    assert page.read_text(encoding="utf-8") == printed.stdout
    # A page is read in a browser: the CI log still says why the gates failed.
    for done in (written, printed):
        assert done.stderr.startswith("FAIL max-slowdown torch/mnist_dense/float32")
        assert done.stderr.endswith("FAIL: 2 of 56 gate checks failed (7 inconclusive — add "
                                    "repeats)\n")  # fmt: skip


@pytest.mark.slow  # draws the figure: seconds
def test_plot_puts_the_figure_inline(cpu_run_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    page = tmp_path / "report.html"
    done = run_mpbench("compare", cpu_run_dir, "--format", "html", "--output", page,
                       "--plot", tmp_path / "figure.png")  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = page.read_text(encoding="utf-8")
    assert (tmp_path / "figure.png").stat().st_size > 0  # --plot's file as before
    start = text.index('<figure class="plot">')
    svg = text[start : text.index("</figure>", start)]
    assert svg.count("<svg") == 1 and 'role="img"' in svg and "<title" in svg
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text
    assert "Mixed precision vs float32" in svg  # the figure's text stays text
    assert " src=" not in text and "url(http" not in text  # nothing beside the page


def test_one_dispatch_writes_every_format_of_every_report() -> None:
    # compare's table and history's (compare never imports history): each has a renderer
    # for every format its command takes, and nothing else.
    tables = {
        COMPARE: (COMPARE_RENDERERS, names(COMPARE)),
        HISTORY: (HISTORY_RENDERERS, names(HISTORY)),
        "fleet": (FLEET_RENDERERS, names(HISTORY)),
    }
    for report, (table, formats) in tables.items():
        assert set(table) == set(formats), report
        for format in formats:
            assert callable(renderer(table, format)), (report, format)
    with pytest.raises(ValueError, match="no renderer for --format 'benchmark-action'"):
        renderer(HISTORY_RENDERERS, "benchmark-action")
