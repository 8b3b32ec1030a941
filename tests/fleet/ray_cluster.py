"""A local multi-node Ray cluster for the fleet's tests, in a process of its own.

`python ray_cluster.py KIND[:ENV=VALUE...] ...` starts a head node without CPUs (nothing is
scheduled there) and one worker node per argument, each with one CPU, the resource
`accelerator_type:KIND` (what Ray gives a node with that GPU) and MPBENCH_MACHINE=KIND in its
environment (its workers inherit it: the two stand-ins are two named machines, docs/fleet.md),
plus any ENV=VALUE given. It prints `ready ADDRESS` and the raylet pid of each node, then
keeps the cluster up until its stdin closes. The test process itself never imports Ray: its
client threads would be inherited by every process the test session forks later.
"""

from __future__ import annotations

import json
import sys

from ray._private import ray_constants
from ray.cluster_utils import Cluster


def main(specs: list[str]) -> None:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False},
    )
    raylets = {}
    for n, spec in enumerate(specs):
        kind, *assignments = spec.split(":")
        env = {"MPBENCH_MACHINE": kind, **dict(a.split("=", 1) for a in assignments)}
        node = cluster.add_node(num_cpus=1, resources={f"accelerator_type:{kind}": 1}, env_vars=env)
        raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
        raylets[f"{kind}#{n}"] = raylet
    cluster.wait_for_nodes()
    print(json.dumps({"address": cluster.address, "raylets": raylets}), flush=True)
    sys.stdin.read()  # until the test closes it
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
