"""`mpbench run` given bad options, configs and output paths: one line, exit 2, nothing
written, before any cell runs (issue 11, families 6, 7, 9 and 10)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from adversary import assert_refused
from cli import run_mpbench
from frameworks import needs_torch

pytestmark = needs_torch  # its cells import torch, in their own processes

BASE = ["--framework", "torch", "--workload", "mnist_dense", "--policy", "fp32"]


def run(config: Path, out: Path, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return run_mpbench("run", "--config", str(config), *BASE, "--out", str(out), *args, **kwargs)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        pytest.param(
            ["--device", "cuda"],
            ["--device cuda:0", "no GPU here"],
            marks=pytest.mark.skipif(
                bool(glob.glob("/dev/nvidia*")), reason="a GPU is here: --device cuda is valid"
            ),
        ),
        (["--device", "cuda:7"], ["--device cuda:7"]),
        (["--device", "mps"], ["--device mps", "Apple Silicon"]),
        (["--device", "tpu"], ["unknown device 'tpu'"]),
        (["--batch-size", "0"], ["--batch-size 0", "at least 1"]),
        (["--epochs", "0"], ["--epochs 0", "at least 1"]),
        (["--repeat", "0"], ["--repeat 0", "at least 1"]),
        (["--repeat", "1000000000"], ["--repeat 1000000000", "at most 1000"]),
        (["--timeout", "-5"], ["--timeout -5", "at least 1"]),
        (["--timeout", "nan"], ["--timeout nan", "finite"]),
        (["--timeout", "inf"], ["--timeout inf", "finite"]),
        (["--threads", "0"], ["--threads 0"]),
        (["--units", "0"], ["--units 0"]),
        (["--seed", "-1"], ["--seed -1", "at least 0"]),
        (["--seed", "4294967296"], ["--seed 4294967296", "numpy"]),
        (["--seed", "4294967295", "--repeat", "2"], ["seeds must stay at most 4294967295"]),
        (["--batch-size", "100000"], ["mnist_dense", "batch size 100000 exceeds the training set"]),
        (["--warmup-steps", "8"], ["leave none to time after 8 warm-up steps"]),
        (["--data", "imagenet"], ["auto, real, synthetic"]),
        (["--loop", "eager"], ["fit, custom"]),
        (["--jit", "maybe"], ["on, off"]),
        (["--data-dir", "/nonexistent/mpbench"], ["--data-dir /nonexistent/mpbench"]),
        (["--resume"], []),  # --out names a directory that holds no run
    ],
)
def test_bad_options_are_one_line_and_write_nothing(tmp_path, tiny_config, args, fragments):
    out = tmp_path / "run"
    result = run(tiny_config, out, *args)
    assert_refused(result, *fragments)
    assert not out.exists(), "a refused run must not create its run directory"


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("[run]\ntimeout = -5\n", ["timeout = -5", "at least 1"]),
        ("[run]\ntimeout = nan\n", ["timeout = nan", "finite"]),
        ("[run]\nrepeat = 0\n", ["repeat = 0", "at least 1"]),
        ("[run]\nrepeat = 'zero'\n", ["repeat = 'zero'", "whole number"]),
        ("[run]\nrepeat = true\n", ["repeat = True", "whole number"]),
        ("[run]\nframeworks = [1, 2]\n", ["frameworks = [1, 2]", "list of strings"]),
        ("[run]\ndevice = ''\n", ["device =", "must not be empty"]),
        ("[workloads.mnist_dense]\nbatch_size = 0\n", ["batch_size = 0", "at least 1"]),
        ("[workloads.mnist_dense]\nepochs = 0\n", ["epochs = 0", "at least 1"]),
        ("[workloads.mnist_dense]\nunits = 1e3\n", ["units = 1000.0", "whole number"]),
        ("[run]\nbogus = 1\n", ["unknown key"]),
        ("[run\n", ["not valid TOML"]),
        ('run = "a string"\n', ["[run] must be a table"]),
    ],
)
def test_config_values_meet_the_same_limits_as_the_options(tmp_path, text, fragments):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    out = tmp_path / "run"
    assert_refused(run(config, out), str(config), *fragments)
    assert not out.exists()


def test_config_paths_that_are_not_toml_files(tmp_path):
    binary = tmp_path / "binary.toml"
    binary.write_bytes(bytes(range(256)) * 4)
    out = tmp_path / "run"
    for config, fragment in [
        (tmp_path, "is a directory"),
        (binary, "not UTF-8"),
        (tmp_path / "missing.toml", "no such file"),
        (Path("."), "is a directory"),
    ]:
        assert_refused(run(config, out), fragment)
    assert not out.exists()


def test_output_paths_that_cannot_be_run_directories(tmp_path, tiny_config):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    assert_refused(run(tiny_config, a_file), f"--out {a_file}: is a file")
    assert_refused(run(tiny_config, a_file / "below"), f"{a_file} is a file")
    assert a_file.read_text() == "not a directory"
    empty = run_mpbench("run", "--config", str(tiny_config), *BASE, "--out", "", cwd=tmp_path)
    assert_refused(empty, "--out '': empty path")
    no_config = run_mpbench("run", "--config", "", *BASE, cwd=tmp_path)
    assert_refused(no_config, "--config '': empty path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "tiny.toml"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_output_directory(tmp_path, tiny_config):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        assert_refused(run(tiny_config, locked / "run"), "cannot write into")
    finally:
        locked.chmod(0o755)


def test_read_only_mount_as_output(tmp_path, tiny_config):
    """Root ignores permission bits; a read-only mount refuses root too (EROFS)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) for a private read-only mount")
    probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces unavailable: {probe.stderr.decode().strip()}")
    mount = tmp_path / "ro"
    mount.mkdir()
    script = (
        f"mount -t tmpfs -o size=1m,ro tmpfs {mount} && "
        f"{sys.executable} -m mpbench run --config {tiny_config} {' '.join(BASE)} "
        f"--out {mount}/run"
    )
    result = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True)
    assert_refused(result, f"cannot write into {mount}")
