"""`mpbench run --on ray` on a real local multi-node Ray cluster (tests/fleet/ray_cluster.py):
a head without CPUs and one-CPU worker nodes whose `accelerator_type:` resources stand in for
GPU kinds, their cells on this CPU, none of them named (MPBENCH_MACHINE). Two nodes of kind A
(one can be lost), one of B, one of H whose cells hang at bf16 (MPBENCH_FAULT in its
environment), for Ctrl-C, and the head as kind NOCPU, which has no CPU for a run. The head also
serves Ray client. The cluster is shared by the module; the tests that kill a node come last,
in this order. The module runs on every core (under xdist too): the fleet's threads are held
to a hand run's, which a single core would make equal whatever the fleet did."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from builders import run_options
from cli import run_mpbench
from frameworks import installed, needs_torch

pytestmark = [
    needs_torch,
    pytest.mark.skipif(not installed("ray"), reason="Ray is not installed (mpbench[ray])"),
    pytest.mark.all_cores,
]

HERE = Path(__file__).resolve().parent
# Everything on the loopback: Ray binds the address it finds for this host unless told this
# is a one-machine cluster; and no usage report is ever sent. gRPC's fork handlers off: the
# head's client server forks a process per client while its gRPC threads run, and with
# them that process died as it started ("epoll_wait error: Bad file descriptor",
# ray-project/ray#63202) in two clean-clone CI runs in a row (mpbench's connection then
# tries again: test_fleet_options.py).
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "GRPC_ENABLE_FORK_SUPPORT": "false",
}
NODES = ["--head-kind", "NOCPU", "A", "A", "B", "H:MPBENCH_FAULT=hang@bfloat16"]
TWO_POLICIES = ["-f", "torch", "-p", "float32", "-p", "mixed_bfloat16"]
# Cells long enough that a node is lost while its run goes on: with 300 steps (1.8-1.9 ms a
# float32 step, 3.3 ms at bf16 emulated on a CPU without avx512_bf16), the three cells after
# the first record took 1.7-2.9 s each, 7.4 s together. 1,000 steps made the test 74 s.
# One thread, as each node has one CPU: with two (the cores the module runs on), a cell
# beside the other xdist worker's tests spins in OpenMP's barrier for a thread that has no
# core: the test took 89 s beside one busy core, 24 s alone (a 2-core AMX Xeon).
LONGER = ["--epochs", "80", "--max-steps", "300", "--threads", "1"]


@pytest.fixture(scope="module")
def cluster():
    process = subprocess.Popen(
        [sys.executable, str(HERE / "ray_cluster.py"), *NODES],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, **RAY_ENV}, start_new_session=True,
    )  # fmt: skip
    try:
        line = process.stdout.readline()
        assert line, "the Ray cluster did not start"
        yield json.loads(line)
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def fleet_env(cluster) -> dict[str, str]:
    return {**RAY_ENV, "RAY_ADDRESS": cluster["address"]}


def fleet(cluster, *args, tmp_path: Path, timeout: float = 300):
    return run_mpbench(
        "run", *run_options(), *args, "--on", "ray", env=fleet_env(cluster), cwd=tmp_path,
        fork=False, timeout=timeout,
    )  # fmt: skip


def ray_lines(output: str) -> list[str]:
    """Ray's own lines in mpbench's output: what it pushes to drivers (`(raylet) ...`, a
    dead raylet's `[state-dump]` log lines), its workers' logs (`(pid=...)`), its C++
    core's log lines (`[2026-... W 123 123] rpc_client.h:...`)."""
    marks = ("(raylet)", "[state-dump]", "(pid=", ".cc:", ".h:")
    return [line for line in output.splitlines() if any(mark in line for mark in marks)]


def start_fleet(cluster, *args, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mpbench", "run", *run_options(max_steps=None), *args,
         "--on", "ray"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, **fleet_env(cluster)},
    )  # fmt: skip


@contextlib.contextmanager
def driving(driver: subprocess.Popen):
    """A test of a running driver: killed at the end; where the test fails before the driver
    ended, its output goes into the failure."""
    try:
        yield driver
    except AssertionError as exc:
        driver.kill()
        stdout, stderr = driver.communicate()
        output = f"--- stdout:\n{stdout[-3000:]}--- stderr:\n{stderr[-3000:]}"
        raise AssertionError(f"{exc}\n{output}") from None
    finally:
        driver.kill()


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fleet_json(out: Path) -> dict:
    return {m["kind"]: m for m in json.loads((out / "fleet.json").read_text())["machines"]}


def wait_for(condition, timeout: float, what: str):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = condition()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def history(*paths) -> dict:
    done = run_mpbench("history", "--by", "device", "--format", "json", *paths)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_fleet_runs_each_kind_on_its_nodes_as_a_run_by_hand_there(cluster, tmp_path):
    # A and B: one hardware (this machine), nodes not named: the kinds name the machines.
    out, store = tmp_path / "fleet", tmp_path / "store.sqlite"
    done = fleet(cluster, "--fleet", "A,B", *TWO_POLICIES, "--out", out, "--store", store,
                 tmp_path=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "mpbench fleet · 2 machines" in done.stdout
    machines = fleet_json(out)
    assert {k: m["status"] for k, m in machines.items()} == {"A": "done", "B": "done"}
    # By hand: what the same run on each machine, named as the fleet names it, records.
    for kind in ("A", "B"):
        ours, theirs = records(out / kind), by_hand(kind, *run_options(), *TWO_POLICIES)
        assert [r["cell_id"] for r in ours] == theirs.cell_ids
        assert {r["hardware_fingerprint"] for r in ours} == {theirs.fingerprint}
        assert {r["config"]["machine"] for r in ours} == {kind}
        assert {r["status"] for r in ours} == {"ok"} and len(ours) >= 2
        # The threads a hand run there uses (the cores; Ray gives its workers 1), recorded.
        assert [r["threads"] for r in ours] == theirs.threads
    # One machine per kind, never pooled: a column each, the machine a hand run there is,
    # and each column's float32 is that machine's own.
    fleet_view = history(out / "A", out / "B")
    (table,) = fleet_view["workloads"]
    fingerprints = {m["fingerprint"]: m["label"] for m in table["machines"]}
    assert {fp[:12] for fp in fingerprints} == {by_hand(k).fingerprint[:12] for k in ("A", "B")}
    columns = _columns(fleet_view)
    assert len(columns) == 2 and all(c.endswith(("[A]", "[B]")) for c in columns)
    for kind in ("A", "B"):
        (float32,) = [r for r in records(out / kind) if r["policy"] == "float32"]
        shown = _float32_step(fleet_view, kind)
        assert shown == pytest.approx(float32["step_time"]["median_s"], rel=1e-6)
    # The store took each machine's run as it finished; adding them again doubles nothing.
    assert "A: added in" in done.stdout and "B: added in" in done.stdout
    again = run_mpbench("store", "add", out / "A", out / "B", "--store", store)
    assert again.returncode == 0 and again.stdout.endswith(": 2 unchanged\n"), again.stdout
    assert _columns(history(store)) == columns


@dataclass
class HandRun:
    """What `mpbench run` by hand on a node records of each record's identity."""

    cell_ids: list[str]
    fingerprint: str
    threads: list[dict]


def by_hand(kind: str, *args: str) -> HandRun:
    """`mpbench run ARGS` by hand on a node of `kind` here (its nodes are this machine,
    unnamed, so the kind names it: MPBENCH_MACHINE=KIND), planned in this process as the run
    plans itself before its first cell (the CLI as it parses a run, runner/loop.py's plan),
    not run: its cells in order, the machine's fingerprint, and the threads each cell's
    process is given (its thread pools, and OMP_NUM_THREADS as the cell's environment sets
    it)."""
    from mpbench.cli import main
    from mpbench.runner import loop
    from mpbench.runner.config import build_config
    from mpbench.runner.launchers.process import cell_environment

    planned = []

    def plan_only(options, summary) -> int:
        planned.append(loop._plan(build_config(options), "by-hand", lambda warning: None))
        return 0

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MPBENCH_MACHINE", kind)
        patch.setattr(loop, "run_matrix", plan_only)
        assert main(["run", *args]) == 0
    specs = [cell.spec for cell in planned[0].cells]
    threads = [
        {
            "intra_op": spec.intra_op_threads,
            "inter_op": spec.inter_op_threads,
            "omp_num_threads": cell_environment(spec)["OMP_NUM_THREADS"],
        }
        for spec in specs
    ]
    return HandRun([spec.cell_id for spec in specs], planned[0].fingerprint, threads)


def _columns(view) -> list[str]:
    (table,) = view["workloads"]
    return sorted(m["label"] for m in table["machines"])


def _float32_step(view, kind: str) -> float:
    (table,) = view["workloads"]
    labels = {m["fingerprint"]: m["label"] for m in table["machines"]}
    (row,) = [r for r in table["rows"] if r["policy"] == "float32"]
    (cell,) = [c for fp, c in row["cells"].items() if labels[fp].endswith(f"[{kind}]")]
    return cell["step_time_s"]["value"]


def test_a_kind_the_cluster_lacks_is_one_line_naming_those_it_has(cluster, tmp_path):
    done = fleet(cluster, "--fleet", "A,Z", tmp_path=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "mpbench: error: --fleet: the cluster has no node of kind Z; it has: A (2 nodes), "
        "B (1 node), H (1 node), NOCPU (1 node)"
    )
    assert not (tmp_path / "results").exists()


def test_a_gpu_asked_of_a_kind_without_one_is_said_at_once(cluster, tmp_path):
    # Cells on the device `auto` picks ask each node for a GPU, which no node here has: no
    # waiting for the --fleet-timeout (10 minutes by default), one line with the way out.
    options = [a for a in run_options() if a not in ("--device", "cpu")]
    done = run_mpbench(
        "run", *options, "--on", "ray", "--fleet", "B", "--out", tmp_path / "fleet",
        env=fleet_env(cluster), cwd=tmp_path, fork=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    said = (
        "B: no node: no node of kind B has a GPU (Ray lists no GPU on its 1 node); pass "
        "--device cpu to run its cells on their CPUs"
    )
    assert [line for line in done.stdout.splitlines() if "GPU" in line] == [said]
    assert fleet_json(tmp_path / "fleet")["B"]["status"] == "no node"
    assert not records(tmp_path / "fleet" / "B")


def test_a_machine_no_node_can_take_is_reported_after_the_fleet_timeout(cluster, tmp_path):
    # NOCPU's only node (the head) has no CPU for a run: nothing ever takes the machine.
    started = time.monotonic()
    done = fleet(cluster, "--fleet", "NOCPU", "--fleet-timeout", "4s",
                 "--out", tmp_path / "fleet", tmp_path=tmp_path)  # fmt: skip
    assert time.monotonic() - started < 90
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "NOCPU: no node: no node of kind NOCPU took it within --fleet-timeout (4 s)" in done.stdout
    )
    assert fleet_json(tmp_path / "fleet")["NOCPU"]["status"] == "no node"


def test_the_fleet_runs_through_ray_client(cluster, tmp_path):
    # `--on ray://HOST:PORT`: the driver is a Ray client of the head, nothing of Ray here.
    out = tmp_path / "fleet"
    done = run_mpbench(
        "run", *run_options(), "-f", "torch", "-p", "float32", "--on", cluster["client"],
        "--fleet", "B", "--out", out, env=RAY_ENV, unset=("RAY_ADDRESS",), cwd=tmp_path,
        fork=False, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert fleet_json(out)["B"]["status"] == "done"
    assert [(r["policy"], r["status"]) for r in records(out / "B")] == [("float32", "ok")]
    assert not ray_lines(done.stdout + done.stderr), done.stdout + done.stderr


@pytest.mark.parametrize("client", [False, True], ids=["RAY_ADDRESS", "ray-client"])
def test_a_cluster_that_does_not_answer_is_one_line_within_seconds(tmp_path, client):
    # No cluster: no fixture. Ray itself retries a cluster's address for 14 minutes and a
    # Ray client's for 30 s; the driver asks the address first, for a few seconds at most.
    address = f"127.0.0.1:{_free_port()}"
    on, env = (f"ray://{address}", {}) if client else ("ray", {"RAY_ADDRESS": address})
    started = time.monotonic()
    done = run_mpbench(
        "run", *run_options(), "--on", on, "--out", tmp_path / "fleet", env={**RAY_ENV, **env},
        unset=() if env else ("RAY_ADDRESS",), cwd=tmp_path, fork=False, timeout=120,
    )  # fmt: skip
    assert time.monotonic() - started < 20  # a loaded 2-core CI machine included
    assert done.returncode == 2
    assert done.stderr == (
        f"mpbench: error: --on ray: no Ray cluster at {on if client else address} (connection "
        "refused); start one with `ray start --head`, or set RAY_ADDRESS\n"
    )
    assert done.stdout == "" and not (tmp_path / "fleet").exists()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_ctrl_c_keeps_every_finished_machine_and_what_the_others_sent(cluster, tmp_path):
    out, store = tmp_path / "fleet", tmp_path / "store.sqlite"
    driver = start_fleet(cluster, "--fleet", "A,H", *TWO_POLICIES, "--max-steps", "8", "--out", out,
                         "--store", store, "--timeout", "300", tmp_path=tmp_path)  # fmt: skip
    with driving(driver):
        wait_for(lambda: (out / "fleet.json").exists() and fleet_json(out)["A"]["status"] == "done"
                 and len(records(out / "H")) == 1, 240, "A done and H's float32")  # fmt: skip
        time.sleep(1)  # H's bf16 cell hangs on its node
        driver.send_signal(signal.SIGINT)
        stdout, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "mpbench run --on ray" in stdout and "--resume" in stdout
    machines = fleet_json(out)
    assert machines["A"]["status"] == "done" and machines["H"]["status"] == "interrupted"
    assert [r["policy"] for r in records(out / "A")] == ["float32", "mixed_bfloat16"]
    assert [r["policy"] for r in records(out / "H")] == ["float32"]
    listed = run_mpbench("store", "list", "--store", store)
    assert listed.stdout.count("-A") == 1 and "-H" not in listed.stdout, listed.stdout
    # The hanging run on H's node was stopped with its task, as by Ctrl-C.
    wait_for(lambda: not _runs_on("H", cluster["raylets"]), 60, "H's mpbench run to end")
    # --resume continues the fleet's machines (here A alone): nothing finished runs again.
    # It adds to the store the first command named (fleet.json keeps it, and that command).
    before = records(out / "A")
    started = json.loads((out / "fleet.json").read_text())["command_line"]
    resumed = run_mpbench("run", "--on", "ray", "--out", out, "--resume", "--fleet", "A",
                          env=fleet_env(cluster), cwd=tmp_path, fork=False)  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert records(out / "A") == before
    assert f"store: {store}" in resumed.stdout and f" in {store} (2 records)" in resumed.stdout
    written = json.loads((out / "fleet.json").read_text())
    assert written["command_line"] == started and "--store" in started
    assert written["resumes"][0]["command_line"].endswith("--resume --fleet A")


def _runs_on(kind: str, raylets: dict[str, int]) -> list[psutil.Process]:
    """The `mpbench run` processes on the node(s) of `kind`: below one of their raylets."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            command = " ".join(process.info["cmdline"] or [])
            if "mpbench run --out" in command and _raylet_of(process, raylets)[0].startswith(
                f"{kind}#"
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, LookupError):
            continue
    return found


def _raylet_of(process: psutil.Process, raylets: dict[str, int]) -> tuple[str, int]:
    pids = {pid: name for name, pid in raylets.items()}
    for parent in process.parents():
        if parent.pid in pids:
            return pids[parent.pid], parent.pid
    raise LookupError(f"no raylet above {process}")


def lose_node(raylet: int, everything: bool = True) -> None:
    """The node is lost as a machine is: its raylet and every process it started, at once;
    or (everything=False) as a raylet that crashes: its workers end with it, and Ray's agent
    on the node pushes the raylet's last log lines to every driver."""
    node = psutil.Process(raylet)
    for process in [*node.children(recursive=True), node] if everything else [node]:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def test_a_node_lost_mid_run_is_resumed_on_another_node_of_its_kind(cluster, tmp_path):
    out = tmp_path / "fleet"
    driver = start_fleet(cluster, "--fleet", "A", *TWO_POLICIES, *LONGER, "--repeat", "2",
                         "--out", out, tmp_path=tmp_path)  # fmt: skip
    with driving(driver):
        first = wait_for(lambda: records(out / "A")[:1], 240, "A's first record")[0]
        (run,) = wait_for(lambda: _runs_on("A", cluster["raylets"]), 30, "A's run on its node")
        lose_node(_raylet_of(run, cluster["raylets"])[1], everything=False)
        stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert "its node was lost" in stdout and "resuming on another node of kind A" in stdout
    assert not ray_lines(stdout + stderr), stdout + stderr  # Ray's stay in its log files
    kept = records(out / "A")
    ids = [r["cell_id"] for r in kept]
    assert len(ids) == 4 and len(set(ids)) == 4, ids  # every cell once: none lost, none doubled
    assert kept[0] == first  # the record sent before the loss is kept, not measured again
    assert len(fleet_json(out)["A"]["nodes"]) == 2


def test_a_kind_whose_last_node_is_lost_is_reported_and_the_fleet_fails(cluster, tmp_path):
    # H's only node hangs at bf16 (after the Ctrl-C test, which leaves it up): lost there.
    out = tmp_path / "fleet"
    driver = start_fleet(cluster, "--fleet", "H", *TWO_POLICIES, "--max-steps", "8",
                         "--out", out, tmp_path=tmp_path)  # fmt: skip
    with driving(driver):
        wait_for(lambda: records(out / "H")[:1], 240, "H's float32 record")
        (run,) = wait_for(lambda: _runs_on("H", cluster["raylets"]), 30, "H's run on its node")
        lose_node(_raylet_of(run, cluster["raylets"])[1])
        stdout, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 1, stdout[-3000:] + stderr[-3000:]
    assert "no node of kind H is left" in stdout
    assert not ray_lines(stdout + stderr), stdout + stderr
    assert fleet_json(out)["H"]["status"] == "lost"
    assert [r["policy"] for r in records(out / "H")] == ["float32"]  # what it sent is kept
