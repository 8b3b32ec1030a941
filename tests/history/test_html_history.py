"""`mpbench history --format html`: the page of a store of several commits and two machines,
byte for byte; its charts (a point per run whose hover says commit, date and interval, the
change point marked); the machines' table; and the page in a real headless Chromium.

The expected files are the command's output with the store's path as STORE:
    mpbench history STORE --format html   (the store: history_store below)
    mpbench history CPU_RUN H200_RUN --by device -w mnist_dense -f torch --format html
"""

from __future__ import annotations

import dataclasses
import random
from datetime import date, timedelta
from pathlib import Path

import pytest
from builders import CPU_FINGERPRINT, OTHER_CPU, OTHER_FINGERPRINT, record, write_run
from chromium import needs_chromium, open_page, png_colours
from cli import run_mpbench
from html_reading import read_tables
from test_fleet import runs_of_two_machines

from mpbench.results import write_environment

EXPECTED = Path(__file__).parent / "expected"
STEP_AT = 6  # from this commit on, float32 on the first machine is 30 % slower
HOSTILE = """<script>alert(1)</script>"&'"""
START = date(2026, 3, 1)  # the first commit's day; one a day after it


def two_machine_history(root: Path, runs: int = 8, workload: str = "mnist_dense") -> list[Path]:
    """`runs` commits a day apart, each measured on two CPUs (torch float32 and bf16, 3
    repeats); on the first, float32 is 30 % slower from commit STEP_AT on."""
    rng = random.Random(1)
    out = []
    machines = (("AMD EPYC", CPU_FINGERPRINT, 2.4, STEP_AT), ("Xeon", OTHER_FINGERPRINT, 1.6, None))
    for name, fingerprint, ms, step_at in machines:
        device = dataclasses.replace(OTHER_CPU) if name == "Xeon" else None
        for i in range(runs):
            day = START + timedelta(days=i)
            run_id = f"{day:%Y%m%d}-100000-{fingerprint[4:8]}"
            records = []
            for repeat in range(3):
                for policy, base in (("float32", ms), ("mixed_bfloat16", ms / 2.4)):
                    slow = (
                        1.3 if step_at is not None and i >= step_at and policy == "float32" else 1
                    )
                    one = record(
                        "torch", "mnist_dense", policy, repeat=repeat, run_id=run_id,
                        median_ms=base * slow * (1 + rng.gauss(0, 0.015)), accuracy=0.97,
                        rss_mib=600, training_mib=40, fingerprint=fingerprint,
                        **({"device": device} if device else {}),
                    )  # fmt: skip
                    records.append(dataclasses.replace(one, workload=workload))
            directory = write_run(root / f"{fingerprint[4:8]}-{i:02d}", records)
            write_environment(
                directory,
                {
                    "git_commit": f"{i:02x}" * 20,
                    "git_commit_time": f"{day:%Y-%m-%d}T10:00:00+00:00",
                    "started_at": f"{day:%Y-%m-%d}T11:00:00+00:00",
                },
            )
            out.append(directory)
    return out


@pytest.fixture(scope="module")
def history_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("history")
    store = root / "store.sqlite"
    done = run_mpbench("store", "add", *two_machine_history(root / "runs"), "--store", store)
    assert done.returncode == 0, done.stderr
    return store


@pytest.fixture(scope="module")
def history_page(history_store) -> str:
    done = run_mpbench("history", history_store, "--format", "html")
    assert done.returncode == 0, done.stderr
    return done.stdout.replace(str(history_store), "STORE")


def test_the_history_page_matches_the_expected_file(history_page) -> None:
    assert history_page == (EXPECTED / "history.html").read_text(encoding="utf-8")


def test_the_fleet_page_matches_the_expected_file(tmp_path) -> None:
    cpu, gpu = runs_of_two_machines(tmp_path)
    done = run_mpbench("history", cpu, gpu, "--by", "device", "-w", "mnist_dense", "-f", "torch",
                       "--format", "html")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == (EXPECTED / "fleet.html").read_text(encoding="utf-8")


def test_the_page_holds_findings_charts_and_machines(history_page, history_store) -> None:
    markdown = run_mpbench("history", history_store, "--format", "markdown").stdout
    tables = read_tables(history_page)
    findings = [t for t in tables if "runs" in t.title and " on " in t.title]
    assert len(findings) == 2  # one per machine, as the markdown's
    for table in findings:
        assert f"### {table.title}" in markdown
        for row in table.rows[1:]:
            assert "| " + " | ".join(c.replace("\n", "; ") for c in row) + " |" in markdown
    (machines,) = [t for t in tables if t.title == "mnist_dense: each machine's newest run"]
    assert machines.rows[0] == ["policy", "cpu: AMD EPYC [cpu-3f9a1c07]", "cpu: Intel Xeon "
                                "Platinum 8488C [cpu-77c0e2a9]"]  # fmt: skip
    # A chart per series: 2 machines × (fp32 step, bf16 step, bf16 speed-up), each with a
    # point per run, and the planted step marked where it is.
    assert history_page.count('<figure class="chart">') == 6
    assert history_page.count("<circle ") == 6 * 8
    step = f"{STEP_AT:02x}" * 4
    assert history_page.count('<line class="change"') == 2  # fp32 step time, bf16 speed-up
    assert "<title>change point: +" in history_page and f"at {step}</title>" in history_page
    assert (
        f"<title>commit {step} · 2026-03-0{STEP_AT + 1} · " in history_page
    )  # the first slow point's hover


def test_a_hostile_workload_name_is_text_in_the_charts(tmp_path) -> None:
    runs = two_machine_history(tmp_path / "runs", runs=3, workload=HOSTILE)
    done = run_mpbench("history", *runs, "--format", "html")
    assert done.returncode == 0, done.stderr
    assert "<script" not in done.stdout
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&amp;&#x27;" in done.stdout


@needs_chromium
@pytest.mark.slow
def test_the_history_page_in_chromium(history_store, tmp_path) -> None:
    path = tmp_path / "history.html"
    done = run_mpbench("history", history_store, "--format", "html", "--output", path)
    assert done.returncode == 0, done.stderr
    opened = open_page(path, width=1280)
    assert opened.requests == [] and opened.console_errors == []
    assert png_colours(opened.png) == 3
    assert opened.tables == [t.rows for t in read_tables(path.read_text(encoding="utf-8"))]
    step = f"{STEP_AT:02x}" * 4
    hover = [t for t in opened.titles if t.startswith(f"commit {step} · 2026-03-07 · ")]
    assert len(hover) == 6  # the point of that commit in each chart: commit, date, interval
    assert any(" ms (" in t and "–" in t for t in hover)
    assert sum(t.startswith("change point: +") for t in opened.titles) == 2
