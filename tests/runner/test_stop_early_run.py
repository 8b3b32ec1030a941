"""A whole tiny `mpbench run` in which a cell cannot pay (docs/measurement.md, "A cell that
cannot pay stops early"): the runner hands the bf16 cell its float32 twin's step, from this
run's records (resumed ones too), and the bf16 cell, made slow on any CPU by the `slow` fault
(runner/faults.py: 0.2 s more a step), stops after its warm-up and 3 timed steps. The run
goes on, exits 0, and compare shows the cell stopped with no ratio taken from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from builders import tiny_toml
from cli import run_mpbench
from frameworks import needs_torch

from mpbench.results import Status, read_records
from mpbench.runner.faults import FAULT_ENV, SLOW_STEP_S

pytestmark = needs_torch  # its cells import torch, in their own processes

SLOW = {FAULT_ENV: "slow@mixed_bfloat16"}
# Far below the fault's own ratio (float32's step would have to pass SLOW_STEP_S / 1.5,
# ~130 ms, a hundred times this tiny model's): the test holds on a busy machine of any kind.
LIMIT = "1.5"


def run(config: Path, out: Path, *args: str):
    return run_mpbench(
        "run", "--config", config, "--framework", "torch", "--workload", "mnist_dense",
        "--policy", "fp32", "--policy", "bf16", "--device", "cpu", "--out", out,
        "--stop-slower-than", LIMIT, *args, env=SLOW,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stopped")
    config = folder / "tiny.toml"
    config.write_text(tiny_toml(mnist_dense={"max_steps": 12}))
    out = folder / "run"
    return config, out, run(config, out)


def by_policy(out: Path) -> dict:
    return {record.policy: record for record in read_records(out)}


def test_the_slow_cell_stops_with_its_twins_step_and_the_run_goes_on(stopped_run):
    _, out, result = stopped_run
    assert result.returncode == 0, result.stdout + result.stderr  # stopped is no failure
    records = by_policy(out)
    fp32, bf16 = records["float32"], records["mixed_bfloat16"]
    assert fp32.status is Status.OK and fp32.stopped is None
    assert bf16.status is Status.STOPPED, bf16.reason
    stopped = bf16.stopped
    assert stopped.float32_step_s == pytest.approx(fp32.step_time.median_s)  # handed on
    assert stopped.limit == float(LIMIT) and stopped.timeout_s == 120  # tiny_toml's
    assert stopped.steps == 3 and stopped.step_s >= SLOW_STEP_S
    assert stopped.slower_than_float32 == pytest.approx(stopped.step_s / stopped.float32_step_s)
    assert bf16.step_time.count == 3 and bf16.step_time.warmup_steps == 2  # its steps kept
    assert bf16.accuracy.test_accuracy is None and bf16.end_to_end is None
    assert bf16.reason.startswith("stopped: ")
    assert "× slower than float32 after 3 steps; would have taken" in bf16.reason
    assert "torch/mnist_dense/mixed_bfloat16/r0: stopped median step" in result.stdout


def test_compare_shows_it_stopped_and_takes_no_ratio(stopped_run, tmp_path):
    _, out, _ = stopped_run
    report = tmp_path / "report.json"
    result = run_mpbench("compare", out, "--format", "json", "--output", report)
    assert result.returncode == 0, result.stdout + result.stderr
    cells = {c["policy"]: c for c in json.loads(report.read_text())["cells"]}
    bf16 = cells["mixed_bfloat16"]
    assert bf16["status"] == "stopped" and bf16["reason"].startswith("stopped: ")
    assert bf16["speedup_vs_float32"] is None and bf16["test_accuracy"] is None
    assert bf16["stopped"][0]["slower_than_float32"] > float(LIMIT)
    table = run_mpbench("compare", out)
    assert "stopped" in table.stdout and "slower than float32 after 3 steps" in table.stdout


def test_a_resumed_runs_records_hand_on_the_twin(stopped_run, tmp_path):
    _, out, _ = stopped_run
    again = tmp_path / "run"
    shutil.copytree(out, again)
    lines = (again / "results.jsonl").read_text().splitlines(keepends=True)
    (again / "results.jsonl").write_text("".join(lines[:1]))  # float32's only
    result = run_mpbench("run", "--out", again, "--resume", env=SLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    records = by_policy(again)
    assert records["float32"].run_id == records["mixed_bfloat16"].run_id
    stopped = records["mixed_bfloat16"].stopped
    assert stopped is not None
    assert stopped.float32_step_s == pytest.approx(records["float32"].step_time.median_s)
