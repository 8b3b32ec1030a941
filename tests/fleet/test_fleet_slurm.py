"""`mpbench run --on slurm` through submitit: against a real one-node Slurm started here
(tests/fleet/slurm_local.py: munged, slurmctld, slurmd) where its packages are installed and
we are root, as in CI; through submitit's local executor (its jobs as local processes) where
this machine has no Slurm at all."""

from __future__ import annotations

import json
import shutil

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


def test_a_real_slurm_runs_the_partition_s_job_into_the_shared_folder(slurm, tmp_path):
    out, store = tmp_path / "fleet", tmp_path / "store.sqlite"
    done = fleet_run(tmp_path, "--fleet", "gpu-b", "--out", out, "--store", store, env=slurm.env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (machine,) = json.loads((out / "fleet.json").read_text())["machines"]
    assert machine["kind"] == "gpu-b" and machine["status"] == "done"
    assert [r["status"] for r in records(out / "gpu-b")] == ["ok"]
    assert (out / "gpu-b" / "environment.json").is_file()  # written on the node, at its start
    (script,) = (out / ".submitit").glob("*/*_submission.sh")  # what sbatch was given
    assert "#SBATCH --partition=gpu-b" in script.read_text()
    assert script.parent.name.isdigit()  # a Slurm job id, not a local process's
    assert "gpu-b: added in" in done.stdout


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
