"""`mpbench run --on slurm` through submitit: against a real one-node Slurm started here
(tests/fleet/slurm_local.py: munged, slurmctld, slurmd) where its packages are installed and
we are root, as in CI; through submitit's local executor (its jobs as local processes) where
this machine has no Slurm at all."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import slurm_local
from builders import run_options
from cli import run_mpbench
from frameworks import installed, needs_torch

pytestmark = [
    needs_torch,
    pytest.mark.skipif(not installed("submitit"), reason="submitit is not installed"),
]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    why = slurm_local.available()
    if why is not None:
        pytest.skip(f"no real Slurm here: {why}")
    started = slurm_local.start(tmp_path_factory.mktemp("slurm"))
    yield started
    started.stop()


def fleet_run(tmp_path, *args, env=None):
    # The policy is named: `auto` depends on the CPU kind (float32 alone without bf16
    # instructions, float32 and bf16 on an AMX Xeon), and these tests count one record.
    return run_mpbench(
        "run", *run_options(), "-f", "torch", "-p", "float32", "--on", "slurm", *args,
        cwd=tmp_path, env=env,
        fork=False, timeout=300,
    )  # fmt: skip


def records(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").open()]


def test_a_real_slurm_runs_each_partition_s_job_into_the_shared_folder(slurm, tmp_path):
    # Both partitions are this one node, unnamed (no MPBENCH_MACHINE): each partition names
    # its machine, so the two are two columns, in the closing table and in history.
    out, store = tmp_path / "fleet", tmp_path / "store.sqlite"
    done = fleet_run(
        tmp_path, "--fleet", "gpu-a,gpu-b", "--out", out, "--store", store, env=slurm.env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    machines = json.loads((out / "fleet.json").read_text())["machines"]
    assert {m["kind"]: m["status"] for m in machines} == {"gpu-a": "done", "gpu-b": "done"}
    for kind in ("gpu-a", "gpu-b"):
        assert [(r["status"], r["config"]["machine"]) for r in records(out / kind)] == [
            ("ok", kind)
        ]
        assert (out / kind / "environment.json").is_file()  # written on the node, at its start
        assert f"{kind}: added in" in done.stdout
    scripts = {p.read_text() for p in (out / ".submitit").glob("*/*_submission.sh")}
    assert {"gpu-a", "gpu-b"} == {  # what sbatch was given
        kind for kind in ("gpu-a", "gpu-b") for text in scripts if f"--partition={kind}\n" in text
    }
    assert all(p.parent.name.isdigit() for p in (out / ".submitit").glob("*/*.sh"))  # Slurm's
    assert "mpbench fleet · 2 machines" in done.stdout
    for paths in ([out / "gpu-a", out / "gpu-b"], [store]):
        view = run_mpbench("history", "--by", "device", "--format", "json", *paths)
        assert view.returncode == 0, view.stderr
        (table,) = json.loads(view.stdout)["workloads"]
        labels = sorted(m["label"].rsplit(" ", 1)[-1] for m in table["machines"])
        assert labels == ["[gpu-a]", "[gpu-b]"], labels


def test_ctrl_c_leaves_the_unfinished_machine_interrupted_with_what_it_wrote(slurm, tmp_path):
    # The job's bf16 cell hangs (MPBENCH_FAULT reaches the job: sbatch exports the
    # environment); Ctrl-C once its float32 is in the shared folder.
    out = tmp_path / "fleet"
    driver = subprocess.Popen(
        [sys.executable, "-m", "mpbench", "run", *run_options(), "-f", "torch", "-p", "float32",
         "-p", "mixed_bfloat16", "--timeout", "300", "--on", "slurm", "--fleet", "gpu-a",
         "--out", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, **slurm.env, "MPBENCH_FAULT": "hang@bfloat16"},
    )  # fmt: skip
    try:
        end = time.monotonic() + 240
        while not _records_in(out / "gpu-a") and time.monotonic() < end:
            time.sleep(0.25)
        time.sleep(1)
        driver.send_signal(signal.SIGINT)
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 130, stdout[-2000:] + stderr[-2000:]
    (machine,) = json.loads((out / "fleet.json").read_text())["machines"]
    assert machine["status"] == "interrupted", machine
    assert "gpu-a: interrupted" in stdout and "failed" not in stdout
    assert machine["nodes"] and machine["nodes"][0].startswith("job ")  # seen running
    assert [r["policy"] for r in records(out / "gpu-a")] == ["float32"]  # what it wrote


def _records_in(run_dir) -> int:
    path = run_dir / "results.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_gpu_asked_of_a_partition_without_one_is_said_at_once(slurm, tmp_path):
    # Cells on the device `auto` picks ask each job for a GPU; sinfo lists none here.
    options = [a for a in run_options() if a not in ("--device", "cpu")]
    out = tmp_path / "fleet"
    done = run_mpbench(
        "run", *options, "-f", "torch", "-p", "float32", "--on", "slurm", "--fleet", "gpu-b",
        "--out", out, cwd=tmp_path, env=slurm.env, fork=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    said = (
        "gpu-b: no node: no node of kind gpu-b has a GPU (sinfo lists no gpu among its nodes' "
        "generic resources); pass --device cpu to run its cells on their CPUs"
    )
    assert [line for line in done.stdout.splitlines() if "gpu-b:" in line] == [said]
    assert not (out / ".submitit").exists()  # no job was submitted


def test_a_partition_slurm_lacks_is_one_line_naming_those_it_has(slurm, tmp_path):
    done = fleet_run(tmp_path, "--fleet", "gpu-a,gpu-z", env=slurm.env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "mpbench: error: --fleet: the cluster has no node of kind gpu-z; it has: "
        "gpu-a (1 node), gpu-b (1 node)"
    )


@pytest.mark.skipif(shutil.which("sinfo") is None, reason="sinfo is not installed")
def test_a_slurm_whose_controller_does_not_answer_is_one_line(tmp_path):
    conf = tmp_path / "slurm.conf"  # a controller on a port nothing listens on
    conf.write_text(
        f"ClusterName=down\nSlurmctldHost=localhost\nSlurmctldPort={slurm_local.free_port()}\n"
        "NodeName=localhost CPUs=1\nPartitionName=gpu-a Nodes=localhost\n"
    )
    done = fleet_run(tmp_path, "--fleet", "gpu-a", env={"SLURM_CONF": str(conf)})
    assert done.returncode == 2
    assert done.stderr == (
        "mpbench: error: --on slurm: sinfo failed (slurm_load_partitions: Unable to contact "
        "slurm controller (connect failure)): is slurmctld up?\n"
    )


@pytest.mark.skipif(shutil.which("sinfo") is not None, reason="Slurm is installed here")
def test_without_slurm_submitit_runs_each_job_here(tmp_path):
    out, store = tmp_path / "fleet", tmp_path / "store.sqlite"
    done = fleet_run(tmp_path, "--fleet", "gpu-a", "--out", out, "--store", store)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "no Slurm on this machine (sinfo not found)" in done.stderr
    (machine,) = json.loads((out / "fleet.json").read_text())["machines"]
    assert machine["kind"] == "gpu-a" and machine["status"] == "done"
    assert [r["status"] for r in records(out / "gpu-a")] == ["ok"]
    assert list((out / ".submitit").glob("*/*_submitted.pkl"))  # submitit's own job folder
    assert "gpu-a: added in" in done.stdout
