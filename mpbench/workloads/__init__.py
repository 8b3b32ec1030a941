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

# The zoos register their prefixes in user.py's ZOOS (the zoo sits above user.py): imported
# here, so that any import of a workload module has them (it imports no library).
from mpbench.workloads.zoo import registry  # noqa: F401

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
