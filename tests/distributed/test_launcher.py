"""The torchrun launcher's pure parts: its command line, torchrun's failure report, and the
cell's outcome from the ranks' final events (docs/distributed.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import cell_spec

from mpbench.backends.base import CellSpec
from mpbench.runner.launchers.cell_timeout import CELL_TIMEOUT_ENV
from mpbench.runner.launchers.torchrun import (
    RDZV_TIMEOUT_ENV,
    RankFailure,
    job_outcome,
    other_failures,
    rank_spec,
    rendezvous_timeout,
    root_cause,
    torchrun_command,
)

# torchrun 2.13's report after `kill -9` of rank 1 of 2 (captured on this machine: rank 0
# was then ended by torchrun with SIGTERM).
REPORT = (Path(__file__).parents[1] / "fixtures" / "torchrun_root_cause.txt").read_text()


def spec(**changes) -> CellSpec:
    """A 2-rank torch cell; its id names the rendezvous (torchrun_command)."""
    values = dict(
        cell_id="torch/mnist_dense/float32@np2/r0",
        max_steps=10,
        nproc=2,
        intra_op_threads=2,
        inter_op_threads=2,
    )
    return cell_spec(**{**values, **changes})


def test_the_root_cause_is_the_killed_rank_not_the_one_torchrun_ended():
    failure = root_cause(REPORT)
    assert failure == RankFailure(rank=1, exitcode=-9, pid=1956)
    assert failure.describe() == "rank 1 (pid 1956) was killed by SIGKILL"


# torchrun 2.13's report after `kill -9` of rank 1 where the agent looked only after rank 0
# had failed on its own at losing its peer (captured here with PET_MONITOR_INTERVAL=5): both
# seen in the same second, the lowest rank is named the root cause.
LATE_REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
mpbench.runner.launchers.rank FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-23_18:12:08
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 31035)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 31035
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_18:12:08
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 31034)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""
PEER_RESET = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:4318: Connection reset by peer. This is typically caused by a remote worker "
    "hanging or bugs in the application."
)


def test_the_other_failures_of_the_report():
    assert root_cause(LATE_REPORT) == RankFailure(rank=0, exitcode=1, pid=31034)
    assert other_failures(LATE_REPORT) == [RankFailure(rank=1, exitcode=-9, pid=31035)]
    assert other_failures(REPORT) == [RankFailure(rank=0, exitcode=-15, pid=1955)]
    assert other_failures("no report") == []


def test_a_rank_that_only_lost_its_peer_is_not_blamed_for_the_peer_killed():
    final = {0: {"event": "failed", "status": "error", "reason": PEER_RESET}}
    _, payload = job_outcome(final, LATE_REPORT, 1, spec())
    assert payload == {
        "status": "error",
        "reason": "rank 1 (pid 31035) was killed by SIGKILL; torchrun ended the job's other ranks",
    }
    # A failure of its own stays the root cause, and so does one no other rank's death explains.
    own = {0: {"event": "failed", "status": "error", "reason": "ValueError: bad"}}
    assert job_outcome(own, LATE_REPORT, 1, spec())[1]["reason"] == "rank 0: ValueError: bad"
    ended = LATE_REPORT.replace("-9 (pid: 31035)  (SIGKILL)", "-15 (pid: 31035)  (SIGTERM)")
    assert job_outcome(final, ended, 1, spec())[1]["reason"] == f"rank 0: {PEER_RESET}"


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


def test_on_a_node_without_rank_zero_its_first_rank_has_the_result():
    # Global ranks 2 and 3 on the second node: rank 2 (LOCAL_RANK 0) relays the job's figures.
    final = {2: {"event": "done", "measurements": {"x": 1}}}
    assert job_outcome(final, "", 0, spec(nnodes=2, rdzv_endpoint="h:1")) == (
        "done",
        {"measurements": {"x": 1}},
    )


def test_torchrun_without_a_report_gives_its_last_line():
    _, payload = job_outcome({}, "starting\nerror: bad rendezvous\n", 1, spec())
    assert payload["reason"] == (
        "torchrun exited with code 1 without a result: error: bad rendezvous"
    )


def test_the_killed_torchrun_agent_is_named_not_its_output():
    # Its ranks' lines run together in the output it leaves: nothing to quote from it.
    output = "mpbench: rank 0 of 2 trainingmpbench: rank 1 of 2 training\n"
    _, payload = job_outcome({}, output, -9, spec(), agent_pid=4242)
    assert payload == {
        "status": "error",
        "reason": "the torchrun agent (pid 4242) was killed by SIGKILL; its ranks died with it",
    }
    _, payload = job_outcome({}, output, -9, spec(), oom_killed=True, agent_pid=4242)
    assert (
        payload["status"] == "oom" and "SIGKILL from the out-of-memory killer" in payload["reason"]
    )
    _, payload = job_outcome({}, output, -15, spec(), oom_killed=True, agent_pid=4242)
    assert payload["status"] == "error" and "was killed by SIGTERM;" in payload["reason"]


# torchrun 2.13's last line where the rendezvous never completed (captured on this machine):
# node 0 of a static rendezvous, a static node other than 0, a c10d rendezvous.
STORE_WAIT = (
    "torch.distributed.DistStoreError: Timed out after 6 seconds waiting for clients. "
    "1/2 clients joined.\n"
)
CLIENT_WAIT = (
    "torch.distributed.DistNetworkError: The client socket has timed out after 5000ms while "
    "trying to connect to (127.0.0.1, 29500).\n"
)
JOIN_TIMEOUT = "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"


@pytest.mark.parametrize(
    ("output", "changes", "reason"),
    [
        (STORE_WAIT, {"node_rank": 0}, "for 1 more node (1 of 2 joined)"),
        (
            STORE_WAIT.replace("1/2", "1/4"),
            {"node_rank": 0, "nnodes": 4},
            "for 3 more nodes (1 of 4 joined)",
        ),
        (CLIENT_WAIT, {"node_rank": 1}, "for node 0, which holds it: nothing answered there"),
        (JOIN_TIMEOUT, {}, "for the other nodes (fewer than 2 of 2 joined)"),
    ],
)
def test_a_node_left_at_the_rendezvous_says_what_it_waited_for(output, changes, reason):
    node = spec(**{"nnodes": 2, "rdzv_endpoint": "head:29500", **changes})
    _, payload = job_outcome({}, output, 1, node, rdzv_timeout=5)
    assert payload == {
        "status": "timeout",
        "reason": f"waited 5 s at rendezvous head:29500 {reason}",
    }
    # Without a timeout of mpbench's, torchrun's own (600 s) was the wait.
    assert job_outcome({}, output, 1, node)[1]["reason"].startswith("waited 600 s at")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, None),
        ({CELL_TIMEOUT_ENV: "900"}, 840),  # torchrun gives up a minute before the cell
        ({CELL_TIMEOUT_ENV: "40"}, 30),
        ({CELL_TIMEOUT_ENV: "12"}, 6),  # short: half of it
        ({CELL_TIMEOUT_ENV: "900", RDZV_TIMEOUT_ENV: "5"}, 5),
        ({CELL_TIMEOUT_ENV: "40", RDZV_TIMEOUT_ENV: "600"}, 30),  # never past the cell's
        ({RDZV_TIMEOUT_ENV: "2.5"}, 2),
    ],
)
def test_the_rendezvous_timeout_comes_before_the_cell_timeout(environ, expected):
    assert rendezvous_timeout(environ) == expected


@pytest.mark.parametrize("value", ["0", "-3", "soon"])
def test_a_bad_rendezvous_timeout_is_refused_with_one_line(value):
    with pytest.raises(ValueError, match=f"{RDZV_TIMEOUT_ENV}='{value}': must be a number"):
        rendezvous_timeout({RDZV_TIMEOUT_ENV: value})


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"nnodes": 2, "node_rank": 0, "rdzv_endpoint": "head:29500"}, "--rdzv-conf=timeout=5"),
        ({"nnodes": 2, "rdzv_endpoint": "head:29500"}, "--rdzv-conf=join_timeout=5"),
    ],
)
def test_the_rendezvous_timeout_reaches_torchrun(changes, flag):
    assert flag in torchrun_command(spec(**changes), rdzv_timeout=5)
    assert not any(a.startswith("--rdzv-conf") for a in torchrun_command(spec(**changes)))


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
