"""Warm fork servers (runner/launchers/warm.py) with real servers and real cells: runs whose
import state is the same share one warm server, each gets a per-run server forked from it
that serves its cells as the run's own server would, and nothing outlives what it should."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from builders import cell_spec
from cli import run_mpbench
from frameworks import needs_torch

import mpbench
from mpbench.backends.base import CellSpec
from mpbench.runner.launchers.process import run_in_child
from mpbench.runner.launchers.process_names import SERVER_NAME, WARM_SERVER_NAME
from mpbench.runner.launchers.warm import IDLE_ENV, IGNORE_ENV, WARM_ENV, socket_path
from mpbench.runner.launchers.zygote import ForkServers


def spec(repeat: int = 0) -> CellSpec:
    small = {"max_steps": 6, "synthetic_train_size": 512, "synthetic_test_size": 128}
    return cell_spec(framework="torch", repeat=repeat, **small)


@pytest.fixture
def folder(monkeypatch) -> Iterator[Path]:
    """A folder of warm servers of this test's own (short: a socket's path has 107 bytes),
    their servers stopped after it."""
    path = Path(tempfile.mkdtemp(prefix="mpw-"))
    monkeypatch.setenv(WARM_ENV, str(path))
    monkeypatch.delenv(IGNORE_ENV, raising=False)
    yield path
    for server in warm_servers(path):
        server.kill()
    shutil.rmtree(path, ignore_errors=True)


def warm_servers(path: Path) -> list[psutil.Process]:
    """The live warm servers started for `path`."""
    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] != WARM_SERVER_NAME:
                continue
            # A server that is exiting (or a zombie not yet reaped) shows an empty cmdline.
            arguments = process.cmdline()
            if arguments and str(path) in arguments[-1]:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def one_run(tmp_path: Path, name: str, repeat: int = 0):
    """A run's servers, one cell through them; the outcome and the per-run server seen: its
    warmth, name, parent and what its stdout and stderr are."""
    servers = ForkServers(tmp_path / name)
    with servers:
        outcome = run_in_child(spec(repeat), 120, tmp_path / f"{name}.log", lambda *_: None,
                               fork_servers=servers)  # fmt: skip
        server = servers._servers["torch"]
        per_run = psutil.Process(server.process.pid)
        output = tuple(os.readlink(f"/proc/{per_run.pid}/fd/{fd}") for fd in (1, 2))
        seen = (server.warm, per_run.name(), per_run.ppid(), output)
    return outcome, seen, per_run


@needs_torch
def test_two_runs_share_one_warm_server_and_train_as_with_their_own(folder, tmp_path):
    first, (warm, name, parent, output), first_server = one_run(tmp_path, "first")
    second, (warm_too, _, parent_too, _), _ = one_run(tmp_path, "second")
    (server,) = warm_servers(folder)
    assert (first.status, second.status) == ("ok", "ok"), (first.reason, second.reason)
    assert warm and warm_too and name == SERVER_NAME
    assert parent == parent_too == server.pid  # each run's server forked by the warm one
    # It prints into the run's own fork-server log, as a server of the run's own does (and
    # so holds a file of the run open: tests/processes.py finds a run's processes so).
    assert output == (str(tmp_path / "first" / "fork-server-torch.log"),) * 2
    assert not first_server.is_running()  # a run's server ends with its run
    log = next(folder.glob("torch-*.log")).read_text()
    assert log.count("torch imported in") == 1 and log.count("serving run") == 2, log
    # Cells as a run's own server forks them (tests/runner/test_fork_server.py compares
    # those with new interpreters): the same steps and losses, launched as forks.
    assert first.launcher == second.launcher == "fork server"
    new = run_in_child(spec(), 120, tmp_path / "new.log", lambda *_: None)
    assert new.status == "ok", new.reason
    for outcome in (first, second):
        assert len(outcome.measurements.step_times_s) == len(new.measurements.step_times_s)
        losses = outcome.measurements.epoch_losses
        assert losses == pytest.approx(new.measurements.epoch_losses, rel=1e-6)


def test_only_runs_that_would_import_alike_share_a_warm_server(tmp_path, monkeypatch):
    folder = Path("/tmp/mpw-x")
    env = {"PATH": "/usr/bin", "MPBENCH_MARK": "a", "PYTEST_CURRENT_TEST": "t1"}
    path = socket_path(folder, "torch", env)
    assert len(str(path)) < 100 and path.parent == folder and path.name.startswith("torch-")
    # What no import reads does not count: pytest's test name, a cell's timeout, the
    # machine's name, what Ray sets per job and per node (a fleet's node runs), and what
    # MPBENCH_WARM_IGNORE names.
    assert socket_path(folder, "torch", {**env, "PYTEST_CURRENT_TEST": "t2"}) == path
    node = {"MPBENCH_MACHINE": "A", "RAY_JOB_ID": "01000000", "RAY_RAYLET_PID": "27046"}
    other_node = {"MPBENCH_MACHINE": "B", "RAY_JOB_ID": "02000000", "RAY_RAYLET_PID": "27179",
                  "SLURM_JOB_ID": "3", "SLURM_JOB_PARTITION": "gpu-b"}  # fmt: skip
    assert socket_path(folder, "torch", {**env, **node}) == path
    assert socket_path(folder, "torch", {**env, **other_node}) == path
    assert socket_path(folder, "torch", {**env, "MPBENCH_MARK": "b"}) != path
    ignoring = {**env, IGNORE_ENV: "MPBENCH_MARK, MPBENCH_FAULT"}
    assert socket_path(folder, "torch", {**ignoring, "MPBENCH_MARK": "b"}) == socket_path(
        folder, "torch", ignoring
    )
    # Anything else an import could read: the framework, the environment, the CPUs a cell
    # sizes its pools by.
    assert socket_path(folder, "tensorflow", env) != path
    assert socket_path(folder, "torch", {**env, "OMP_NUM_THREADS": "1"}) != path
    # The working directory where an import could read it: mpbench found under it (this
    # checkout, the tests' folder), or a relative PYTHONPATH entry; otherwise not.
    assert Path(mpbench.__file__).resolve().is_relative_to(Path.cwd().resolve())
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    absolute, relative = ({**env, "PYTHONPATH": p} for p in ("/opt/lib", "/opt/lib:src"))
    keys = {}
    for name in ("a", "b"):
        monkeypatch.chdir(tmp_path / name)
        keys[name] = [socket_path(folder, "torch", e) for e in (env, absolute, relative)]
    assert keys["a"][0] != path  # this checkout's folder is the state's; a and b are not
    assert keys["a"][:2] == keys["b"][:2]
    assert keys["a"][2] != keys["b"][2]
    monkeypatch.undo()
    cpus = os.sched_getaffinity(0)
    if len(cpus) > 1:
        os.sched_setaffinity(0, {min(cpus)})
        try:
            assert socket_path(folder, "torch", env) != path
        finally:
            os.sched_setaffinity(0, cpus)
    assert socket_path(folder, "torch", env) == path


@needs_torch
def test_a_killed_warm_server_is_replaced_and_an_idle_one_leaves(folder, tmp_path, monkeypatch):
    monkeypatch.setenv(IDLE_ENV, "3")
    first, _, _ = one_run(tmp_path, "first")
    (server,) = warm_servers(folder)
    server.send_signal(signal.SIGKILL)  # its socket file stays behind, stale
    server.wait(10)
    second, (warm, _, parent, _), _ = one_run(tmp_path, "second")
    assert (first.status, second.status, warm) == ("ok", "ok", True), second.reason
    assert parent != server.pid  # the second run's server was forked by a new warm server
    # Idle for IDLE_ENV seconds, it leaves (on a busy machine perhaps before the second run
    # has ended), and takes its socket and pid file with it.
    deadline = time.monotonic() + 30
    while warm_servers(folder):
        assert time.monotonic() < deadline, "the idle warm server stayed"
        time.sleep(0.1)
    assert not list(folder.glob("*.sock")) and not list(folder.glob("*.pid"))


@needs_torch
def test_a_folder_too_deep_for_a_socket_leaves_the_run_its_own_server(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    monkeypatch.setenv(WARM_ENV, str(deep))
    outcome, (warm, name, parent, _), _ = one_run(tmp_path, "run")
    assert outcome.status == "ok", outcome.reason
    assert (warm, name, parent) == (False, SERVER_NAME, os.getpid())
    assert not deep.exists()


@needs_torch
def test_runs_from_the_cli_share_a_warm_server(folder, tmp_path):
    """Two `mpbench run`s, the second served by the warm server the first started: the
    variable reaches the runner from the command line, and the records are a run's."""
    args = ("run", "-f", "torch", "-w", "mnist_dense", "-p", "fp32", "--data", "synthetic",
            "--repeat", "1", "--max-steps", "4", "--warmup-steps", "1", "--units", "16",
            "--batch-size", "32")  # fmt: skip
    for name in ("a", "b"):
        done = run_mpbench(*args, "--out", str(tmp_path / name), timeout=240)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        (record,) = [json.loads(x) for x in (tmp_path / name / "results.jsonl").open()]
        assert record["status"] == "ok" and record["startup"]["launcher"] == "fork server"
    log = next(folder.glob("torch-*.log")).read_text()
    assert log.count("torch imported in") == 1 and log.count("serving run") == 2, log
    (server,) = warm_servers(folder)
    assert server.children() == []  # each run's server ended with its run


SHADOW = """
from mpbench.workloads.user import UserWorkload
from user_models import _features


def model(device):
    import torch
    from torch import nn

    net = nn.Sequential(nn.Linear(8, {width}), nn.ReLU(), nn.Linear({width}, 2)).to(device)
    return net, torch.optim.SGD(net.parameters(), lr=0.1), nn.functional.cross_entropy


# Its batch size from a file in the working directory, as a relative path is read.
BATCH = int(open("batch.txt").read())
MODEL = UserWorkload(name="m", data=_features, torch=model, batch_size=BATCH, epochs=1)
"""
SHADOWS = {"a": {"width": 4, "batch": 8}, "b": {"width": 6, "batch": 16}}


@needs_torch
def test_runs_from_two_folders_share_one_warm_server_each_in_its_own_folder(folder, tmp_path):
    """Where no import reads the working directory (mpbench is not under it), runs from two
    folders share a warm server; each fork runs in its run's folder with that folder first
    on sys.path: the same module name finds each folder's own model, and a relative path
    its own file, in the probe and the cell alike."""
    tests = Path(__file__).resolve().parents[1]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "shadow_model.py").write_text(SHADOW.format(**SHADOWS[name]))
        (tmp_path / name / "batch.txt").write_text(str(SHADOWS[name]["batch"]))
    for name in ("a", "b"):
        done = run_mpbench(
            "run", "-f", "torch", "-w", "shadow_model:MODEL", "-p", "fp32", "--repeat", "1",
            "--max-steps", "4", "--warmup-steps", "1", "--out", "out", cwd=tmp_path / name,
            env={"PYTHONPATH": str(tests)}, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        (record,) = [json.loads(x) for x in (tmp_path / name / "out/results.jsonl").open()]
        assert record["status"] == "ok" and record["startup"]["launcher"] == "fork server"
        assert record["workload"] == "shadow_model:MODEL"
        # Each folder's own model: its batch size read by the probe, its parameters counted
        # in the cell (8*w + w + 2*w + 2).
        width, batch = SHADOWS[name]["width"], SHADOWS[name]["batch"]
        assert record["config"]["batch_size"] == batch and record["params"] == 11 * width + 2
    (log,) = folder.glob("torch-*.log")
    assert log.read_text().count("torch imported in") == 1, log.read_text()
    (server,) = warm_servers(folder)
    assert server.cwd() == "/" and "-P" in server.cmdline()
