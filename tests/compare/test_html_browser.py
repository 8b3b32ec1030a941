"""compare's html page in a real headless Chromium (tests/chromium.py): it draws something,
its DOM carries the report's numbers, nothing reaches for the network or errs in the console,
a phone gets no sideways scroll, a hostile name stays text. And the checks themselves catch
a page that does each of those things wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chromium import needs_chromium, open_page, png_colours
from compare_helpers import run_inprocess
from html_reading import read_tables
from test_compare_formats import _gate_options
from test_html_compare import HOSTILE, hostile_run

pytestmark = [needs_chromium, pytest.mark.slow]


@pytest.fixture(scope="module")
def gated_page(tmp_path_factory) -> tuple[Path, str]:
    fixtures = Path(__file__).parent / "fixtures"
    gates = _gate_options(fixtures / "baseline_cpu")
    _, page = run_inprocess(fixtures / "cpu_run", format="html", **gates)
    _, text = run_inprocess(fixtures / "cpu_run", format="json", **gates)
    path = tmp_path_factory.mktemp("page") / "report.html"
    path.write_text(page, encoding="utf-8")
    return path, text


def test_the_page_renders_clean_with_the_reports_numbers(gated_page) -> None:
    path, text = gated_page
    opened = open_page(path, width=1280)
    assert opened.requests == []
    assert opened.console_errors == []
    assert png_colours(opened.png) == 3  # not one colour: something was drawn
    # What the reader sees is each table as the page's markup holds it (which
    # test_html_compare holds to the table model, markdown and JSON) ...
    written = read_tables(path.read_text(encoding="utf-8"))
    assert opened.tables == [t.rows for t in written]
    # ... with JSON's speed-ups in it, spelled by hand.
    shown = {row[0]: row for table in opened.tables[:1] for row in table[1:]}
    speedup = opened.tables[0][0].index("speed-up")
    for cell in json.loads(text)["cells"][:4]:  # mnist_dense's torch cells
        value = cell["speedup_vs_float32"]
        row = shown[cell["group"] + " " + _short(cell["policy"])]
        if value is not None and cell["policy"] != "float32":
            assert row[speedup].startswith(f"{value['value']:.2f}×")
    # A skipped cell reads as skipped, its reason a link away and on hover.
    assert shown["torch tf32"][-1] == "skipped [1]"
    assert 'title="[1] tf32 is unsupported on AMD EPYC' in opened.dom


def _short(policy: str) -> str:
    return {"float32": "fp32", "tf32": "tf32", "mixed_float16": "fp16"}.get(policy, "bf16")


def test_a_phone_scrolls_tables_not_the_page(gated_page) -> None:
    opened = open_page(gated_page[0], width=390)
    assert opened.console_errors == [] and opened.requests == []
    assert opened.scroll_width <= opened.width  # the page fits; each table scrolls in its box


def test_a_hostile_name_is_text_in_the_browser(tmp_path: Path) -> None:
    _, page = run_inprocess(hostile_run(tmp_path / "run"), format="html")
    path = tmp_path / "hostile.html"
    path.write_text(page, encoding="utf-8")
    opened = open_page(path)
    assert opened.console_errors == []  # no alert() ran: a dialog would be listed
    assert "<script" not in opened.dom  # no element was made of it
    assert opened.headings[0] == f"{HOSTILE} on cpu: AMD EPYC [cpu-3f9a1c07]"  # read as text


def test_the_checks_catch_a_request_a_script_error_and_a_blank_page(tmp_path: Path) -> None:
    """The checks above can fail: a page that fetches an image from another host, throws, and
    opens a dialog is caught on every count; a page of one colour counts as blank."""
    planted = tmp_path / "planted.html"
    planted.write_text(
        '<!DOCTYPE html><html><body><p>x</p><img src="http://10.255.255.1/x.png">'
        "<script>alert(1); undefinedFunction();</script></body></html>",
        encoding="utf-8",
    )
    opened = open_page(planted)
    assert opened.requests == ["http://10.255.255.1/x.png"]  # blocked, and counted
    errors = "\n".join(opened.console_errors)
    assert "dialog: alert: 1" in errors
    assert "ReferenceError: undefinedFunction is not defined" in errors
    assert "net::ERR_BLOCKED_BY_CLIENT" in errors
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")
    assert png_colours(open_page(blank).png) == 1
