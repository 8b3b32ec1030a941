"""The fleet on Ray: one actor per machine kind, on a node of that kind.

A kind is a Ray accelerator type (`accelerator_type:H100`, which Ray sets on GPU nodes and
a site may set on any node with `ray start --resources`), or `cpu` for nodes without one. An
actor asks for that resource, one CPU and, unless the cells run on the CPU, one GPU; it runs
node.py's `serve_machine` in a thread of its own and keeps its events (records as they are
measured) until the driver takes them. An actor polled by the driver, not a streaming
generator task: Ray client (`--on ray://HOST:PORT`) cannot pass a generator task's results
(its server fails on the ObjectRefGenerator), and one path serves both ways in. Ray does not
restart it (max_restarts=0): a node lost mid-run is this module's to handle, by starting the
kind again on another node from what the driver already holds (driver.py).

The driver's terminal shows mpbench's lines only: Ray's own (its workers' logs, the error
messages it pushes to drivers, such as a dead raylet's last log lines, its C++ warnings)
stay in Ray's log files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput, first_line
from mpbench.fleet.engine import NodeFacts
from mpbench.fleet.machines import FleetMachine
from mpbench.fleet.node import Event, node_facts, serve_machine
from mpbench.fleet.options import CPU_KIND, FleetOptions, import_engine

ACCELERATOR = "accelerator_type:"  # Ray's resource prefix for accelerator types
CLIENT = "ray://"  # a Ray client address
WAIT_S = 0.5  # how often a waiting machine is looked at (timeout, Ctrl-C)
NODE_LOOK_S = 5.0  # how often a running machine's node is looked up in Ray's list of nodes
CONNECT_S = 5.0  # how long the cluster's address may take to answer a connection
# A Ray client's server on the head starts a process for each client it serves, and that
# process can die as it starts (a gRPC race in Ray's proxier, ray-project/ray#63202, "about
# 7 % of connections"): the client then hears "Initialization failure from server". Each
# new connection starts a new process, so a refused one is tried again, this many times.
CLIENT_TRIES = 3
CLIENT_INIT_FAILED = "Initialization failure from server"
STOP_S = 45.0  # how long a node may take to stop its run on Ctrl-C (node.py waits 30 s)
NODE_ID = "ray_node_id"
END = None  # the last of a machine's events: its run has ended on the node


class RayFleet:
    """Connects to the cluster, says which fleet kinds it has, runs machines on them (the
    driver's FleetEngine, engine.py)."""

    engine = "ray"

    def __init__(self, options: FleetOptions, device: str) -> None:
        self.options = options
        self.cpu_cells = device == "cpu"
        self.ray = import_engine("ray", "Ray", "--on ray", "ray")
        self._actor = self.ray.remote(MachineOnNode)
        self._running: dict[str, Any] = {}  # fleet kind -> its actor
        self._lock = threading.Lock()
        self._stopping = False
        self._lost: set[str] = set()  # nodes a machine was lost on: never chosen again

    def connect(self) -> None:
        ray = self.ray
        address = self.options.address
        _quiet(ray)
        _check_answers(address, _dialled(address))
        tries = CLIENT_TRIES if address.startswith(CLIENT) else 1
        for attempt in range(1, tries + 1):
            try:
                ray.init(
                    address=address,
                    log_to_driver=False,
                    logging_level="ERROR",
                    configure_logging=False,
                )
                return
            except (ConnectionError, RuntimeError, ValueError) as exc:
                if attempt == tries or CLIENT_INIT_FAILED not in str(exc):
                    raise _no_cluster(address, _first_sentence(exc)) from None
                ray.shutdown()  # the failed client's state, before the next connection

    def close(self) -> None:
        self.ray.shutdown()

    def fleet_kinds(self) -> dict[str, int]:
        """Each fleet kind of the cluster's live nodes and how many nodes have it."""
        counts: dict[str, int] = {}
        for node in self._alive():
            for kind in _node_kinds(node):
                counts[kind] = counts.get(kind, 0) + 1
        return counts

    def default_fleet_kinds(self, available: dict[str, int]) -> list[str]:
        """Every accelerator type; the CPU-only nodes only when the cells run on a CPU."""
        kinds = sorted(k for k in available if k != CPU_KIND)
        if self.cpu_cells and CPU_KIND in available:
            kinds.append(CPU_KIND)
        return kinds

    def no_gpu(self, fleet_kind: str) -> str | None:
        """Why no node of `fleet_kind` can take a machine that asks a GPU (Ray's own list of
        each node's resources), or None where one has a GPU."""
        nodes = [n for n in self._alive() if fleet_kind in _node_kinds(n)]
        if not nodes or any(node.get("Resources", {}).get("GPU", 0) > 0 for node in nodes):
            return None  # no node alive: --fleet-timeout tells
        return f"Ray lists no GPU on its {len(nodes)} node{'s' * (len(nodes) != 1)}"

    def facts(self, fleet_kinds: list[str]) -> dict[str, NodeFacts | None]:
        """The versions on a node of each fleet kind, asked of all at once (None: no node of
        the kind answered within --fleet-timeout)."""
        refs = {
            kind: self.ray.remote(node_facts)
            .options(**self._placement(kind), num_cpus=0, num_gpus=0, max_retries=0)
            .remote()
            for kind in fleet_kinds
        }
        self.ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.options.timeout_s)
        answers: dict[str, NodeFacts | None] = {}
        for kind, ref in refs.items():
            ready, _ = self.ray.wait([ref], timeout=0)
            if ready:
                answers[kind] = self.ray.get(ref)
            else:
                self.ray.cancel(ref)
                answers[kind] = None
        return answers

    def run(
        self, machine: FleetMachine, seed: dict[str, bytes], receive: Callable[[Event], None]
    ) -> bool:
        """Run `machine` on one node until its run ends; True when it ended there, False when
        the node was lost (the caller decides whether another node takes it over). Raises
        TimeoutError when no node took it in --fleet-timeout, KeyboardInterrupt once stopped."""
        ray = self.ray
        actor_class = self._actor.options(
            **self._placement(kind=machine.fleet_kind),
            num_cpus=1,
            num_gpus=0 if self.cpu_cells else 1,
            max_restarts=0,
            max_concurrency=2,  # `stop` while a `take` waits
        )
        with self._lock:
            if self._stopping:
                raise KeyboardInterrupt
            actor = actor_class.remote(seed, machine.fleet_kind)
            self._running[machine.fleet_kind] = actor
        follow = _Follow()
        try:
            return self._follow(actor, follow, receive)
        except ray.exceptions.RayTaskError:
            raise  # a bug on the node's side: the driver reports it
        except ray.exceptions.RayError as exc:  # the node died, its worker was killed, ...
            machine.why = _first_sentence(exc)
            if follow.node_id is not None:  # Ray may list it as alive a while longer
                self._lost.add(follow.node_id)
            return False
        finally:
            with self._lock:
                self._running.pop(machine.fleet_kind, None)
            with contextlib.suppress(Exception):  # it may be gone with its node
                ray.kill(actor, no_restart=True)

    def _follow(self, actor: Any, follow: _Follow, receive: Callable[[Event], None]) -> bool:
        """Take the actor's events as they come, until its run ends."""
        ray = self.ray
        pending = actor.take.remote(WAIT_S)
        while True:
            ready, _ = ray.wait([pending], timeout=WAIT_S)
            self._look(follow)
            if not ready:
                continue
            for event in ray.get(pending):
                if event is END:
                    if self._stopping and not follow.finished:
                        raise KeyboardInterrupt  # the node stopped its run, as on Ctrl-C
                    return True
                if event.kind == "started":
                    follow.node_id = event.facts.pop(NODE_ID, None)
                follow.finished = event.kind == "done"
                receive(event)
            pending = actor.take.remote(WAIT_S)

    def _look(self, follow: _Follow) -> None:
        """Between events: Ctrl-C, the --fleet-timeout of a machine no node took, and its
        node's health."""
        now = time.monotonic()
        if self._stopping:
            follow.stopping_since = follow.stopping_since or now
            if follow.node_id is None or now - follow.stopping_since > STOP_S:
                raise KeyboardInterrupt  # nothing runs yet, or the node does not answer
            return
        if follow.node_id is None and now - follow.started > self.options.timeout_s:
            raise TimeoutError
        if follow.node_id is not None and now - follow.last_look > NODE_LOOK_S:
            follow.last_look = now
            if not self._node_alive(follow.node_id):
                # Ray declared the node dead while its actor says nothing: a worker
                # orphaned by its raylet. The kind goes on elsewhere.
                raise self.ray.exceptions.NodeDiedError(f"node {follow.node_id[:12]} is dead")

    def stop(self) -> None:
        """Ctrl-C: each node stops its run as on Ctrl-C (node.py); each machine's actor is
        then killed (run's `finally`)."""
        with self._lock:
            self._stopping = True
            running = list(self._running.values())
        for actor in running:
            with contextlib.suppress(Exception):  # its node may be gone
                actor.stop.remote()

    def _node_alive(self, node_id: str) -> bool:
        return any(node.get("NodeID") == node_id for node in self._alive())

    def has_node(self, fleet_kind: str) -> bool:
        return any(fleet_kind in _node_kinds(node) for node in self._alive())

    def _alive(self) -> list[dict]:
        return [
            node
            for node in self.ray.nodes()
            if node.get("Alive") and node.get("NodeID") not in self._lost
        ]

    def _placement(self, kind: str) -> dict:
        if kind != CPU_KIND:
            return {"resources": {f"{ACCELERATOR}{kind}": 0.001}}  # as accelerator_type= asks
        # Nodes without an accelerator type have no resource of their own: pinned by id.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in self._alive() if CPU_KIND in _node_kinds(n)]
        if not nodes:
            raise RuntimeError("no CPU-only node left")
        strategy = NodeAffinitySchedulingStrategy(node_id=nodes[0]["NodeID"], soft=False)
        return {"scheduling_strategy": strategy}


class _Follow:
    """What the driver knows of one machine's actor while it follows it."""

    def __init__(self) -> None:
        self.started = self.last_look = time.monotonic()
        self.node_id: str | None = None  # once the node said it started
        self.finished = False  # the node sent its run's end ("done")
        self.stopping_since: float | None = None


class MachineOnNode:
    """The Ray actor that runs one machine on its node: node.py's serve_machine in a thread
    of its own (the run gets SIGTERM when the thread that started it ends, PR_SET_PDEATHSIG,
    so that thread lives as long as the run), its events kept until the driver takes them."""

    def __init__(self, seed: dict[str, bytes], kind: str) -> None:
        import ray

        self._node_id = ray.get_runtime_context().get_node_id()
        self._events: list[Any] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(seed, kind), name="mpbench-machine", daemon=True
        )
        self._thread.start()

    def _serve(self, seed: dict[str, bytes], kind: str) -> None:
        try:
            for event in serve_machine(seed, kind, stop=self._stop, env=node_environment()):
                if event.kind == "started":
                    event.facts[NODE_ID] = self._node_id
                self._put(event)
        except Exception as exc:  # the node's side failed: the driver reports it
            self._put(exc)
        self._put(END)

    def _put(self, item: Any) -> None:
        with self._changed:
            self._events.append(item)
            self._changed.notify_all()

    def take(self, wait_s: float) -> list[Any]:
        """The events since the last take (waiting up to `wait_s` for one), END last once
        the run has ended; a failure on the node is raised once the events before it are
        taken."""
        with self._changed:
            self._changed.wait_for(lambda: self._events, timeout=wait_s)
            failed = [i for i, item in enumerate(self._events) if isinstance(item, Exception)]
            if failed and failed[0] == 0:
                raise self._events.pop(0)
            upto = failed[0] if failed else len(self._events)
            taken, self._events = self._events[:upto], self._events[upto:]
        return taken

    def stop(self) -> None:
        """Stop the run as Ctrl-C does, and wait until it has (its cell in flight recorded
        as interrupted on the node)."""
        self._stop.set()
        self._thread.join(timeout=STOP_S)


def node_environment() -> dict[str, str]:
    """This Ray worker's environment, less what Ray sets in its workers for its own tasks:
    OMP_NUM_THREADS (the task's CPUs, 1 here) where the node's environment has none. A run
    by hand on the node decides its threads itself (the cores it may use: runner/matrix.py),
    and so must the node's run, or it runs and is recorded with Ray's one thread. An
    OMP_NUM_THREADS the node was started with is kept: a hand run there sees it too."""
    env = dict(os.environ)
    if "OMP_NUM_THREADS" in env and "OMP_NUM_THREADS" not in _started_with(env):
        del env["OMP_NUM_THREADS"]
    return env


def _started_with(env: dict[str, str]) -> set[str]:
    """The names in this process's environment as the raylet started it (/proc/self/environ
    keeps the environment a process was started with, before Ray's own settings)."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:  # not Linux: keep every variable
        return set(env)
    return {entry.split(b"=", 1)[0].decode(errors="replace") for entry in raw.split(b"\0")}


def _quiet(ray: Any) -> None:
    """Keep Ray's own lines off mpbench's stdout and stderr (they stay in Ray's log files):
    the error messages Ray pushes to every driver (a dead raylet's last log lines, its
    `[state-dump]`s; log_to_driver=False does not stop those) and its Python logger. Its
    C++ core writes to stderr only while it cannot reach the cluster, which
    _check_answers keeps from happening (RAY_BACKEND_LOG_LEVEL would, but Ray says so on
    stderr when it reads it)."""
    ray._private.worker._worker_logs_enabled = False  # what Ray's own debugger switches off
    logger = logging.getLogger("ray")
    logger.handlers = [logging.NullHandler()]
    logger.propagate = False


def _dialled(address: str) -> str:
    """HOST:PORT that ray.init will connect to for `address`: a Ray client's as given; a
    cluster's as Ray resolves it ("auto": the cluster running here; localhost: this
    machine's address)."""
    if address.startswith(CLIENT):
        return address[len(CLIENT) :]
    from ray._private.services import canonicalize_bootstrap_address

    try:
        dialled = canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError) as exc:
        raise _no_cluster(address, _first_sentence(exc)) from None
    if dialled is None:
        raise _no_cluster(address, "Ray found no cluster running here")
    return dialled


def _check_answers(address: str, dialled: str) -> None:
    """Something listens at the cluster's address within CONNECT_S; otherwise ray.init
    would retry for minutes (a cluster's address) or 30 s (a Ray client's)."""
    host, _, port = dialled.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S):
            return
    except TimeoutError:
        why = f"no answer within {CONNECT_S:g} s"
    except (OSError, ValueError) as exc:
        why = (getattr(exc, "strerror", None) or str(exc)).lower()
    where = "" if dialled in address else f"Ray dials {dialled}: "
    raise _no_cluster(address, where + why)


def _no_cluster(address: str, why: str) -> InvalidInput:
    where = "running here" if address == "auto" else f"at {address}"
    return InvalidInput(
        f"--on ray: no Ray cluster {where} ({why}); start one with `ray start --head`, "
        "or set RAY_ADDRESS"
    )


def _node_kinds(node: dict) -> list[str]:
    resources = node.get("Resources", {})
    kinds = [name[len(ACCELERATOR) :] for name in resources if name.startswith(ACCELERATOR)]
    if not kinds and resources.get("CPU", 0) > 0:
        kinds = [CPU_KIND]
    return kinds


def _first_sentence(exc: BaseException) -> str:
    """What Ray said, to its first sentence (its messages go on with advice on its tools)."""
    return first_line(exc).split(". ")[0].rstrip(".")
