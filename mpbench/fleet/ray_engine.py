"""The fleet on Ray: one streaming task per machine kind, on a node of that kind.

A kind is a Ray accelerator type (`accelerator_type:H100`, which Ray sets on GPU nodes and
a site may set on any node with `ray start --resources`), or `cpu` for nodes without one. A
task asks for that resource, one CPU and, unless the cells run on the CPU, one GPU; it runs
node.py's `serve_machine`, whose events (records as they are measured) stream back. Ray does
not retry it (max_retries=0): a node lost mid-run is this module's to handle, by starting
the kind again on another node from what the driver already holds (driver.py).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.fleet.machines import Machine
from mpbench.fleet.node import Event, node_facts, serve_machine
from mpbench.fleet.options import CPU_KIND, FleetOptions, import_engine

ACCELERATOR = "accelerator_type:"  # Ray's resource prefix for accelerator types
WAIT_S = 0.5  # how often a waiting task is looked at (timeout, Ctrl-C)
NODE_LOOK_S = 5.0  # how often a running task's node is looked up in Ray's list of nodes


class RayFleet:
    """Connects to the cluster, says which kinds it has, runs machines on them."""

    engine = "ray"

    def __init__(self, options: FleetOptions, device: str) -> None:
        self.options = options
        self.cpu_cells = device == "cpu"
        self.ray = import_engine("ray", "Ray", "--on ray", "ray")
        self._running: dict[str, Any] = {}  # kind -> its task (an ObjectRefGenerator)
        self._lock = threading.Lock()
        self._stopping = False
        self._lost: set[str] = set()  # nodes a task was lost on: never chosen again

    def connect(self) -> None:
        ray = self.ray
        try:
            ray.init(
                address=self.options.address,
                log_to_driver=False,
                logging_level="ERROR",
                configure_logging=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InvalidInput(
                f"--on ray: no Ray cluster at {self.options.address} ({_first_line(exc)}); "
                "start one with `ray start --head`, or set RAY_ADDRESS"
            ) from None

    def close(self) -> None:
        self.ray.shutdown()

    def kinds(self) -> dict[str, int]:
        """Each machine kind of the cluster's live nodes and how many nodes have it."""
        counts: dict[str, int] = {}
        for node in self._alive():
            for kind in _node_kinds(node):
                counts[kind] = counts.get(kind, 0) + 1
        return counts

    def default_kinds(self, available: dict[str, int]) -> list[str]:
        """Every accelerator type; the CPU-only nodes only when the cells run on a CPU."""
        kinds = sorted(k for k in available if k != CPU_KIND)
        if self.cpu_cells and CPU_KIND in available:
            kinds.append(CPU_KIND)
        return kinds

    def facts(self, kinds: list[str]) -> dict[str, dict[str, str | None] | None]:
        """The versions on a node of each kind, asked of all at once (None: no node of the
        kind answered within --fleet-timeout)."""
        refs = {
            kind: self.ray.remote(node_facts)
            .options(**self._placement(kind), num_cpus=0, num_gpus=0, max_retries=0)
            .remote()
            for kind in kinds
        }
        self.ray.wait(list(refs.values()), num_returns=len(refs), timeout=self.options.timeout_s)
        answers: dict[str, dict[str, str | None] | None] = {}
        for kind, ref in refs.items():
            ready, _ = self.ray.wait([ref], timeout=0)
            if ready:
                answers[kind] = self.ray.get(ref)
            else:
                self.ray.cancel(ref)
                answers[kind] = None
        return answers

    def run(self, machine: Machine, seed: dict[str, bytes], receive: Callable[[Event], None]):
        """Run `machine` on one node until its run ends; True when it ended there, False when
        the node was lost (the caller decides whether another node takes it over). Raises
        TimeoutError when no node took it in --fleet-timeout."""
        ray = self.ray
        task = ray.remote(_serve_on_ray).options(
            **self._placement(kind=machine.kind),
            num_cpus=1,
            num_gpus=0 if self.cpu_cells else 1,
            max_retries=0,
        )
        with self._lock:
            if self._stopping:
                raise KeyboardInterrupt
            events = task.remote(seed)
            self._running[machine.kind] = events
        node_id = None
        try:
            started = last_look = time.monotonic()
            while True:
                ready, _ = ray.wait([events], timeout=WAIT_S)
                now = time.monotonic()
                if not ready:
                    if node_id is None and now - started > self.options.timeout_s:
                        ray.cancel(events)
                        raise TimeoutError
                    if node_id is not None and now - last_look > NODE_LOOK_S:
                        last_look = now
                        if not self._node_alive(node_id):
                            # Ray declared the node dead while its task says nothing: a
                            # worker orphaned by its raylet. The kind goes on elsewhere.
                            with contextlib.suppress(Exception):  # it may be gone already
                                ray.cancel(events, force=True)
                            raise ray.exceptions.NodeDiedError(f"node {node_id[:12]} is dead")
                    continue
                try:
                    event = ray.get(next(events))
                except StopIteration:
                    return True
                if event.kind == "started":
                    node_id = event.facts.pop(NODE_ID, None)
                receive(event)
        except ray.exceptions.TaskCancelledError:
            raise KeyboardInterrupt from None
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc, ray.exceptions.TaskCancelledError):
                raise KeyboardInterrupt from None
            raise  # a bug on the node's side: the driver reports it
        except ray.exceptions.RayError as exc:  # the node died, its worker was killed, ...
            machine.why = _first_line(exc)
            if node_id is not None:  # Ray may list it as alive a while longer
                self._lost.add(node_id)
            return False
        finally:
            with self._lock:
                self._running.pop(machine.kind, None)

    def stop(self) -> None:
        """Ctrl-C: cancel every task; each node stops its run as on Ctrl-C (node.py)."""
        with self._lock:
            self._stopping = True
            running = list(self._running.values())
        for events in running:
            self.ray.cancel(events)

    def _node_alive(self, node_id: str) -> bool:
        return any(node.get("NodeID") == node_id for node in self._alive())

    def has_node(self, kind: str) -> bool:
        return any(kind in _node_kinds(node) for node in self._alive())

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


NODE_ID = "ray_node_id"


def _serve_on_ray(seed: dict[str, bytes]) -> Iterator[Event]:
    """node.py's serve_machine, its first event naming the Ray node it runs on (the driver
    never picks a node it lost a task on, which Ray may still list as alive for a while)."""
    import ray

    for event in serve_machine(seed):
        if event.kind == "started":
            event.facts[NODE_ID] = ray.get_runtime_context().get_node_id()
        yield event


def _node_kinds(node: dict) -> list[str]:
    resources = node.get("Resources", {})
    kinds = [name[len(ACCELERATOR) :] for name in resources if name.startswith(ACCELERATOR)]
    if not kinds and resources.get("CPU", 0) > 0:
        kinds = [CPU_KIND]
    return kinds


def _first_line(exc: BaseException) -> str:
    """What Ray said, to its first sentence (its messages go on with advice on its tools)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line.split(". ")[0].rstrip(".")
