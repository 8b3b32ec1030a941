"""A local multi-node Ray cluster for the fleet's tests, in a process of its own.

`python ray_cluster.py [--head-kind KIND] KIND[:ENV=VALUE...] ...` starts a head node without
CPUs (nothing that needs one is scheduled there) and one worker node per argument, each with
one CPU and the resource `accelerator_type:KIND` (what Ray gives a node with that GPU), and
ENV=VALUE in its environment (its workers inherit it). The nodes are not named
(MPBENCH_MACHINE): the fleet names each machine by its kind, so the stand-ins for GPU kinds,
all this machine's CPU, are still one machine per kind (docs/fleet.md). `--head-kind` gives
the head an accelerator type too: a kind whose only node has no CPU, which no machine's run
can ever take. The head also serves Ray client (`ray://`, as `ray start --head
--ray-client-server-port=PORT` does).

It prints one line of JSON (the address, the Ray client address, the raylet pid of each
node), then keeps the cluster up until its stdin closes. The test process itself never
imports Ray: its client threads would be inherited by every process the test session forks
later.
"""

from __future__ import annotations

import json
import socket
import sys

from ray._private import ray_constants
from ray.cluster_utils import Cluster


def main(args: list[str]) -> None:
    head = {"num_cpus": 0, "include_dashboard": False, "ray_client_server_port": free_port()}
    if args[:1] == ["--head-kind"]:
        head["resources"] = {f"accelerator_type:{args[1]}": 1}
        args = args[2:]
    cluster = Cluster(initialize_head=True, head_node_args=head)
    raylets = {}
    for n, spec in enumerate(args):
        kind, *assignments = spec.split(":")
        env = dict(a.split("=", 1) for a in assignments)
        node = cluster.add_node(num_cpus=1, resources={f"accelerator_type:{kind}": 1}, env_vars=env)
        raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
        raylets[f"{kind}#{n}"] = raylet
    cluster.wait_for_nodes()
    client = f"ray://127.0.0.1:{head['ray_client_server_port']}"
    print(
        json.dumps({"address": cluster.address, "client": client, "raylets": raylets}), flush=True
    )
    sys.stdin.read()  # until the test closes it
    cluster.shutdown()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


if __name__ == "__main__":
    main(sys.argv[1:])
