"""`mpbench ARGS` with the fleet's cluster replaced by this machine, for tests of the driver
(mpbench/fleet/driver.py) that need no Ray and no Slurm.

`python local_fleet.py run ... --on ray --fleet A,B --out OUT` runs mpbench's own CLI, where
every kind --fleet names is one node here: each machine's run is node.py's `serve_machine`
in a thread of this process, as a Ray task runs it on its node, so its `mpbench run --out DIR
--resume` is a real process here and its records come back as events. Ctrl-C (SIGINT to this
process) stops every machine's run as Ray's cancel does: SIGTERM to each `mpbench run`, which
stops its cells as on Ctrl-C, and the machine is "interrupted".
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import psutil

from mpbench.fleet import driver
from mpbench.fleet.node import node_facts, serve_machine


class LocalFleet:
    """The driver's FleetEngine (mpbench/fleet/engine.py), each fleet kind a node here."""

    engine = "local"
    cpu_cells = False  # as --device auto asks; no_gpu below: this machine cannot tell

    def __init__(self, options: Any) -> None:
        self.options = options
        self._stopping = threading.Event()

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass

    def fleet_kinds(self) -> dict[str, int]:
        return dict.fromkeys(self.options.kinds, 1)

    def default_fleet_kinds(self, available: dict[str, int]) -> list[str]:
        return sorted(available)

    def no_gpu(self, fleet_kind: str) -> str | None:
        return None

    def facts(self, fleet_kinds: list[str]) -> dict[str, dict]:
        return {kind: node_facts() for kind in fleet_kinds}

    def has_node(self, fleet_kind: str) -> bool:
        return True

    def run(self, machine, seed, receive) -> bool:
        events = serve_machine(seed, machine.fleet_kind, poll_s=0.1)
        try:
            for event in events:
                if self._stopping.is_set():
                    raise KeyboardInterrupt
                receive(event)
        finally:
            events.close()
        return True

    def stop(self) -> None:
        self._stopping.set()
        for child in psutil.Process().children():
            try:
                if "--resume" in child.cmdline():
                    child.terminate()
            except psutil.NoSuchProcess:
                continue


def main(argv: list[str]) -> int:
    driver._engine = lambda fleet, device, warn: LocalFleet(fleet)
    from mpbench.cli import main as mpbench

    return mpbench(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
