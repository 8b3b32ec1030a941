"""One run per directory, resume that continues exactly the run that was asked, and results
files cut short (issue 11, families 3, 5, 8 and 12): real runs, real signals, real files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from adversary import assert_refused, read_jsonl
from cli import run_mpbench
from frameworks import needs_torch

pytestmark = needs_torch  # its cells import torch, in their own processes

TWO_POLICIES = ["--policy", "fp32", "--policy", "bf16"]


def run_args(config: Path, out: Path, *extra: str) -> list[str]:
    common = ["--framework", "torch", "--workload", "mnist_dense", "--device", "cpu"]
    return ["run", "--config", str(config), *common, "--out", str(out), *extra]


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mpbench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def wait_for(condition, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def test_a_second_run_into_a_busy_directory_is_refused(tmp_path, tiny_config):
    out = tmp_path / "run"
    first = start(run_args(tiny_config, out, "--policy", "fp32"), {"MPBENCH_FAULT": "hang"})
    try:
        wait_for(lambda: (out / "run.json").exists(), first)
        second = run_mpbench(*run_args(tiny_config, out, "--policy", "fp32"))
        assert_refused(second, f"{out} is in use by mpbench run (pid {first.pid}")
        resumed = run_mpbench(*run_args(tiny_config, out), "--resume")
        assert_refused(resumed, "is in use by mpbench run")
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 130
    assert not (out / "results.jsonl").exists() or not read_jsonl(out / "results.jsonl")


def test_an_interrupted_run_with_nothing_finished_resumes_its_own_configuration(
    tmp_path, tiny_config
):
    out = tmp_path / "run"
    asked = run_args(tiny_config, out, "--batch-size", "32", "--units", "16", *TWO_POLICIES)
    first = start(asked, {"MPBENCH_FAULT": "hang"})
    wait_for(lambda: (out / "run.json").exists(), first)
    time.sleep(1.0)
    first.send_signal(signal.SIGINT)
    stdout, stderr = first.communicate(timeout=60)
    assert first.returncode == 130, stdout + stderr
    hint = f"mpbench run --out {out} --resume"
    assert hint in " ".join(stdout.split()), stdout
    (out / "results.jsonl").write_text("")  # an empty results file: nothing finished yet

    again = run_mpbench(*run_args(tiny_config, out, "--policy", "fp32"))
    assert_refused(again, "already holds a run", "--resume")
    contradicting = run_mpbench(*run_args(tiny_config, out, "--batch-size", "64"), "--resume")
    assert_refused(contradicting, "--batch-size 64 (the run has 32)")
    other_policy = run_mpbench(*run_args(tiny_config, out, "--policy", "fp16"), "--resume")
    assert_refused(other_policy, "--policy", "contradict")

    resumed = run_mpbench("run", "--out", str(out), "--resume")  # the hint, exactly
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = read_jsonl(out / "results.jsonl")
    assert [r["policy"] for r in records] == ["float32", "mixed_bfloat16"]
    stored = json.loads((out / "run.json").read_text())
    assert {r["run_id"] for r in records} == {stored["run_id"]}
    assert {(r["config"]["batch_size"], r["config"]["units"]) for r in records} == {(32, 16)}


def test_resume_drops_a_torn_last_line_and_measures_that_cell_again(tmp_path, tiny_config):
    out = tmp_path / "run"
    done = run_mpbench(*run_args(tiny_config, out, *TWO_POLICIES))
    assert done.returncode == 0, done.stdout + done.stderr
    results = out / "results.jsonl"
    whole = results.read_bytes()
    first_line = whole[: whole.index(b"\n") + 1]
    results.write_bytes(whole[: len(first_line) + 200])  # the second record cut mid-write

    refused = run_mpbench("compare", str(out))
    assert_refused(refused, "line 2")  # a reader never guesses past a torn record

    resumed = run_mpbench("run", "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "dropped a torn last line" in " ".join(resumed.stderr.split())  # a warning
    assert results.read_bytes().startswith(first_line)  # the finished record untouched
    records = read_jsonl(results)
    assert [r["policy"] for r in records] == ["float32", "mixed_bfloat16"]
    assert all(r["status"] == "ok" for r in records)
