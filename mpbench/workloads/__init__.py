"""Framework-neutral workload specs (docs/architecture.md, "Where a new thing goes"): each
backend builds exactly these models."""

from mpbench.workloads.spec import (
    WORKLOADS,
    Conv,
    Dense,
    Flatten,
    LanguageModel,
    LMShape,
    MaxPool,
    OptimizerSpec,
    Workload,
    describe_workload,
    get_workload,
    resolve_workloads,
    shadowed_entry_point,
)
from mpbench.workloads.user import UserWorkload

__all__ = [
    "WORKLOADS",
    "Conv",
    "Dense",
    "Flatten",
    "LMShape",
    "LanguageModel",
    "MaxPool",
    "OptimizerSpec",
    "UserWorkload",
    "Workload",
    "describe_workload",
    "get_workload",
    "resolve_workloads",
    "shadowed_entry_point",
]
