"""`mpbench history` over a store and over run directories: the table, JSON, the plot, the CI
gate's exit codes, and its rule that a regression fails once (mpbench/history)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from builders import BUSY, record, write_run
from cli import run_mpbench

from mpbench.results import write_environment

STEP_AT = 8  # the run from which float32 is 30 % slower


def make_history(
    root: Path, runs: int = 12, step_at: int | None = STEP_AT, factor: float = 1.3, seed: int = 0
) -> list[Path]:
    """`runs` run directories of torch/mnist_dense, float32 and bf16, 3 repeats each, at one
    commit each a day apart; float32 `factor` times slower from run `step_at` on."""
    rng = random.Random(seed)
    out = []
    for i in range(runs):
        run_id = f"20260301-1{i:02d}000-ab{i:02d}"
        records = []
        for repeat in range(3):
            for policy, ms in (("float32", 2.4), ("mixed_bfloat16", 0.98)):
                slow = factor if step_at is not None and i >= step_at and policy == "float32" else 1
                median = ms * slow * (1 + rng.gauss(0, 0.02))
                records.append(
                    record("torch", "mnist_dense", policy, median_ms=median, accuracy=0.97,
                           rss_mib=600, training_mib=40, repeat=repeat, run_id=run_id)
                )  # fmt: skip
        directory = root / f"run-{i:02d}"
        write_run(directory, records)
        write_environment(
            directory,
            {
                "git_commit": f"{i:02x}" * 20,
                "git_commit_time": f"2026-03-{i + 1:02d}T10:00:00+00:00",
                "started_at": f"2026-03-{i + 1:02d}T11:00:00+00:00",
            },
        )
        out.append(directory)
    return out


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store.sqlite"
    done = run_mpbench("store", "add", *make_history(tmp_path / "runs"), "--store", path)
    assert done.returncode == 0, done.stderr
    return path


def test_the_planted_step_is_found_and_nothing_else(store):
    done = run_mpbench("history", store, "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report["runs"]) == 12
    by_name = {(s["label"], s["metric"]): s for s in report["series"]}
    fp32 = by_name[("torch fp32", "step time")]
    (change,) = fp32["change_points"]
    assert change["commit"] == f"{STEP_AT:02x}" * 20
    assert change["previous"]["commit"] == f"{STEP_AT - 1:02x}" * 20
    assert change["low"] < 0.3 < change["high"]
    assert by_name[("torch bf16", "step time")]["change_points"] == []
    (speedup,) = by_name[("torch bf16", "speed-up")]["change_points"]  # float32 slower: bf16
    assert speedup["change"] > 0  # gains more
    intervals = [p["estimate"]["interval"] for p in fp32["points"]]
    assert all(i["kind"] == "repeats" and i["n"] == 3 for i in intervals)


def test_the_table_names_the_commit_of_the_change(store):
    done = run_mpbench("history", store, "--policy", "fp32", "--points")
    assert done.returncode == 0, done.stderr
    assert "torch fp32 step time" in done.stdout and "torch bf16" not in done.stdout
    assert f"at {STEP_AT:02x}{STEP_AT:02x}{STEP_AT:02x}{STEP_AT:02x}" in done.stdout
    assert "new level +" in done.stdout  # --points marks where the level changed
    markdown = run_mpbench("history", store, "--format", "markdown", "--metric", "speed-up")
    assert markdown.returncode == 0 and "| torch bf16 speed-up |" in markdown.stdout


def test_ci_fails_on_the_run_that_brings_the_regression_and_only_then(store):
    newest = f"{STEP_AT:02x}" * 20
    fails = run_mpbench("history", store, "--ci", "--commits", f"..{newest[:8]}")
    assert fails.returncode == 1, fails.stderr
    assert "FAIL: mnist_dense torch fp32 step time" in fails.stderr
    # The run after it: the regression is known (it failed once), the gate passes.
    after = f"{STEP_AT + 1:02x}" * 20
    known = run_mpbench("history", store, "--ci", "--commits", f"..{after[:8]}")
    assert known.returncode == 0, known.stderr
    assert "known" in known.stdout
    # Before it: nothing to fail on; a threshold above the step: within it.
    assert (
        run_mpbench(
            "history", store, "--ci", "--commits", f"..{f'{STEP_AT - 1:02x}' * 4}"
        ).returncode
        == 0
    )
    wide = run_mpbench(
        "history", store, "--ci", "--threshold", "50%", "--commits", f"..{newest[:8]}"
    )
    assert wide.returncode == 0


def test_run_directories_are_a_source_too(tmp_path):
    runs = make_history(tmp_path, runs=8, step_at=None)
    done = run_mpbench("history", *runs, "--ci", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert all(s["change_points"] == [] for s in json.loads(done.stdout)["series"])


def test_a_busy_newest_run_is_not_gated(tmp_path):
    runs = make_history(tmp_path, runs=9, step_at=8)
    lines = (runs[-1] / "results.jsonl").read_text().splitlines()
    busy = []
    for line in lines:
        raw = json.loads(line)
        raw["contention"] = BUSY.to_dict()
        busy.append(json.dumps(raw))
    (runs[-1] / "results.jsonl").write_text("\n".join(busy) + "\n")
    done = run_mpbench("history", *runs, "--ci", "--metric", "step-time")
    assert done.returncode == 0, done.stderr
    assert "not gated (busy)" in done.stdout


def test_too_few_points_say_so(tmp_path):
    done = run_mpbench("history", *make_history(tmp_path, runs=3, step_at=2), "--ci")
    assert done.returncode == 0 and "too few points" in done.stdout


def test_bad_input_is_one_line(tmp_path, store):
    for args, words in (
        (("--by", "week"), "--by: unknown value 'week'"),
        (("--threshold", "10"), "ambiguous"),
        (("--commits", "abc"), "A..B"),
        (("--since", "yesterday"), "ISO 8601"),
        (("--policy", "fp64"), "unknown policy"),
        (("--by", "device", "--ci"), "--by device"),
        (("--workload", "cifar10_cnn"), "no series"),
    ):
        done = run_mpbench("history", store, *args)
        assert done.returncode == 2 and words in done.stderr, (args, done.stderr)
        assert done.stderr.count("\n") == 1
    missing = run_mpbench("history", cwd=tmp_path)
    assert missing.returncode == 2 and "store add" in missing.stderr


def test_the_plot_is_written(store, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "history.png"
    done = run_mpbench("history", store, "--plot", out, "--metric", "step-time")
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
