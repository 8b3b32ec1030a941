"""`mpbench run` end to end with real PyTorch training in real child processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from builders import tiny_toml
from cli import run_mpbench
from frameworks import needs_torch
from processes import run_processes, still_running

# What `mpbench run` and `compare` import as they start, imported once here: each command
# forked from this process (tests/cli.py) then starts without them (about 1 s a command).
import mpbench.compare
import mpbench.compare.options
import mpbench.detect
import mpbench.runner.loop
import mpbench.runner.signals  # noqa: F401
from mpbench.results.sidefile import read_side_file
from mpbench.runner.launchers.process_names import CELL_NAME

pytestmark = needs_torch  # its cells import torch, in their own processes

TINY = tiny_toml(
    run={"warmup_steps": 3},
    mnist_dense={"batch_size": 128, "epochs": 4, "max_steps": 40, "units": 64,
                 "synthetic_train_size": 2048, "synthetic_test_size": 512},
    cifar10_cnn={"batch_size": 8, "max_steps": 8, "synthetic_train_size": 64,
                 "synthetic_test_size": 16},  # bf16 convolutions are emulated here: slow
)  # fmt: skip


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def torch_args(config: Path, out: Path, *args: str, workload: str = "mnist_dense") -> list[str]:
    """`mpbench run` arguments for torch cells on the CPU; `args` add policies and the like."""
    common = ["--config", str(config), "--framework", "torch", "--workload", workload]
    return ["run", *common, "--device", "cpu", "--out", str(out), *args]


def run_torch(config: Path, out: Path, *args: str, workload="mnist_dense", env=None):
    return run_mpbench(*torch_args(config, out, *args, workload=workload), env=env)


def policies(*names: str) -> list[str]:
    return [arg for name in names for arg in ("--policy", name)]


def records(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return {r["policy"]: r for r in map(json.loads, lines)}


@pytest.fixture(scope="module")
def module_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "tiny.toml"
    path.write_text(TINY)
    return path


@pytest.fixture(scope="module")
def every_policy(tmp_path_factory, module_config):
    """One run of every policy (float32, bfloat16, float16, tf32), read by the test of what
    each policy records and resumed, from a copy, by the test of --resume."""
    out = tmp_path_factory.mktemp("every_policy") / "run"
    result = run_torch(module_config, out, *policies("fp32", "bf16", "fp16", "tf32"))
    return out, result


def test_each_policy_trains_and_records_its_effective_precision(every_policy):
    out, result = every_policy
    assert result.returncode == 0, result.stdout + result.stderr
    got = records(out)
    assert set(got) == {"float32", "mixed_bfloat16", "mixed_float16", "tf32"}

    tf32 = got["tf32"]
    assert tf32["status"] == "skipped" and "TF32" in tf32["reason"]

    for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
        record = got[policy]
        assert record["status"] == "ok", record["reason"]
        assert record["step_time"]["count"] == 40 - 3
        assert record["step_time"]["warmup_steps"] == 3
        assert len(record["step_time"]["raw_s"]) == 37
        assert record["accuracy"]["test_accuracy"] > 0.5  # ten classes: chance is 0.1
        assert len(record["accuracy"]["train_loss_per_epoch"]) == 3  # 16 steps/epoch, 40 steps
        assert record["data"]["source"] == "synthetic"
        assert record["data"]["name"] == "synthetic-mnist"
        assert record["params"] == 784 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
        assert record["throughput_samples_per_s"] == pytest.approx(
            128 / record["step_time"]["median_s"]
        )
        assert record["memory"]["host_peak_rss_bytes"] > 0
        assert record["mfu"] is None  # no datasheet peak for a CPU
        assert record["precision"]["tf32_enabled"] is False
        assert record["precision"]["output_dtype"] == "float32"
        assert record["precision"]["variable_dtype"] == "float32"

    fp32, bf16, fp16 = got["float32"], got["mixed_bfloat16"], got["mixed_float16"]
    assert fp32["precision"]["autocast_enabled"] is False
    assert fp32["precision"]["compute_dtype"] == "float32"
    assert fp32["loss_scale"] is None
    assert bf16["precision"]["autocast_dtype"] == "bfloat16"
    assert bf16["precision"]["compute_dtype"] == "bfloat16"
    assert bf16["precision"]["loss_scaling"] is False and bf16["loss_scale"] is None
    assert fp16["precision"]["compute_dtype"] == "float16"
    assert fp16["precision"]["loss_scaling"] is True
    assert fp16["loss_scale"]["final_scale"] > 0
    assert fp16["loss_scale"]["skipped_steps"] >= 0

    assert (out / "results.csv").exists()
    environment = json.loads((out / "environment.json").read_text())
    assert "mpbench run" in environment["command_line"]
    assert environment["detect"]
    assert "torch/mnist_dense/mixed_float16/r0" in result.stdout

    # Telemetry (docs/telemetry.md): every ok cell has a side file with a loss per step, the
    # fp16 cell a loss-scale series too, CPU samples, and energy null with the reason.
    for record in (fp32, bf16, fp16):
        telemetry = record["telemetry"]
        side = read_side_file(telemetry["side_file"], run_dir=out)
        assert side.identity == (record["run_id"], record["cell_id"], record["repeat"])
        columns = side.numerics.columns
        assert columns["step"] == list(range(1, 41)) and telemetry["steps"] == 40
        assert all(math.isfinite(loss) for loss in columns["loss"])
        has_scale = [s is not None for s in columns["loss_scale"]]
        assert has_scale == [record is fp16] * 40
        assert telemetry["grad_norm_median"] > 0
        assert side.device.series["cpu_util_pct"]
        # The CPU-time counter over the window: a figure, or why the window was too short.
        cpu, why = telemetry["mean_cpu_util_pct"], telemetry["unavailable"].get("mean_cpu_util_pct")
        assert (cpu is None) == (why is not None) and telemetry["window_s"] > 0
        assert cpu is not None or "ticks of the CPU counters" in why
        assert record["energy"]["joules"] is None
        assert record["energy"]["reason"] == "no energy counter on this machine"


def test_a_diverged_cell_falls_back_one_step_down_the_ladder(tmp_path, tiny_config):
    """--on-diverge fallback: a static scale of 1e30 skips every step, the detector ends the
    fp16 cell at step 20 (its window), and a bf16 cell runs in its place, labelled so."""
    out = tmp_path / "run"
    result = run_torch(
        tiny_config, out, *policies("fp16"), "--loss-scale", "1e30", "--on-diverge", "fallback"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    got = records(out)
    fp16, bf16 = got["mixed_float16"], got["mixed_bfloat16"]
    assert fp16["status"] == "diverged" and fp16["fallback_of"] is None
    assert fp16["divergence"]["signal"] == "skipped_fraction"
    assert fp16["divergence"]["step"] == 20
    skipped = read_side_file(fp16["telemetry"]["side_file"], run_dir=out).numerics.columns
    assert skipped["skipped"] == [True] * 20  # its steps until the signal, all skipped
    assert bf16["status"] == "ok" and bf16["fallback_of"] == fp16["cell_id"]
    assert bf16["cell_id"] == "torch/mnist_dense/mixed_float16@ls1e+30~fallback-mixed_bfloat16/r0"
    assert "fallback" in result.stdout


def test_the_cifar_cnn_trains(tmp_path, tiny_config):
    out = tmp_path / "run"
    result = run_torch(tiny_config, out, *policies("bf16"), workload="cifar10_cnn")
    assert result.returncode == 0, result.stdout + result.stderr
    record = records(out)["mixed_bfloat16"]
    assert record["status"] == "ok"
    assert record["params"] == 315_722
    assert record["data"]["name"] == "synthetic-cifar10"
    assert record["step_time"]["count"] == 8 - 3


@pytest.mark.parametrize(
    ("fault", "status", "reason"),
    [
        ("raise", "error", "injected failure"),
        ("oom", "oom", "MemoryError"),
        ("crash", "error", "SIGABRT"),
        ("diverge", "diverged", "non-finite loss"),
    ],
)
def test_a_failing_cell_leaves_the_others_intact(tmp_path, tiny_config, fault, status, reason):
    out = tmp_path / "run"
    result = run_torch(
        tiny_config,
        str(out),
        *policies("fp32", "bf16"),
        "--max-steps",
        "10",
        env={"MPBENCH_FAULT": f"{fault}@mixed_bfloat16"},
    )
    got = records(out)
    assert got["float32"]["status"] == "ok"
    assert got["mixed_bfloat16"]["status"] == status
    assert reason in got["mixed_bfloat16"]["reason"]
    assert "Traceback" not in result.stdout
    assert result.returncode == (1 if status == "error" else 0)


def test_a_hanging_cell_times_out(tmp_path, tiny_config):
    out = tmp_path / "run"
    started = time.monotonic()
    result = run_torch(
        tiny_config, str(out), *policies("fp32"), "--timeout", "3", env={"MPBENCH_FAULT": "hang"}
    )
    assert result.returncode == 1
    record = records(out)["float32"]
    assert record["status"] == "timeout" and "3 s timeout" in record["reason"]
    assert time.monotonic() - started < 60


def test_resume_runs_only_the_missing_cells(tmp_path, module_config, every_policy):
    finished, first = every_policy
    assert first.returncode == 0, first.stderr
    out = tmp_path / "run"
    shutil.copytree(finished, out, ignore=shutil.ignore_patterns(".mpbench.lock"))
    asked = policies("fp32", "bf16", "fp16", "tf32")
    again = run_torch(module_config, out, *policies("fp32"))
    assert again.returncode == 2 and "--resume" in again.stderr
    results = out / "results.jsonl"
    whole = [json.loads(x) for x in results.read_text().splitlines()]
    # fp16 and tf32 never finished
    results.write_text("".join(results.read_text().splitlines(keepends=True)[:2]))

    resumed = run_torch(module_config, out, *asked, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "already done (--resume)" in resumed.stdout
    lines = [json.loads(x) for x in results.read_text().splitlines()]
    assert [r["policy"] for r in lines] == [r["policy"] for r in whole]
    assert [r["policy"] for r in lines[:2]] == ["float32", "mixed_bfloat16"]
    assert lines[2]["status"] == "ok" and lines[2]["timestamp"] != whole[2]["timestamp"]
    assert len({r["run_id"] for r in lines}) == 1


def test_ctrl_c_stops_cleanly_and_keeps_finished_cells(tmp_path, tiny_config):
    out = tmp_path / "run"
    arguments = torch_args(tiny_config, out, "--max-steps", "6", *policies("fp32", "bf16"))
    process = subprocess.Popen(
        [sys.executable, "-m", "mpbench", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "MPBENCH_FAULT": "hang@mixed_bfloat16"},
    )
    results = out / "results.jsonl"
    log = out / "logs" / "torch__mnist_dense__mixed_bfloat16__r0.log"
    deadline = time.monotonic() + 120
    while not (results.exists() and results.read_text().strip()):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    while not (log.exists() and "injecting the hang fault" in log.read_text()):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)  # the bf16 cell is now hanging in its child
    # Its processes (a fork of the suite's warm server shows that server's environment, so
    # they are found by the run's files they hold open; processes.py).
    seen = run_processes(out)
    assert CELL_NAME in [p.name() for p in seen], seen
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert "--resume" in stdout
    kept = [json.loads(x) for x in results.read_text().splitlines()]
    assert [r["policy"] for r in kept] == ["float32"]
    assert (out / "results.csv").exists()
    assert not still_running(seen, out), "the hanging cell's process was left running"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "fp4"], "unknown policy 'fp4'; valid choices: float32"),
        (["--workload", "resnet"], "unknown workload 'resnet'; valid choices: mnist_dense"),
        (["--framework", "jax"], "unknown framework 'jax'; valid choices: torch, tensorflow"),
        (["--device", "tpu"], "unknown device 'tpu'"),
        (["--data", "imagenet"], "valid choices: auto, real, synthetic"),
        # This machine has no GPU and no NVIDIA or ROCm device files, and is not a Mac.
        (["--device", "cuda"], "--device cuda:0: no GPU here"),
        (["--device", "cuda:3"], "--device cuda:3: no GPU here"),
        (["--device", "mps"], "--device mps: Apple's Metal (MPS) backend exists only on Apple"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    result = run_mpbench("run", "--out", str(tmp_path / "run"), *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_malformed_config_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[run]\npolicies = 'bf16'\n")
    result = run_mpbench("run", "--config", str(bad), "--out", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "policies = 'bf16': must be a list of strings" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def real_data_and_peak(tmp_path_factory, module_config):
    """One float32 cell on real data (a small mnist.npz in Keras' exact format, learnable
    images from the synthetic generator) with --measure-peak (detect's matmul measurement at
    tiny sizes, nothing cached yet): read by the test of each."""
    import numpy as np

    from mpbench.data import load

    folder = tmp_path_factory.mktemp("real_data_and_peak")
    stand_in = load("mnist", "synthetic", synthetic_train_size=2048, synthetic_test_size=512)
    data_dir = folder / "datasets"
    data_dir.mkdir()
    npz = data_dir / "mnist.npz"
    np.savez(
        npz,
        x_train=stand_in.x_train,
        y_train=stand_in.y_train,
        x_test=stand_in.x_test,
        y_test=stand_in.y_test,
    )
    env = {
        "MPBENCH_CACHE": str(folder / "cache"),
        "MPBENCH_MEASURE_SIZES": "128,256",
        "MPBENCH_MEASURE_BUDGET": "0.3",
    }
    out = folder / "run"
    args = torch_args(module_config, out, "--policy", "fp32", "--max-steps", "8")
    args += ["--data", "real", "--data-dir", str(data_dir), "--measure-peak"]
    return SimpleNamespace(
        result=run_mpbench(*args, env=env), out=out, npz=npz, cache=folder / "cache"
    )


def test_real_data_is_used_and_recorded_with_its_checksum(real_data_and_peak):
    import hashlib

    result, out, npz = real_data_and_peak.result, real_data_and_peak.out, real_data_and_peak.npz
    assert result.returncode == 0, result.stdout + result.stderr
    record = records(out)["float32"]
    assert record["status"] == "ok", record["reason"]
    data = record["data"]
    assert (data["name"], data["source"]) == ("mnist", "real")
    assert (data["train_size"], data["test_size"]) == (2048, 512)
    assert data["sha256"]["mnist.npz"] == hashlib.sha256(npz.read_bytes()).hexdigest()
    assert record["config"]["data"] == "real"


def test_real_data_never_falls_back_to_synthetic(tmp_path, tiny_config):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "run"
    result = run_torch(
        tiny_config,
        out,
        *policies("fp32"),
        "--data",
        "real",
        "--data-dir",
        str(empty),
        env={
            "MPBENCH_CACHE": str(tmp_path / "cache"),
            "KERAS_HOME": str(tmp_path / "keras"),
            "MPBENCH_MNIST_URL": (tmp_path / "no-such-mnist.npz").as_uri(),  # never the network
        },
    )
    # Checked once in the parent, before any cell or file (issue 11).
    assert result.returncode == 2, result.stdout + result.stderr
    assert "MNIST" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_measure_peak_measures_once_and_records_mfu_against_it(real_data_and_peak):
    """--measure-peak runs detect's matmul measurement (tiny sizes here) when nothing is cached
    for this hardware, then every ok record carries mfu_measured = achieved / measured peak."""
    result, out, cache = real_data_and_peak.result, real_data_and_peak.out, real_data_and_peak.cache
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Measuring the matmul peak" in result.stdout
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    if "not cached: the machine was busy" in " ".join(result.stderr.split()):  # a warning
        # Another process shared the machine while it measured: nothing cached, no MFU.
        assert not list((cache / "peaks").glob("*.json"))
        assert record["measured_peak_tflops"] is None and record["mfu_measured"] is None
        return
    (cached,) = (cache / "peaks").glob("*.json")
    assert record["hardware_fingerprint"] == cached.stem
    assert record["measured_peak_tflops"] > 0
    assert record["mfu_measured"] == pytest.approx(
        record["achieved_tflops"] / record["measured_peak_tflops"]
    )
    assert record["mfu"] is None  # no datasheet peak for a CPU
