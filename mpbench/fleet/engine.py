"""What the driver asks of a cluster: the FleetEngine protocol, which ray_engine.RayFleet and
slurm_engine.SlurmFleet keep (tests/fleet/local_fleet.py's stand-in too).

A fleet kind is the fleet's word for a kind of machine: a Ray accelerator type or a Slurm
partition, as `--fleet` names them. It is never a record's `device.kind` (cpu, cuda), and a
machine of the fleet (machines.FleetMachine) is one fleet kind's run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mpbench.fleet.machines import FleetMachine
    from mpbench.fleet.node import Event
    from mpbench.fleet.options import FleetOptions

NodeFacts = dict[str, str | None]  # node.py's node_facts: a node's name and versions


class FleetEngine(Protocol):
    engine: str  # "ray", "slurm": how fleet.json and the driver's lines name it
    options: FleetOptions
    cpu_cells: bool  # the cells run on the CPU (--device cpu): no GPU is asked of a node

    def connect(self) -> None:
        """Reach the cluster; InvalidInput, one line, where it does not answer."""

    def close(self) -> None: ...

    def fleet_kinds(self) -> dict[str, int]:
        """Each fleet kind the cluster has nodes up of, and how many."""

    def default_fleet_kinds(self, available: dict[str, int]) -> list[str]:
        """The fleet kinds to run on where --fleet names none."""

    def no_gpu(self, fleet_kind: str) -> str | None:
        """Why no node of `fleet_kind` can take cells that ask a GPU, or None where one can
        (or where the engine cannot tell)."""

    def facts(self, fleet_kinds: list[str]) -> dict[str, NodeFacts | None]:
        """The versions on a node of each fleet kind (None: no node answered in time)."""

    def has_node(self, fleet_kind: str) -> bool: ...

    def run(
        self, machine: FleetMachine, seed: dict[str, bytes], receive: Callable[[Event], None]
    ) -> bool:
        """Run `machine` on one node of its fleet kind, from the files `seed` holds, handing
        each event to `receive`: True where its run ended there, False where the node was
        lost. TimeoutError where no node took it within --fleet-timeout; KeyboardInterrupt
        once stopped."""

    def stop(self) -> None:
        """Ctrl-C: stop every machine's run as Ctrl-C stops a run."""
