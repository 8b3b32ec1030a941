"""Framework-neutral workload specs (DESIGN.md §3): each backend builds exactly these models."""

from mpbench.workloads.spec import (
    WORKLOADS,
    Conv,
    Dense,
    Flatten,
    MaxPool,
    OptimizerSpec,
    Workload,
    get_workload,
)

__all__ = [
    "WORKLOADS",
    "Conv",
    "Dense",
    "Flatten",
    "MaxPool",
    "OptimizerSpec",
    "Workload",
    "get_workload",
]
