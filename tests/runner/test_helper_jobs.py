"""A run's jobs before its first cell (a user workload's probe and its data check,
runner/launchers/helper.py): forked from the warm server of the framework they import where
the run has warm servers, a new interpreter where it has none, with the same answers.

The workload module below writes a line each time it is imported: which process imported it
(its parent's name) and whether torch was imported before it. That is what tells a fork of
the warm torch server (parent `mpbench-forksrv`, torch already there) from a new interpreter
(parent this test, torch not yet imported)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import psutil
import pytest
from cli import run_mpbench
from frameworks import needs_torch

from mpbench.runner.launchers.helper import run_main
from mpbench.runner.launchers.process_names import CELL_NAME, SERVER_NAME
from mpbench.runner.launchers.warm import WARM_ENV
from mpbench.runner.user_check import CHECK_MAIN
from mpbench.workloads.user import PROBE_MAIN, run_in_new_interpreter

pytestmark = needs_torch

MODULE = """
import json, os, sys, time
from pathlib import Path

import numpy as np

from mpbench.workloads import UserWorkload

with open(Path(__file__).with_name("imports.jsonl"), "a") as log:
    log.write(json.dumps({
        "pid": os.getpid(),
        "parent": Path(f"/proc/{os.getppid()}/comm").read_text().strip(),
        "name": Path("/proc/self/comm").read_text().strip(),
        "torch_before": "torch" in sys.modules,
        "cwd": os.getcwd(),
    }) + "\\n")
if os.path.exists(Path(__file__).with_name("hang")):
    time.sleep(600)


def data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((80, 8)).astype(np.float64)
    y = (x[:, 0] > 0).astype(np.int64)
    return x[:64], y[:64], x[64:], y[64:]


def model(device):
    import torch
    from torch import nn

    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    return net, torch.optim.SGD(net.parameters(), lr=0.1), nn.functional.cross_entropy


TINY = UserWorkload(name="tiny", data=data, torch=model, batch_size=8, epochs=1)
"""
NAME = "helper_jobs_model:TINY"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the jobs run in (the user's module beside them), shared by the module's
    tests so that one warm torch server serves them all (a warm server is per folder)."""
    folder = tmp_path_factory.mktemp("jobs")
    (folder / "helper_jobs_model.py").write_text(MODULE)
    return folder


@pytest.fixture
def here(workdir: Path, monkeypatch) -> Path:
    monkeypatch.chdir(workdir)
    (workdir / "imports.jsonl").unlink(missing_ok=True)
    (workdir / "hang").unlink(missing_ok=True)
    return workdir


def imports(folder: Path) -> list[dict]:
    path = folder / "imports.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    ("target", "argv"),
    [(PROBE_MAIN, [NAME]), (CHECK_MAIN, [NAME, "3", "torch"])],
    ids=["probe", "check"],
)
def test_a_job_forked_from_the_warm_server_answers_as_a_new_interpreter(here, target, argv):
    assert os.environ.get(WARM_ENV), "the suite runs with warm servers (conftest.py)"
    forked = run_main(target, argv, 120, "torch")
    (line,) = imports(here)
    assert line["parent"] == SERVER_NAME and line["torch_before"], line
    assert line["cwd"] == str(here)
    (here / "imports.jsonl").unlink()
    new = run_in_new_interpreter(target, argv, 120)
    (line,) = imports(here)
    assert line["parent"] != SERVER_NAME and not line["torch_before"], line
    assert (forked.returncode, forked.stdout) == (new.returncode, new.stdout) == (0, new.stdout)
    assert json.loads(forked.stdout.splitlines()[-1])  # the answer itself, one JSON line


def test_a_refused_workload_is_the_same_one_line_either_way(here):
    argv = ["helper_jobs_model:MISSING"]
    forked = run_main(PROBE_MAIN, argv, 120, "torch")
    new = run_in_new_interpreter(PROBE_MAIN, argv, 120)
    assert forked.returncode == new.returncode == 2
    assert forked.stdout == new.stdout and "MISSING" in forked.stdout


def test_without_warm_servers_the_job_is_a_new_interpreter(here, monkeypatch):
    monkeypatch.delenv(WARM_ENV)
    done = run_main(PROBE_MAIN, [NAME], 120, "torch")
    assert done.returncode == 0, done.stderr
    (line,) = imports(here)
    assert line["parent"] != SERVER_NAME and not line["torch_before"], line


def test_where_no_warm_server_can_answer_the_job_is_a_new_interpreter(here, monkeypatch):
    """A folder too deep for a socket: no warm server, and no server of the job's own
    either (it would import torch only to fork one job)."""
    monkeypatch.setenv(WARM_ENV, str(here / ("d" * 60) / ("e" * 60)))
    done = run_main(PROBE_MAIN, [NAME], 120, "torch")
    assert done.returncode == 0, done.stderr
    (line,) = imports(here)
    assert line["parent"] != SERVER_NAME and not line["torch_before"], line  # no server's


def test_a_forked_job_past_its_timeout_is_killed_and_raises_as_subprocess_run_does(here):
    (here / "hang").touch()
    with pytest.raises(subprocess.TimeoutExpired):
        run_main(PROBE_MAIN, [NAME], 3, "torch")
    (line,) = imports(here)
    assert line["parent"] == SERVER_NAME  # it was the fork that hung
    assert not psutil.pid_exists(line["pid"]) or psutil.Process(line["pid"]).status() == "zombie"


def test_a_run_of_a_user_workload_imports_it_only_in_forks_of_the_warm_server(here):
    """The probe, the data check and the cells: each a fork of the warm torch server, none
    a new interpreter that imports torch again."""
    done = run_mpbench(
        "run", "-w", NAME, "-f", "torch", "-p", "float32", "--repeat", "1", "--max-steps", "4",
        "--warmup-steps", "1", "--threads", "1", "--out", here / "out", cwd=here,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = imports(here)
    assert len(lines) == 3, lines  # the probe, the check, the one cell
    assert all(line["parent"] == SERVER_NAME and line["torch_before"] for line in lines), lines
    assert [line["name"] for line in lines][-1] == CELL_NAME
