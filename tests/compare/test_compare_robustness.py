"""What compare prints when the terminal is narrow or not Unicode, and when a value overflows."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest
from builders import cpu_run, record, write_run

from mpbench.compare import CompareOptions, build_report, print_run_summary
from mpbench.compare.render.benchmark_action import render_benchmark_action
from mpbench.compare.render.csv_report import render_csv
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.terminal import print_report
from mpbench.compare.summary.cells import summarize_all
from mpbench.errors import InvalidInput
from mpbench.results import read_records


def _printed(width: int, records=None) -> str:
    from rich.console import Console

    buffer = io.StringIO()
    report = build_report(records or cpu_run(), CompareOptions(min_speedup={"mixed_bfloat16": 1.5}))
    print_report(report, Console(file=buffer, width=width, no_color=True))
    return buffer.getvalue()


def test_a_very_narrow_terminal_gets_one_block_per_row_with_every_number_whole() -> None:
    text = _printed(20)
    # Not even the essential columns fit: stacked, no table header.
    assert not any(line.lstrip().startswith("cell ") for line in text.splitlines())
    for value in ("2.45×", "2.22×", "130,612", "97.12 %", "-0.13 pp"):  # torch/tf bf16 numbers
        assert value in text, value
    assert "torch bf16" in text and "speed-up:" in text
    assert "…" not in text  # nothing collapsed


@pytest.mark.parametrize("width", [80, 100, 120])
def test_a_terminal_table_leaves_out_columns_never_cuts_a_number(width: int) -> None:
    text = _printed(width)
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= width for line in lines)
    header = next(line for line in lines if line.lstrip().startswith("cell "))
    assert "speed-up" in header and "status" in header  # the essential columns stay
    assert "2.45× (2.41–2.52)†" in text and "-0.13 pp" in text
    assert "not shown at this width:" in text
    assert "…" not in text


def test_a_wide_terminal_keeps_every_column() -> None:
    text = _printed(240)
    assert "not shown at this width" not in text and "130,612" in text and "2.27–2.56" in text


def test_the_run_summary_prints_on_an_ascii_stream() -> None:
    from rich.console import Console

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="strict")
    console = Console(file=stream, width=220, no_color=True)
    print_run_summary(cpu_run(), console)
    stream.flush()
    text = raw.getvalue().decode("ascii")
    assert "2.45x (2.41-2.52)+" in text and "delta acc" in text
    assert console.file is stream  # the runner's console is given back as it was


def _extreme_run() -> list:
    """Finite, valid step times whose ratio overflows: float32 1e300 ms, bf16 1e-300 ms."""
    return [
        record("torch", "mnist_dense", policy, median_ms=ms, accuracy=0.9, rss_mib=100, repeat=r)
        for r in range(2)
        for policy, ms in (("float32", 1e300), ("mixed_bfloat16", 1e-300))
    ]


def test_an_overflowing_ratio_is_null_with_a_note_not_a_crash(tmp_path) -> None:
    records = read_records(write_run(tmp_path, _extreme_run()))
    report = build_report(records, CompareOptions(min_speedup={"mixed_bfloat16": 1.0}))
    assert report.exit_code == 0  # infinitely faster passes a minimum; it is not NaN
    data = json.loads(render_json(report))  # allow_nan=False inside: inf would raise
    (bf16,) = [c for c in data["cells"] if c["policy"] == "mixed_bfloat16"]
    assert bf16["speedup_vs_float32"]["value"] is None
    note = "not a finite number, written as null: cells[torch/mnist_dense/mixed_bfloat16]"
    assert any(n.startswith(note) for n in data["notes"])
    rows = list(csv.DictReader(io.StringIO(render_csv(report))))
    values = [v.lower() for row in rows for v in row.values()]
    assert not {"inf", "-inf", "nan"} & set(values)  # left empty, as "not measured"
    chart = json.loads(render_benchmark_action(report))  # allow_nan=False inside too
    assert all(math.isfinite(entry["value"]) for entry in chart)


def test_records_handed_over_directly_follow_the_readers_duplicate_rule() -> None:
    records = cpu_run()
    assert len(summarize_all([*records, *records])) == len(summarize_all(records))
    other = cpu_run()[0]
    other.wall_s = 999.0
    with pytest.raises(InvalidInput, match="two different records of run"):
        summarize_all([*records, other])
