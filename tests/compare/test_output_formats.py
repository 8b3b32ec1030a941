"""compare's output formats come from one table (mpbench/formats.py): the option's check, its
help and the dispatch all read it, and each row renders the committed fixture run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpbench.compare import CompareOptions, build_report, parse_format, render
from mpbench.errors import InvalidInput
from mpbench.formats import BY_NAME, FORMATS, OUTPUT_FORMATS, help_text
from mpbench.results import read_records

FIXTURE = Path(__file__).parent / "fixtures" / "cpu_run"


def test_the_option_and_its_help_name_every_row_and_nothing_else() -> None:
    assert tuple(row.name for row in OUTPUT_FORMATS) == FORMATS
    assert help_text() == "table, markdown, json, csv, benchmark-action or html."
    for name in FORMATS:
        assert parse_format(f" {name.upper()} ") == name
    with pytest.raises(InvalidInput, match="valid choices: table, markdown, json"):
        parse_format("xml")


def test_each_row_renders_the_fixture_run() -> None:
    report = build_report(read_records(FIXTURE), CompareOptions())
    texts = {name: render(report, name) for name in FORMATS}
    assert "torch bf16" in texts["table"] and "torch bf16" in texts["markdown"]
    assert json.loads(texts["json"])["cells"]
    assert "policy" in texts["csv"].splitlines()[0].split(",")
    assert json.loads(texts["benchmark-action"])
    assert texts["html"].startswith("<!DOCTYPE html>") and "<table>" in texts["html"]
    # Only the human formats leave the failures out of stderr when printed to a terminal.
    assert [row.name for row in OUTPUT_FORMATS if row.human] == ["table", "markdown"]


def test_the_cli_reads_the_table_without_importing_compare() -> None:
    code = (
        "import sys, mpbench.cli; "
        "print(sorted(m for m in sys.modules if m.startswith('mpbench.compare') or m == 'numpy'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    assert BY_NAME["table"].human
