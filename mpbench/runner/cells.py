"""Expand a RunConfig into cells: framework × workload × policy × repeat.

Cells that cannot run here (a framework that is not installed, a policy the device does not
support) are kept as cells with a skip reason, so the results say why they are missing.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
from dataclasses import dataclass

from mpbench.backends import FRAMEWORKS, INSTALL_HINTS
from mpbench.backends.base import CellSpec
from mpbench.errors import InvalidInput, unknown_choice
from mpbench.policies import (
    POLICIES,
    DeviceTraits,
    Policy,
    Rating,
    auto_policies,
    rate,
    resolve,
)
from mpbench.runner.config import RunConfig
from mpbench.workloads import get_workload


@dataclass
class Cell:
    spec: CellSpec
    skip_reason: str | None = None  # set when the cell is decided without running it


def installed(framework: str) -> bool:
    # find_spec looks for the package without importing it (importing TF takes seconds).
    return importlib.util.find_spec(framework) is not None


def resolve_frameworks(names: list[str]) -> list[str]:
    if not names:
        found = [f for f in FRAMEWORKS if installed(f)]
        if not found:
            hints = " or ".join(INSTALL_HINTS.values())
            raise InvalidInput(f"neither PyTorch nor TensorFlow is installed: {hints}")
        return found
    chosen: list[str] = []
    for name in names:
        name = name.strip().lower()
        if name == "all":
            chosen += FRAMEWORKS
        elif name in FRAMEWORKS:
            chosen.append(name)
        else:
            raise unknown_choice("framework", name, [*FRAMEWORKS, "all"])
    return list(dict.fromkeys(chosen))


def resolve_policies(names: list[str], traits: DeviceTraits) -> list[Policy]:
    chosen: list[Policy] = []
    for name in names:
        key = name.strip().lower()
        if key == "auto":
            chosen += auto_policies(traits)
        elif key == "all":
            chosen += POLICIES.values()
        else:
            chosen.append(resolve(key))
    return list(dict.fromkeys(chosen))


def resolve_device(requested: str, report) -> tuple[str, DeviceTraits]:
    """`auto` → the first NVIDIA GPU, else Apple MPS, else the CPU; plus its traits."""
    if requested == "auto":
        if report.device_traits("cuda", 0) is not None:
            requested = "cuda:0"
        elif sys.platform == "darwin" and platform.machine() == "arm64":
            requested = "mps"
        else:
            requested = "cpu"
    kind, _, index_text = requested.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index_text and not index_text.isdigit()):
        raise unknown_choice("device", requested, ["auto", "cpu", "cuda", "cuda:N", "mps"])
    if kind == "cpu" and index_text:
        raise unknown_choice("device", requested, ["auto", "cpu", "cuda", "cuda:N", "mps"])
    index = int(index_text) if index_text else (0 if kind == "cuda" else None)
    traits = report.device_traits(kind, index)
    if traits is None:
        # Not seen by detect (no NVML in a container, say): the framework decides in the cell.
        traits = DeviceTraits(kind=kind, name=f"{kind} (not detected)")
    return (f"cuda:{index}" if kind == "cuda" else kind), traits


def expand(config: RunConfig, report, run_id: str) -> tuple[str, DeviceTraits, list[Cell]]:
    device, traits = resolve_device(config.device, report)
    frameworks = resolve_frameworks(config.frameworks)
    workloads = [get_workload(name) for name in config.workload_names]
    policies = resolve_policies(config.policies, traits)
    cells: list[Cell] = []
    for framework in frameworks:
        missing = None if installed(framework) else INSTALL_HINTS[framework]
        for workload in workloads:
            settings = config.workloads[workload.name]
            units = settings.units
            if units is None:
                units = workload.default_units(traits.kind)
            for policy in policies:
                rating = rate(policy, traits)
                for repeat in range(config.repeat):
                    spec = CellSpec(
                        run_id=run_id,
                        cell_id=f"{framework}/{workload.name}/{policy.name}/r{repeat}",
                        framework=framework,
                        workload=workload.name,
                        policy=policy.name,
                        repeat=repeat,
                        device=device,
                        batch_size=settings.batch_size,
                        epochs=settings.epochs,
                        max_steps=settings.max_steps,
                        warmup_steps=settings.warmup_steps,
                        units=units,
                        seed=config.seed,
                        data=config.data,
                        data_dir=config.data_dir,
                        allow_download=config.allow_download,
                        synthetic_train_size=settings.synthetic_train_size,
                        synthetic_test_size=settings.synthetic_test_size,
                        loop=config.loop,
                        jit=config.jit,
                    )
                    reason = None
                    if missing:
                        reason = f"{framework} is not installed: {missing}"
                    elif rating.rating is Rating.UNSUPPORTED:
                        reason = f"{policy.name} is unsupported on {traits.name}: {rating.reason}"
                    cells.append(Cell(spec, reason))
    return device, traits, cells
