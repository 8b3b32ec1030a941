"""Real two-rank torchrun jobs on this CPU (gloo): records, a rank killed with SIGKILL, and
Ctrl-C. Two ranks on two shared cores measure plumbing, not scaling: nothing here asserts a
speed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from frameworks import needs_torch
from processes import finished, marked, selected_tests, stop

# its cells import torch, in their own processes; a CPU replica needs a core of its own
pytestmark = [needs_torch, pytest.mark.all_cores]

# mnist_dense trains long enough to be killed mid-job; cifar10_cnn is the short cell after it.
CONFIG = """
[run]
data = "synthetic"
warmup_steps = 2
timeout = 180

[workloads.mnist_dense]
batch_size = 64
epochs = 1
max_steps = {mnist_steps}
units = 32
synthetic_train_size = {mnist_train}
synthetic_test_size = 256

[workloads.cifar10_cnn]
batch_size = 16
epochs = 1
max_steps = 5
synthetic_train_size = 256
synthetic_test_size = 64
"""


def config(tmp_path: Path, mnist_steps: int = 10, mnist_train: int = 2048) -> Path:
    path = tmp_path / "dist.toml"
    path.write_text(CONFIG.format(mnist_steps=mnist_steps, mnist_train=mnist_train))
    return path


def arguments(config_path: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "mpbench", "run", "--config", str(config_path),
        "--framework", "torch", "--device", "cpu", "--out", str(out), *extra,
    ]  # fmt: skip


def records(out: Path) -> dict[str, dict]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return {r["cell_id"]: r for r in map(json.loads, lines)}


class Started:
    """A run started in the background: `done()` waits for it, as subprocess.run would."""

    def __init__(self, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.out = tmp_path / "run"
        self.process = subprocess.Popen(
            arguments(config(tmp_path), self.out, *extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )

    def done(self, timeout: float) -> subprocess.CompletedProcess[str]:
        return finished(self.process, timeout)


# The runs that end on their own, by the test that reads each.
RUNS = {
    "test_a_hanging_rank_times_the_job_out_and_no_rank_is_left": "hang",
    "test_world_sizes_one_and_two_with_a_bf16_all_reduce": "world_sizes",
    "test_a_float8_job_trains_emulated_on_two_ranks": "fp8",
}


@pytest.fixture(scope="module")
def started(request, tmp_path_factory) -> Iterator[dict[str, Started]]:
    """The runs that end on their own (those whose tests this session runs), all started when
    the first of their tests asks: the hanging rank's run mostly waits for its timeout, and
    the others' single-core phases (starting the CLI, the cell, torchrun's agent) overlap.
    Each test waits for its own run and asserts on it alone (its output folder and process
    mark are its own)."""
    wanted = {RUNS.get(getattr(item, "originalname", None)) for item in selected_tests(request)}
    runs: dict[str, Started] = {}
    try:
        if "hang" in wanted:
            hang = tmp_path_factory.mktemp("hang")
            runs["hang"] = Started(
                hang, "-w", "mnist_dense", "-p", "fp32", "--nproc", "2", "--timeout", "18",
                env={"MPBENCH_FAULT": "hang@#rank1", "MPBENCH_MARK": str(hang / "run")},
            )  # fmt: skip
        if "world_sizes" in wanted:
            runs["world_sizes"] = Started(
                tmp_path_factory.mktemp("world_sizes"),
                "-w", "mnist_dense", "-p", "bf16", "--nproc", "1,2", "--grad-comm", "bf16",
            )  # fmt: skip
        if "fp8" in wanted:
            runs["fp8"] = Started(
                tmp_path_factory.mktemp("fp8"), "-w", "mnist_dense", "-p", "fp8", "--nproc", "2"
            )
        yield runs
    finally:
        stop(run.process for run in runs.values())


@pytest.mark.slow
def test_world_sizes_one_and_two_with_a_bf16_all_reduce(started):
    run = started["world_sizes"]
    out = run.out
    done = run.done(timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    found = records(out)
    single = found["torch/mnist_dense/mixed_bfloat16/r0"]
    job = found["torch/mnist_dense/mixed_bfloat16@np2@comm-bf16/r0"]
    assert single["status"] == job["status"] == "ok", job["reason"]
    assert single["distributed"] is None and "world_size" not in single["config"]
    dist = job["distributed"]
    assert job["config"]["world_size"] == 2 and job["config"]["grad_comm"] == "bf16"
    assert (dist["world_size"], dist["nodes"], dist["nproc_per_node"]) == (2, 1, 2)
    assert (dist["launcher"], dist["backend"], dist["grad_comm"]) == ("torchrun", "gloo", "bf16")
    assert dist["devices"] == "shared"  # two processes on one CPU's cores
    assert len(dist["rank_step_median_s"]) == 2 and all(t > 0 for t in dist["rank_step_median_s"])
    assert dist["straggler_ratio"] >= 1.0
    assert dist["allreduce_s_per_step"] > 0 and "backward_comm_time" in dist["comm_source"]
    assert (
        0
        < dist["allreduce_share"]
        == pytest.approx(dist["allreduce_s_per_step"] / job["step_time"]["median_s"])
    )
    # The job's step is the slowest rank's: never faster than a rank's own median.
    assert job["step_time"]["median_s"] >= min(dist["rank_step_median_s"])
    # Global throughput: both ranks' batches per job step; efficiency against world size 1.
    assert job["throughput_samples_per_s"] == pytest.approx(2 * 64 / job["step_time"]["median_s"])
    assert dist["per_device_samples_per_s"] == pytest.approx(job["throughput_samples_per_s"] / 2)
    assert dist["scaling_reference"] == single["cell_id"]
    assert dist["scaling_efficiency"] == pytest.approx(
        job["throughput_samples_per_s"] / (2 * single["throughput_samples_per_s"])
    )
    # The run's threads (one per core by default) split between the 2 ranks: 1 each on two
    # cores, 8 each on sixteen.
    assert job["threads"]["intra_op"] == max(1, single["threads"]["intra_op"] // 2)
    assert job["precision"]["compute_dtype"] == "bfloat16" and job["precision"]["replicas"] == 2
    assert 0 <= job["accuracy"]["test_accuracy"] <= 1


@pytest.mark.slow
def test_a_float8_job_trains_emulated_on_two_ranks(started):
    """torchao converts the model before DDP wraps it: both ranks train the same fp8 layers."""
    run = started["fp8"]
    out = run.out
    done = run.done(timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (job,) = records(out).values()
    assert job["cell_id"] == "torch/mnist_dense/float8@np2/r0"
    assert job["status"] == "ok", job["reason"]
    assert job["distributed"]["world_size"] == 2 and job["precision"]["replicas"] == 2
    fp8 = job["fp8"]
    assert fp8["mode"] == "emulated" and fp8["layers_fp8"] == ["0", "2"]
    assert 0.9 < fp8["flop_share_fp8"] < 1.0  # the 10-class head stays in bfloat16
    assert job["accuracy"]["test_accuracy"] > 0.2  # 10 classes: above chance, it learnt (0.37)


def _rank_process(mark: str, rank: str) -> psutil.Process | None:
    for process in marked(mark):
        try:
            environ = process.environ()
            if environ.get("RANK") == rank and "launchers.rank" in " ".join(process.cmdline()):
                return process
        except psutil.NoSuchProcess:
            continue
    return None


def _start_and_wait_for_training(
    tmp_path: Path, out: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """A run whose first cell is a long two-rank job, once both ranks train."""
    long_config = config(tmp_path, mnist_steps=100000, mnist_train=60000)
    process = subprocess.Popen(
        arguments(long_config, out, "--nproc", "2", *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {}), "MPBENCH_MARK": str(out)},
    )
    log = out / "logs" / "torch__mnist_dense__float32@np2__r0.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "rank 1 of 2 training" in log.read_text(errors="replace")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the ranks never started training"
        time.sleep(0.2)
    return process


# torchrun's agent looks at its ranks every 0.1 s; on a busy machine it may look much later,
# after rank 0 has failed on its own at losing its peer (gloo's "Connection reset by peer").
# PET_MONITOR_INTERVAL (torchrun's --monitor-interval) makes that the rule.
@pytest.mark.slow
@pytest.mark.parametrize("monitor_interval", [None, "5"], ids=["watched", "agent-looks-late"])
def test_a_rank_killed_with_sigkill_ends_the_cell_as_an_error_and_later_cells_run(
    tmp_path, monitor_interval
):
    out = tmp_path / "run"
    env = {"PET_MONITOR_INTERVAL": monitor_interval} if monitor_interval else {}
    process = _start_and_wait_for_training(
        tmp_path, out, "-w", "mnist_dense", "-w", "cifar10_cnn", "-p", "fp32", env=env
    )
    victim = _rank_process(str(out), "1")
    assert victim is not None
    victim.send_signal(signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 1, stdout + stderr  # a cell failed to run: exit 1
    found = records(out)
    killed = found["torch/mnist_dense/float32@np2/r0"]
    assert killed["status"] == "error"
    assert killed["reason"] == (
        f"rank 1 (pid {victim.pid}) was killed by SIGKILL; torchrun ended the job's other ranks"
    )
    log = (out / "logs" / "torch__mnist_dense__float32@np2__r0.log").read_text()
    assert "terminate called" not in log  # a failing rank exits with its code, never SIGABRT
    later = found["torch/cifar10_cnn/float32@np2/r0"]
    assert later["status"] == "ok", later["reason"]
    assert later["distributed"]["world_size"] == 2
    assert not marked(str(out)), "a rank outlived its job"


def _agent_process(mark: str) -> psutil.Process | None:
    """The torchrun agent: the process running torch.distributed.run (the ranks are its
    children)."""
    for process in marked(mark):
        try:
            if "torch.distributed.run" in process.cmdline():
                return process
        except psutil.NoSuchProcess:
            continue
    return None


@pytest.mark.slow
def test_the_torchrun_agent_killed_with_sigkill_is_named_with_its_signal(tmp_path):
    out = tmp_path / "run"
    process = _start_and_wait_for_training(
        tmp_path, out, "-w", "mnist_dense", "-w", "cifar10_cnn", "-p", "fp32"
    )
    agent = _agent_process(str(out))
    assert agent is not None
    ranks = [p for p in agent.children() if "launchers.rank" in " ".join(p.cmdline())]
    assert len(ranks) == 2
    agent.send_signal(signal.SIGKILL)
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == 1, stdout + stderr
    found = records(out)
    killed = found["torch/mnist_dense/float32@np2/r0"]
    assert killed["status"] == "error"
    assert killed["reason"] == (
        f"the torchrun agent (pid {agent.pid}) was killed by SIGKILL; its ranks died with it"
    )
    assert found["torch/cifar10_cnn/float32@np2/r0"]["status"] == "ok"
    psutil.wait_procs(ranks, timeout=10)
    assert not marked(str(out)), "a rank outlived its agent"


@pytest.mark.slow
def test_ctrl_c_during_a_job_leaves_no_rank_behind(tmp_path):
    out = tmp_path / "run"
    process = _start_and_wait_for_training(tmp_path, out, "-w", "mnist_dense", "-p", "fp32")
    ranks = [p for p in marked(str(out)) if "RANK" in p.environ()]
    assert len(ranks) == 2
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr and "--resume" in stdout
    psutil.wait_procs(ranks, timeout=10)
    assert not marked(str(out)), "a rank outlived the interrupted run"


@pytest.mark.slow
def test_a_hanging_rank_times_the_job_out_and_no_rank_is_left(started):
    run = started["hang"]  # --timeout 18, MPBENCH_FAULT=hang@#rank1 (the fixture's)
    out = run.out
    done = run.done(timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    record = records(out)["torch/mnist_dense/float32@np2/r0"]
    assert record["status"] == "timeout" and "18 s timeout" in record["reason"]
    log = (out / "logs" / "torch__mnist_dense__float32@np2__r0.log").read_text()
    assert "injecting the hang fault" in log  # rank 1 did hang (the launcher did not)
    time.sleep(1)
    assert not marked(str(out)), "a rank outlived its timed-out job"
