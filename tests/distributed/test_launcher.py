"""The torchrun launcher's pure parts: its command line, torchrun's failure report, and the
cell's outcome from the ranks' final events (docs/distributed.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpbench.backends.base import CellSpec
from mpbench.runner.launchers.torchrun import (
    RankFailure,
    job_outcome,
    rank_spec,
    root_cause,
    torchrun_command,
)

# torchrun 2.13's report after `kill -9` of rank 1 of 2 (captured on this machine: rank 0
# was then ended by torchrun with SIGTERM).
REPORT = (Path(__file__).parents[1] / "fixtures" / "torchrun_root_cause.txt").read_text()


def spec(**changes) -> CellSpec:
    values = dict(
        run_id="r",
        cell_id="torch/mnist_dense/float32@np2/r0",
        framework="torch",
        workload="mnist_dense",
        policy="float32",
        repeat=0,
        device="cpu",
        batch_size=64,
        epochs=1,
        max_steps=10,
        warmup_steps=2,
        units=32,
        seed=0,
        nproc=2,
        intra_op_threads=2,
        inter_op_threads=2,
    )
    values.update(changes)
    return CellSpec(**values)


def test_the_root_cause_is_the_killed_rank_not_the_one_torchrun_ended():
    failure = root_cause(REPORT)
    assert failure == RankFailure(rank=1, exitcode=-9, pid=1956)
    assert failure.describe() == "rank 1 (pid 1956) was killed by SIGKILL"


def test_no_report_no_root_cause():
    assert root_cause("Traceback (most recent call last):\n  ValueError: x") is None
    assert RankFailure(0, 3).describe() == "rank 0 exited with code 3"


def test_rank_zero_done_is_the_result():
    final = {0: {"event": "done", "measurements": {"x": 1}}}
    assert job_outcome(final, "", 0, spec()) == ("done", {"measurements": {"x": 1}})


def test_a_killed_rank_is_named_and_its_signal_given():
    name, payload = job_outcome({}, REPORT, 1, spec())
    assert name == "failed" and payload["status"] == "error"
    assert payload["reason"] == (
        "rank 1 (pid 1956) was killed by SIGKILL; torchrun ended the job's other ranks"
    )


def test_the_failing_rank_own_event_wins_and_is_prefixed_with_its_rank():
    final = {
        1: {"event": "failed", "status": "error", "reason": "ValueError: bad"},
        0: {"event": "failed", "status": "error", "reason": "RuntimeError: peer gone"},
    }
    assert job_outcome(final, REPORT, 1, spec())[0] == "failed"
    payload = job_outcome(final, REPORT, 1, spec())[1]
    assert payload == {"status": "error", "reason": "rank 1: ValueError: bad"}
    # A shared outcome that is not an error (a skip, a divergence) keeps its own words.
    final = {0: {"event": "failed", "status": "skipped", "reason": "no gloo"}}
    assert job_outcome(final, "", 1, spec())[1] == {"status": "skipped", "reason": "no gloo"}


def test_a_node_without_rank_zero_says_where_the_record_is():
    _, payload = job_outcome({}, "", 0, spec(nnodes=2, rdzv_endpoint="h:1"))
    assert payload["status"] == "skipped" and "global rank 0" in payload["reason"]


def test_torchrun_without_a_report_gives_its_last_line():
    _, payload = job_outcome({}, "starting\nerror: bad rendezvous\n", 1, spec())
    assert payload["reason"] == (
        "torchrun exited with code 1 without a result: error: bad rendezvous"
    )


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, ["--standalone", "--nproc-per-node=2", "--max-restarts=0"]),
        (
            {"nnodes": 2, "node_rank": 1, "rdzv_endpoint": "head:29500"},
            ["--nnodes=2", "--node-rank=1", "--master-addr=head", "--master-port=29500"],
        ),
        (
            {"nnodes": 2, "rdzv_endpoint": "head:29500"},
            [
                "--nnodes=2",
                "--rdzv-backend=c10d",
                "--rdzv-endpoint=head:29500",
                "--rdzv-id=mpbench-torch-mnist-dense-float32-np2-r0",
            ],
        ),
    ],
)
def test_the_torchrun_command(changes, expected):
    command = torchrun_command(spec(**changes))
    assert command[1:3] == ["-m", "torch.distributed.run"]
    assert command[-2:] == ["-m", "mpbench.runner.launchers.rank"]
    for flag in expected:
        assert flag in command


def test_ranks_on_a_cpu_share_its_threads():
    assert rank_spec(spec()).intra_op_threads == 1
    assert rank_spec(spec(nproc=4, intra_op_threads=16)).inter_op_threads == 4
    assert rank_spec(spec(device="cuda:0")).intra_op_threads == 2


def test_a_sigkill_is_oom_only_with_the_cgroup_evidence():
    _, payload = job_outcome({}, REPORT, 1, spec(), oom_killed=True)
    assert payload == {
        "status": "oom",
        "reason": "rank 1 (pid 1956) was killed by SIGKILL from the out-of-memory killer; "
        "torchrun ended the job's other ranks",
    }
    assert job_outcome({}, REPORT, 1, spec(), oom_killed=False)[1]["status"] == "error"
