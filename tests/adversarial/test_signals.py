"""Real signals to a real `mpbench run` while a cell hangs in its child process.

SIGTERM and SIGHUP stop the run as Ctrl-C does (exit 128 + signal, finished records kept,
results.csv written, resume hint, nothing left running); SIGKILL of the parent gives it no
chance to clean up, so the cell must die by itself (PR_SET_PDEATHSIG and its lifeline), with
everything it started, and nothing may be left in the temp folder.

A run's processes are found by the files of its test folder they hold open, and the
sessions they lead (tests/processes.py): its cells are forks of the session's warm torch
server, which every test here shares.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from adversary import read_jsonl
from frameworks import needs_torch
from processes import holding, run_processes, still_running

from mpbench.runner.launchers.process_names import CELL_NAME, WATCHER_NAME

pytestmark = needs_torch  # its cells import torch, in their own processes

MATRIX = ("--framework", "torch", "--workload", "mnist_dense", "--device", "cpu")
POLICIES = ("--policy", "fp32", "--policy", "bf16")


class Run:
    """`mpbench run` of float32 then bfloat16 as a subprocess, in `tmp_path` (its processes
    are those holding files there), with a private TMPDIR, and `fault` in the bfloat16 cell."""

    def __init__(self, tmp_path: Path, config: Path, fault: str | None, prefix=()) -> None:
        self.folder = tmp_path
        self.out = tmp_path / "run"
        self.tmpdir = tmp_path / "tmp"
        self.tmpdir.mkdir()
        self.seen: list[psutil.Process] = []  # the run's processes as its fault fired
        env = {**os.environ, "TMPDIR": str(self.tmpdir)}
        env.pop("MPBENCH_FAULT", None)
        if fault:
            env["MPBENCH_FAULT"] = f"{fault}@mixed_bfloat16"
        args = ["run", "--config", str(config), *MATRIX, *POLICIES, "--out", str(self.out)]
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "mpbench", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def records(self) -> list[dict]:
        results = self.out / "results.jsonl"
        return read_jsonl(results) if results.exists() else []

    def wait_for_the_fault(self) -> None:
        """Until float32's record is written and the bfloat16 cell has reached its fault;
        the run's processes then are noted (`seen`)."""
        log = self.out / "logs" / "torch__mnist_dense__mixed_bfloat16__r0.log"
        deadline = time.monotonic() + 120
        while not (self.records() and log.exists() and "injecting the" in log.read_text()):
            assert self.process.poll() is None, self.process.communicate()
            assert time.monotonic() < deadline, "the second cell never reached its fault"
            time.sleep(0.05)
        time.sleep(0.2)
        self.seen = run_processes(self.folder)
        names = sorted(p.name() for p in self.seen)
        assert names.count(CELL_NAME) == 1 and WATCHER_NAME in names, names

    def temp_files(self) -> list[str]:
        """What the run left in its TMPDIR; torch's own cache folder is not ours to judge."""
        return [p.name for p in self.tmpdir.iterdir() if not p.name.startswith("torchinductor_")]

    def finish(self) -> tuple[int, str]:
        stdout, stderr = self.process.communicate(timeout=60)
        return self.process.returncode, stdout + stderr


def cell_processes(folder: Path) -> list[psutil.Process]:
    found = []
    for process in holding(folder):
        try:
            if process.name() == CELL_NAME:  # a new process or a fork server's
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def gone_within(run: Run, seconds: float) -> list[psutil.Process]:
    """The run's processes (those seen as its fault fired, and any holding a file of its
    folder) still alive after `seconds` (polling); [] as soon as none is."""
    deadline = time.monotonic() + seconds
    while (left := still_running(run.seen, run.folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_the_run_as_ctrl_c_does(tmp_path, tiny_config, signum, code):
    run = Run(tmp_path, tiny_config, "hang")
    run.wait_for_the_fault()
    run.process.send_signal(signum)
    returncode, output = run.finish()
    assert returncode == code, output
    assert "Traceback" not in output
    assert f"continue with: mpbench run --out {run.out} --resume" in output.replace("\n", "")
    assert [r["policy"] for r in run.records()] == ["float32"]
    assert run.records()[0]["status"] == "ok"
    assert (run.out / "results.csv").exists()
    assert gone_within(run, 2) == [], "a cell process outlived the run"
    assert run.temp_files() == []


def test_more_signals_during_the_cleanup_do_not_cut_it_short(tmp_path, tiny_config):
    """`deaf` ignores SIGTERM, so the cleanup waits out its grace period before the SIGKILL;
    the signals that arrive meanwhile change nothing."""
    run = Run(tmp_path, tiny_config, "deaf")
    run.wait_for_the_fault()
    (cell,) = cell_processes(run.folder)  # the bfloat16 cell: float32's has finished
    deadline = time.monotonic() + 10
    while not ignores_sigterm(cell.pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run.process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    time.sleep(1.0)
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        run.process.send_signal(signum)
    returncode, output = run.finish()
    assert time.monotonic() - stopped > 4  # the extra signals came during the grace period
    assert returncode == 143, output
    assert "Traceback" not in output
    assert "--resume" in output
    assert [r["policy"] for r in run.records()] == ["float32"]
    assert (run.out / "results.csv").exists()
    assert gone_within(run, 2) == []


def ignores_sigterm(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))[7:], 16)
    return bool(ignored & (1 << (signal.SIGTERM - 1)))


def test_a_run_started_with_sighup_ignored_ignores_it(tmp_path, tiny_config):
    """`nohup mpbench run ...` must survive the terminal closing."""
    ignore_sighup = (
        "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    run = Run(tmp_path, tiny_config, None, prefix=(sys.executable, "-c", ignore_sighup))
    deadline = time.monotonic() + 120
    while not run.records():
        assert run.process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    run.process.send_signal(signal.SIGHUP)
    returncode, output = run.finish()
    assert returncode == 0, output
    assert [(r["policy"], r["status"]) for r in run.records()] == [
        ("float32", "ok"),
        ("mixed_bfloat16", "ok"),
    ]


@pytest.mark.parametrize(
    "fault",
    [
        "hang",  # asleep in time.sleep
        "silent",  # asleep in a C call that holds the GIL: no Python code runs
        "spawn",  # has started a grandchild process
    ],
)
def test_sigkill_of_the_parent_leaves_no_cell_running(tmp_path, tiny_config, fault):
    run = Run(tmp_path, tiny_config, fault)
    run.wait_for_the_fault()
    if fault == "spawn":
        (cell,) = cell_processes(run.folder)
        deadline = time.monotonic() + 10
        while not (grandchildren := [p for p in holding(run.folder) if p.ppid() == cell.pid]):
            assert time.monotonic() < deadline, "the cell started no grandchild"
            time.sleep(0.05)
        run.seen += grandchildren
    run.process.kill()
    run.process.communicate(timeout=10)
    assert gone_within(run, 10) == [], f"the {fault} cell outlived its parent"
    kept = run.records()  # intact: every line parses
    assert [(r["policy"], r["status"]) for r in kept] == [("float32", "ok")]
    assert run.temp_files() == []
