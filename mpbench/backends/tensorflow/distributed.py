"""TensorFlow data-parallel cells: `tf.distribute.MirroredStrategy` in the cell's own process
(docs/distributed.md, research notes §4(b)).

A cell of `--nproc N` (N > 1, one node) runs N replicas in sync: N logical CPUs splitting the
one CPU, or N local GPUs. `spec.batch_size` is each replica's batch, so a timed step is one
global step of N x batch samples. What the strategy cannot run correctly is refused before
TensorFlow is imported (`refusal`), and the cell is recorded `skipped` with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpbench.backends.base import CellSpec
from mpbench.backends.tensorflow.device import Replicas

LAUNCHER = "tf.distribute.MirroredStrategy"

NODES_REFUSAL = (
    "TensorFlow across nodes needs MultiWorkerMirroredStrategy, whose Keras 3 fit fails "
    "(keras-team/keras#20585: 'Attempt to convert a value (PerReplica...) with an unsupported "
    "type'); mpbench runs TensorFlow data-parallel on one node only (--nnodes 1), and several "
    "nodes with torch"
)
XLA_REFUSAL = (
    "XLA (--jit on) with MirroredStrategy fails: each replica's compiled step reads variables "
    "placed on another replica's device ('Trying to access resource ... located in device "
    "CPU:1 from device CPU:0'; GPU: keras-team/keras#21366, tensorflow/tensorflow#56423); "
    "run TensorFlow data-parallel cells with --jit off"
)
ACCUMULATE_REFUSAL = (
    "gradient accumulation under MirroredStrategy fails in Keras 3: the optimizer applies the "
    "accumulated update inside a cond in the replica context, and the gradient all-reduce in "
    "that branch is a merge_call the strategy refuses ('merge_call called while defining a "
    "new graph or a tf.function'); run TensorFlow data-parallel cells with --accumulate 1"
)
UNAVAILABLE = {
    "rank_step_median_s": (
        "MirroredStrategy runs every replica in this one process and one step call: there "
        "is no per-replica step time, only the global step's"
    ),
    "allreduce_s_per_step": (
        "MirroredStrategy exposes no all-reduce timing: the gradient all-reduce runs inside "
        "the optimizer's apply, within the step's graph"
    ),
}


def refusal(spec: CellSpec) -> str | None:
    """Why this data-parallel cell cannot run under MirroredStrategy (None: it can). Cheap:
    no TensorFlow import."""
    if spec.nnodes > 1:
        return NODES_REFUSAL
    if spec.world_size <= 1:
        return None
    if spec.jit:
        return XLA_REFUSAL
    if spec.accumulate > 1:
        return ACCUMULATE_REFUSAL
    return None


@dataclass
class Strategy:
    """The cell's MirroredStrategy and where its replicas run."""

    strategy: Any  # tf.distribute.MirroredStrategy
    replicas: Replicas

    @property
    def count(self) -> int:
        return int(self.strategy.num_replicas_in_sync)

    def backend(self) -> str:
        """The cross-device ops the strategy all-reduces with, as it holds them: by default
        CollectiveAllReduce, with RING collectives on CPUs and NCCL on physical GPUs
        (mirrored_strategy.py, _make_collective_ops_with_fallbacks)."""
        extended = self.strategy.extended
        ops = getattr(extended, "_cross_device_ops", None) or getattr(
            extended, "_inferred_cross_device_ops", None
        )
        if ops is None:
            return "unknown"
        name = type(ops).__name__
        options = getattr(extended, "_communication_options", None)
        implementation = getattr(getattr(options, "implementation", None), "name", None)
        if name == "CollectiveAllReduce" and implementation:
            return f"{name} ({implementation})"
        return name

    def stats(self, spec: CellSpec) -> dict[str, Any]:
        """Measurements.distributed: DistributedStats' fields as a one-process job knows them
        (the runner derives per-device throughput and scaling efficiency)."""
        return {
            "world_size": self.count,
            "nodes": spec.nnodes,
            "nproc_per_node": spec.nproc,
            "launcher": LAUNCHER,
            "backend": self.backend(),
            "grad_comm": "fp32",
            "devices": self.replicas.kind,
            "rank_step_median_s": [],
            "allreduce_s_per_step": None,
            "allreduce_overlap_s_per_step": None,
            "comm_source": None,
            "unavailable": dict(UNAVAILABLE),
        }


def mirrored(tf: Any, replicas: Replicas, expected: int) -> Strategy:
    """A MirroredStrategy over the replicas' devices (resolve_replicas configured them)."""
    strategy = tf.distribute.MirroredStrategy(list(replicas.devices))
    if strategy.num_replicas_in_sync != expected:
        raise RuntimeError(
            f"MirroredStrategy has {strategy.num_replicas_in_sync} replicas in sync, "
            f"the cell asked for {expected}"
        )
    return Strategy(strategy, replicas)
