"""One run per directory, resume that continues exactly the run that was asked, and results
files cut short (issue 11, families 3, 5, 8 and 12): real runs, real signals, real files."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from adversary import assert_refused, read_jsonl
from builders import tiny_toml
from cli import run_mpbench
from frameworks import needs_torch

# What `mpbench run` and `compare` import as they start, imported once here: each command
# forked from this process (tests/cli.py) then starts without them (about 1 s a command).
import mpbench.compare
import mpbench.compare.options
import mpbench.detect
import mpbench.runner.loop
import mpbench.runner.signals  # noqa: F401

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


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One run of float32 and bfloat16 whose cells hang: while it runs, a second run into its
    directory and a resume of it are refused; it is interrupted (Ctrl-C) with nothing
    finished; then a run into its directory and resumes that contradict it are refused, and
    the resume its hint gives finishes it. What each test checks is noted as it happened."""
    folder = tmp_path_factory.mktemp("interrupted")
    config = folder / "tiny.toml"
    config.write_text(tiny_toml())
    out = folder / "run"
    seen = SimpleNamespace(out=out)
    asked = run_args(config, out, "--batch-size", "32", "--units", "16", *TWO_POLICIES)
    first = start(asked, {"MPBENCH_FAULT": "hang"})
    seen.pid = first.pid
    try:
        wait_for(lambda: (out / "run.json").exists(), first)
        started = time.monotonic()
        # The directory is busy: another run into it, and a resume of it, are refused.
        seen.second = run_mpbench(*run_args(config, out, "--policy", "fp32"))
        seen.busy_resume = run_mpbench(*run_args(config, out), "--resume")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    finally:
        first.send_signal(signal.SIGINT)
        seen.stdout, seen.stderr = first.communicate(timeout=60)
    seen.returncode = first.returncode
    results = out / "results.jsonl"
    seen.records_when_stopped = read_jsonl(results) if results.exists() else []
    results.write_text("")  # an empty results file: nothing finished yet

    seen.again = run_mpbench(*run_args(config, out, "--policy", "fp32"))
    seen.contradicting = run_mpbench(*run_args(config, out, "--batch-size", "64"), "--resume")
    seen.other_policy = run_mpbench(*run_args(config, out, "--policy", "fp16"), "--resume")
    seen.resumed = run_mpbench("run", "--out", str(out), "--resume")  # the hint, exactly
    return seen


def test_a_second_run_into_a_busy_directory_is_refused(interrupted):
    out = interrupted.out
    assert_refused(interrupted.second, f"{out} is in use by mpbench run (pid {interrupted.pid}")
    assert_refused(interrupted.busy_resume, "is in use by mpbench run")
    assert interrupted.returncode == 130
    assert not interrupted.records_when_stopped


def test_an_interrupted_run_with_nothing_finished_resumes_its_own_configuration(interrupted):
    out = interrupted.out
    stdout, stderr = interrupted.stdout, interrupted.stderr
    assert interrupted.returncode == 130, stdout + stderr
    hint = f"mpbench run --out {out} --resume"
    assert hint in " ".join(stdout.split()), stdout

    assert_refused(interrupted.again, "already holds a run", "--resume")
    assert_refused(interrupted.contradicting, "--batch-size 64 (the run has 32)")
    assert_refused(interrupted.other_policy, "--policy", "contradict")

    resumed = interrupted.resumed
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = read_jsonl(out / "results.jsonl")
    assert [r["policy"] for r in records] == ["float32", "mixed_bfloat16"]
    stored = json.loads((out / "run.json").read_text())
    assert {r["run_id"] for r in records} == {stored["run_id"]}
    assert {(r["config"]["batch_size"], r["config"]["units"]) for r in records} == {(32, 16)}


def test_resume_drops_a_torn_last_line_and_measures_that_cell_again(tmp_path, interrupted):
    # A finished run of two cells: the interrupted one, resumed.
    done = interrupted.resumed
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "run"
    shutil.copytree(interrupted.out, out, ignore=shutil.ignore_patterns(".mpbench.lock"))
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
