"""Which deep-learning frameworks are installed, and (with --probe) what each one sees.

Versions come from package metadata: importing torch or TensorFlow costs seconds and may
initialise CUDA, which `detect` must not do. `--probe` imports each installed framework in
its own child process (mpbench.detect.probe_child) with a timeout.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from importlib import metadata
from typing import Any

from mpbench.detect.child import PROBE_MARKER, run_child
from mpbench.detect.cuda_order import CudaMapping, cuda_mapping
from mpbench.detect.gpu import GpuInfo

DEFAULT_PROBE_TIMEOUT_S = 180.0

# Distribution names each framework ships under, preferred first.
DISTRIBUTIONS = {
    "torch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tf-nightly"),
    "keras": ("keras", "keras-nightly"),
}
PROBED = ("torch", "tensorflow")  # keras runs on TensorFlow here; its version is enough

TORCH_CUDA_HINT = (
    "install a CUDA build: pip install torch --index-url https://download.pytorch.org/whl/cu126 "
    "(pick the CUDA version your driver supports at https://pytorch.org/get-started/locally/)"
)
TF_CUDA_HINT = "on Linux: pip install 'tensorflow[and-cuda]' (it brings matching CUDA/cuDNN)"


@dataclass(frozen=True)
class ProbedDevice:
    index: int
    name: str
    compute_capability: tuple[int, int] | None
    memory_total_bytes: int | None
    arch: str | None  # ROCm gfx architecture

    def to_dict(self) -> dict:
        cc = self.compute_capability
        return {
            "index": self.index,
            "name": self.name,
            "compute_capability": "{}.{}".format(*cc) if cc else None,
            "memory_total_bytes": self.memory_total_bytes,
            "arch": self.arch,
        }


@dataclass(frozen=True)
class FrameworkProbe:
    """What a framework reported from inside its own child process."""

    ok: bool
    seconds: float
    error: str | None = None
    version: str | None = None
    cuda_available: bool | None = None  # torch
    built_with_cuda: bool | None = None  # tensorflow
    built_with_rocm: bool | None = None  # tensorflow
    cuda_version: str | None = None  # torch.version.cuda / TF build info
    hip_version: str | None = None  # torch.version.hip (ROCm builds)
    mps_built: bool | None = None
    mps_available: bool | None = None
    bf16_supported: bool | None = None  # torch.cuda.is_bf16_supported(including_emulation=False)
    devices: tuple[ProbedDevice, ...] = ()

    def to_dict(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "devices"}
        data["devices"] = [d.to_dict() for d in self.devices]
        return data


@dataclass(frozen=True)
class FrameworkInfo:
    name: str  # torch, tensorflow, keras
    distribution: str | None  # the installed package, e.g. tensorflow-cpu
    version: str | None  # None when not installed
    probe: FrameworkProbe | None = None

    @property
    def installed(self) -> bool:
        return self.version is not None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "installed": self.installed,
            "distribution": self.distribution,
            "version": self.version,
            "probe": self.probe.to_dict() if self.probe else None,
        }


def installed_frameworks() -> list[FrameworkInfo]:
    found = []
    for name, distributions in DISTRIBUTIONS.items():
        info = FrameworkInfo(name, None, None)
        for distribution in distributions:
            try:
                info = FrameworkInfo(name, distribution, metadata.version(distribution))
                break
            except metadata.PackageNotFoundError:
                continue
        found.append(info)
    return found


def _probe_from_json(data: dict[str, Any], seconds: float) -> FrameworkProbe:
    if not data.get("ok"):
        return FrameworkProbe(ok=False, seconds=seconds, error=str(data.get("error")))
    devices = tuple(
        ProbedDevice(
            index=int(d["index"]),
            name=str(d["name"]),
            compute_capability=tuple(d["compute_capability"])
            if d.get("compute_capability")
            else None,
            memory_total_bytes=d.get("memory_total_bytes"),
            arch=d.get("arch"),
        )
        for d in data.get("devices", [])
    )
    known = {f.name for f in fields(FrameworkProbe)} - {"ok", "seconds", "error", "devices"}
    reported = {k: v for k, v in data.items() if k in known}
    return FrameworkProbe(ok=True, seconds=seconds, devices=devices, **reported)


def run_probe(framework: str, timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> FrameworkProbe:
    """Import `framework` in a child process and read back what it sees."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    command = [sys.executable, "-m", "mpbench.detect.probe_child", framework]
    answer = run_child(command, PROBE_MARKER, timeout, env)
    if answer.result is None:
        return FrameworkProbe(ok=False, seconds=answer.seconds, error=f"probe {answer.error}")
    return _probe_from_json(answer.result, answer.seconds)


def probe_frameworks(
    frameworks: list[FrameworkInfo], timeout: float = DEFAULT_PROBE_TIMEOUT_S
) -> list[FrameworkInfo]:
    """Probe every installed framework of PROBED, in parallel child processes."""
    targets = [f.name for f in frameworks if f.installed and f.name in PROBED]
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        answers = pool.map(lambda name: run_probe(name, timeout), targets)
        results = dict(zip(targets, answers, strict=True))
    return [replace(f, probe=results[f.name]) if f.name in results else f for f in frameworks]


def mismatch_notes(
    gpus: list[GpuInfo],
    frameworks: list[FrameworkInfo],
    mapping: CudaMapping | None = None,
    environment: Mapping[str, str] | None = None,
) -> list[str]:
    """What a user must know: a framework that cannot import, or cannot see the GPUs NVML
    lists (a CPU-only build, `tensorflow` without its CUDA libraries, a driver too old for the
    framework's CUDA). The GPUs a framework should see are those CUDA_VISIBLE_DEVICES leaves
    (`mapping`, computed from `environment` when not given)."""
    env = os.environ if environment is None else environment
    if mapping is None:
        mapping = cuda_mapping(gpus, env)
    usable = sum(len(g.mig_devices) if g.mig_mode else 1 for g in gpus)
    expected = len(mapping.gpus) if mapping.known else None
    notes = []
    for fw in frameworks:
        probe = fw.probe
        if probe is None:
            continue
        label = f"{fw.name} {fw.version}"
        if not probe.ok:
            notes.append(f"{label}: import failed in a child process: {probe.error}")
            continue
        seen = len(probe.devices)
        if fw.name == "torch" and probe.hip_version:
            continue  # a ROCm build: NVIDIA GPUs are not its business
        if not usable or expected == 0:
            continue  # no GPU, or CUDA_VISIBLE_DEVICES hides them all (the mapping note says)
        if seen == 0:
            notes.append(_blind_note(fw, probe, expected or usable))
        elif expected is not None and seen < expected:
            visible = env.get("CUDA_VISIBLE_DEVICES")
            why = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
            notes.append(f"{label} sees {seen} of the {expected} NVIDIA GPUs CUDA should see{why}")
    return notes


def _blind_note(fw: FrameworkInfo, probe: FrameworkProbe, gpus: int) -> str:
    label = f"{fw.name} {fw.version}"
    if fw.name == "torch":
        if not probe.cuda_version:
            return (
                f"{label} is a CPU-only build but {gpus} NVIDIA GPU(s) are present: "
                f"{TORCH_CUDA_HINT}"
            )
        return (
            f"{label} is built for CUDA {probe.cuda_version} but sees no GPU: the driver may be "
            f"too old for that CUDA (update it) or the process cannot reach /dev/nvidia*"
        )
    if not probe.built_with_cuda:
        return (
            f"{label} is a CPU-only build ({fw.distribution}) but {gpus} NVIDIA GPU(s) are "
            f"present: {TF_CUDA_HINT}"
        )
    return (
        f"{label} is built with CUDA {probe.cuda_version} but sees no GPU: its CUDA/cuDNN "
        f"libraries are missing or do not match; {TF_CUDA_HINT}"
    )
