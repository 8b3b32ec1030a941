"""The fleet: `mpbench run --on ray|slurm`, the same matrix once on each kind of machine.

Each machine kind gets one run directory under the fleet's output, made exactly as
`mpbench run` makes one locally (float32 and every policy interleaved on one node), so each
speed-up has its float32 reference on the same machine and none is pooled across machines.
The driver checks the configuration once, writes each machine's run.json, and a node
continues that run (`mpbench run --out DIR --resume`): a first start, a node lost mid-run and
`--resume` of the fleet are one path (docs/fleet.md).

Nothing here is imported by `mpbench run` without `--on`, and Ray or submitit only by the
engine that needs them.
"""

from mpbench.fleet.driver import run_fleet

__all__ = ["run_fleet"]
