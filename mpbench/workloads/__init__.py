"""Framework-neutral workload specs (DESIGN.md §3): each backend builds exactly these models."""

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
    get_workload,
)

__all__ = [
    "WORKLOADS",
    "Conv",
    "Dense",
    "Flatten",
    "LMShape",
    "LanguageModel",
    "MaxPool",
    "OptimizerSpec",
    "Workload",
    "get_workload",
]
