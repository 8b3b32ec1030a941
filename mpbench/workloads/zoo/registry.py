"""The zoos by prefix, registered in user.py's ZOOS: the top of the zoo package, which
mpbench.workloads imports so that every zoo name is known before one is looked up. A
prefix's module is imported only when one of its names is resolved (in the probe's child
process or in a cell): importing this module imports no library."""

from __future__ import annotations

import functools
import importlib

from mpbench.workloads.user import Resolved, register_zoo
from mpbench.workloads.zoo import parse

# prefix -> the function that resolves its names, as "module:function"
# (hf: names go through hf_route.py: an image classifier to hf_vision.py, the rest to hf.py)
RESOLVERS = {
    "hf": "mpbench.workloads.zoo.hf_route:resolve",
    "keras": "mpbench.workloads.zoo.keras_apps:resolve",
    "torchvision": "mpbench.workloads.zoo.vision:resolve",
    "timm": "mpbench.workloads.zoo.vision:resolve",
}
# prefix -> the framework its models are built in
FRAMEWORKS = {"hf": "torch", "keras": "tensorflow", "torchvision": "torch", "timm": "torch"}


@functools.lru_cache(maxsize=32)
def resolve(name: str) -> Resolved:
    """The zoo name resolved by its prefix's module (once a process: the probe asks for the
    workload, its source and its check)."""
    parsed = parse(name)
    module, _, function = RESOLVERS[parsed.zoo].partition(":")
    return getattr(importlib.import_module(module), function)(parsed)


for prefix in RESOLVERS:
    register_zoo(prefix, resolve, FRAMEWORKS[prefix])
