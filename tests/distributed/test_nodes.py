"""Several nodes on this one machine: `mpbench run --nnodes 2` processes that meet at a
rendezvous on loopback (a static rendezvous: --node-rank), each as a node of its own would
run it. A node left alone at the rendezvous, and a two-node job that trains."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from frameworks import needs_torch
from processes import finished, marked, selected_tests, stop

pytestmark = needs_torch  # its cells import torch, in their own processes

CONFIG = """
[run]
data = "synthetic"
warmup_steps = 2
timeout = 120

[workloads.mnist_dense]
batch_size = 32
epochs = 1
max_steps = 6
units = 16
synthetic_train_size = 512
synthetic_test_size = 128
"""

CELL = "torch/mnist_dense/float32@nodes2/r0"


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports (every probe held open until all are found)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]


def node_command(tmp_path: Path, node_rank: int | None, port: int, *extra: str) -> list[str]:
    """One node's `mpbench run`; node_rank None: a c10d rendezvous numbers the nodes."""
    config = tmp_path / "nodes.toml"
    config.write_text(CONFIG)
    rank = [] if node_rank is None else ["--node-rank", str(node_rank)]
    return [
        sys.executable, "-m", "mpbench", "run", "--config", str(config),
        "--framework", "torch", "--device", "cpu", "-w", "mnist_dense", "-p", "fp32",
        "--nnodes", "2", *rank, "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--out", str(tmp_path / f"node{node_rank}"), *extra,
    ]  # fmt: skip


def record(out: Path) -> dict:
    (line,) = (out / "results.jsonl").read_text().splitlines()
    return json.loads(line)


# Every test's nodes start at once, when the module's first test asks for them: the lonely
# nodes mostly wait out their rendezvous timeout, which then overlaps the two-node job's
# training instead of following it. Each test waits for its own processes and asserts on
# them alone (their ports, output folders and process marks are their own).
LONELY = [
    (0, "for 1 more node (1 of 2 joined)", "1/2 clients joined"),  # it holds the store
    (1, "for node 0, which holds it: nothing answered there", "client socket has timed out"),
    (None, "for the other nodes (fewer than 2 of 2 joined)", "RendezvousTimeoutError"),
]


@dataclass
class Started:
    """A test's node processes, started; `tmp` is its folder (and its processes' mark)."""

    tmp: Path
    port: int
    processes: list[subprocess.Popen]

    def outputs(self, timeout: float) -> list[tuple[int, str, str]]:
        """Each process's exit code, stdout and stderr, once it ended (killed past
        `timeout`, as subprocess.run's timeout does)."""
        done = [finished(process, timeout) for process in self.processes]
        return [(run.returncode, run.stdout, run.stderr) for run in done]


def selected(request: pytest.FixtureRequest) -> set:
    """The runs of this module's tests that this session runs (not deselected): a lonely
    node's rank, or "pair"."""
    wanted = set()
    for item in selected_tests(request):
        name = getattr(item, "originalname", None)
        if name == "test_a_node_alone_at_the_rendezvous_says_what_it_waited_for":
            wanted.add(item.callspec.params["node_rank"])
        elif name == "test_two_nodes_on_loopback_train_one_job_and_record_the_same_figures":
            wanted.add("pair")
    return wanted


@pytest.fixture(scope="module")
def started(request, tmp_path_factory) -> Iterator[dict[object, Started]]:
    """The three lonely nodes (by node rank) and the two-node job ("pair"), all started (those
    whose tests this session runs)."""
    wanted = selected(request)
    ports = free_ports(len(LONELY) + 1)
    runs: dict[object, Started] = {}
    try:
        for (node_rank, _, _), port in zip(LONELY, ports, strict=False):
            if node_rank not in wanted:
                continue
            tmp = tmp_path_factory.mktemp(f"lonely{node_rank}")
            env = {**os.environ, "MPBENCH_RDZV_TIMEOUT_S": "5", "MPBENCH_MARK": str(tmp)}
            command = node_command(tmp, node_rank, port, "--timeout", "60")
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
            runs[node_rank] = Started(tmp, port, [process])
        if "pair" in wanted:
            tmp = tmp_path_factory.mktemp("pair")
            env = {**os.environ, "MPBENCH_MARK": str(tmp)}
            nodes = [
                subprocess.Popen(
                    node_command(tmp, rank, ports[-1]),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=env,
                )
                for rank in (0, 1)
            ]
            runs["pair"] = Started(tmp, ports[-1], nodes)
        yield runs
    finally:
        stop(process for run in runs.values() for process in run.processes)


@pytest.mark.slow  # no training, but the wait and two processes' start: 10-20 s here
@pytest.mark.parametrize(("node_rank", "waited_for", "torchrun_said"), LONELY)
def test_a_node_alone_at_the_rendezvous_says_what_it_waited_for(
    started, node_rank, waited_for, torchrun_said
):
    run = started[node_rank]
    tmp_path, port, mark = run.tmp, run.port, str(run.tmp)
    ((returncode, stdout, stderr),) = run.outputs(timeout=90)
    assert returncode == 1, stdout + stderr
    out = tmp_path / f"node{node_rank}"
    found = record(out)
    assert found["status"] == "timeout"
    assert found["reason"] == f"waited 5 s at rendezvous 127.0.0.1:{port} {waited_for}"
    assert found["wall_s"] < 50  # torchrun gave up, not the cell's 60 s timeout
    log = (out / "logs" / "torch__mnist_dense__float32@nodes2__r0.log").read_text()
    assert torchrun_said in log  # torchrun's own words are in the cell's log
    assert not marked(mark)


@pytest.mark.slow
def test_two_nodes_on_loopback_train_one_job_and_record_the_same_figures(started):
    run = started["pair"]
    tmp_path, mark = run.tmp, str(run.tmp)
    outputs = run.outputs(timeout=240)
    for returncode, output, _ in outputs:
        assert returncode == 0, output
    first, second = (record(tmp_path / f"node{rank}") for rank in (0, 1))
    assert first["status"] == second["status"] == "ok", (first["reason"], second["reason"])
    assert first["cell_id"] == second["cell_id"] == CELL
    assert first["config"] == second["config"]
    assert (first["config"]["world_size"], first["config"]["nnodes"]) == (2, 2)
    dist = first["distributed"]
    assert (dist["world_size"], dist["nodes"], dist["nproc_per_node"]) == (2, 2, 1)
    assert len(dist["rank_step_median_s"]) == 2  # a rank on each node, in one job
    # One job: every node records its figures (rank 0's), the same to the last digit.
    for key in ("accuracy", "step_time", "throughput_samples_per_s", "distributed"):
        assert first[key] == second[key], key
    assert first["accuracy"]["train_loss_per_epoch"] and first["accuracy"]["test_accuracy"] >= 0
    # The loss trajectory, step by step (the telemetry side file; its device part and run id
    # are each node's own).
    losses = [
        json.loads((tmp_path / f"node{rank}" / found["telemetry"]["side_file"]).read_text())
        for rank, found in enumerate((first, second))
    ]
    assert losses[0]["numerics"] == losses[1]["numerics"]
    assert len(losses[0]["numerics"]["columns"]["loss"]) == 6
    assert not marked(mark)
