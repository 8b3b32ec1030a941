"""The detect report: plain dataclasses, a JSON form (docs/detect.md), device look-ups."""

from __future__ import annotations

import hashlib
import json
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mpbench.detect.cpu import CpuInfo
from mpbench.detect.cuda_order import CudaMapping, cuda_mapping
from mpbench.detect.frameworks import FrameworkInfo
from mpbench.detect.gpu import GpuInfo, NvidiaDriver
from mpbench.detect.tpu import TpuInfo
from mpbench.policies import DeviceTraits, MeasuredStep, PolicyRating, Recommendation

SCHEMA_VERSION = 1


# The environment variables that decide which GPU "cuda:N" is (mpbench.detect.cuda_order).
CUDA_ENVIRONMENT = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")


def fingerprint(identity: dict) -> str:
    """Short stable hash of what identifies a piece of hardware (no software versions)."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def mps_identity(cpu: CpuInfo) -> dict:
    # The Apple GPU is part of the SoC, which the CPU model names (e.g. "Apple M2 Max").
    return {"kind": "mps", "soc": cpu.model}


@dataclass(frozen=True)
class DeviceEntry:
    """One device that can run a cell, with what each precision policy does on it."""

    index: int | None  # GPU index; None for the CPU and the TPU
    traits: DeviceTraits
    ratings: list[PolicyRating]
    recommendation: Recommendation
    fingerprint: str
    source: str  # who found it: nvml, /proc/cpuinfo, platform, tpu, torch probe
    uuid: str | None = None  # NVIDIA: the NVML UUID ("GPU-..." or "MIG-...")
    mig_index: int | None = None  # a MIG slice: its index under the GPU `index`
    # Each installed framework's ratings (torch, tensorflow); `ratings` is the device-level
    # view of them (mpbench.policies.rate with no framework).
    framework_ratings: dict[str, list[PolicyRating]] = field(default_factory=dict)
    # The measured steps the ratings were given from (detect --measure's cache).
    measured_steps: tuple[MeasuredStep, ...] = ()

    @property
    def kind(self) -> str:
        return self.traits.kind

    @property
    def name(self) -> str:
        return self.traits.name

    @property
    def label(self) -> str:
        if self.index is None:
            return self.kind
        if self.mig_index is not None:
            return f"{self.kind}:{self.index}/mig{self.mig_index}"
        return f"{self.kind}:{self.index}"

    def to_dict(self) -> dict:
        cc = self.traits.compute_capability
        flags = self.traits.cpu_flags
        return {
            "kind": self.kind,
            "index": self.index,
            "mig_index": self.mig_index,
            "uuid": self.uuid,
            "name": self.name,
            "compute_capability": "{}.{}".format(*cc) if cc else None,
            "cpu_flags": sorted(flags) if flags is not None else None,
            "fingerprint": self.fingerprint,
            "source": self.source,
            "ratings": [_rating_dict(r) for r in self.ratings],
            "framework_ratings": {
                name: [_rating_dict(r) for r in ratings]
                for name, ratings in self.framework_ratings.items()
            },
            "measured_steps": [dict(step.__dict__) for step in self.measured_steps],
            "recommendation": {
                "policy": self.recommendation.policy,
                "reason": self.recommendation.reason,
            },
        }


def _rating_dict(rating: PolicyRating) -> dict:
    return {
        "policy": rating.policy,
        "rating": rating.rating.value,
        "reason": rating.reason,
        "source": rating.source,
    }


@dataclass(frozen=True)
class HostInfo:
    os: str
    os_release: str
    machine: str
    python: str

    @classmethod
    def current(cls) -> HostInfo:
        return cls(
            platform.system(), platform.release(), platform.machine(), platform.python_version()
        )

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class DetectReport:
    mpbench_version: str
    host: HostInfo
    cpu: CpuInfo
    gpus: list[GpuInfo]
    nvidia_driver: NvidiaDriver | None
    tpu: TpuInfo | None
    frameworks: list[FrameworkInfo]
    devices: list[DeviceEntry]
    notes: list[str] = field(default_factory=list)
    probed: bool = False
    schema_version: int = SCHEMA_VERSION
    # /dev/nvidia<N> nodes found: GPUs may be there even when NVML listed none.
    nvidia_device_files: list[str] = field(default_factory=list)
    nvml_unreadable: int = 0  # GPUs NVML counted but could not open
    # CUDA_DEVICE_ORDER / CUDA_VISIBLE_DEVICES as detect saw them (the default for look-ups).
    cuda_environment: dict[str, str] = field(default_factory=dict)
    measured: dict | None = None  # `detect --measure`: mpbench.detect.measure's result
    # `detect --measure`: each framework's measured step (mpbench.detect.steps.measure_steps)
    measured_steps: dict | None = None
    tuning: Any = None  # mpbench.detect.system.TuningState, when collect(tuning=True)

    # --- NVIDIA: what CUDA index N means ---

    @property
    def nvidia_device_files_present(self) -> bool:
        return bool(self.nvidia_device_files)

    @property
    def nvml_blind(self) -> bool:
        """NVIDIA device files exist but NVML listed no GPU: `auto` would fall back to the
        CPU although a GPU may be there (a container without libnvidia-ml, no nvidia-ml-py)."""
        return self.nvidia_device_files_present and not self.gpus

    def cuda_mapping(self, env: Mapping[str, str] | None = None) -> CudaMapping:
        """The NVML GPUs CUDA numbers 0, 1, ... in a process started with `env` (default: the
        environment detect ran in), assuming CUDA_DEVICE_ORDER=PCI_BUS_ID when it is unset
        (mpbench sets it in every cell); `.gpus` is None and `.note` says why when that cannot
        be known (another CUDA_DEVICE_ORDER, a MIG GPU not named by UUID, ...)."""
        env = self.cuda_environment if env is None else env
        return cuda_mapping(self.gpus, env, self.nvml_unreadable)

    def gpu_for_cuda_index(
        self, index: int, env: Mapping[str, str] | None = None
    ) -> GpuInfo | None:
        """The NVML GPU (or MIG slice) that CUDA device `index` is; None when there is none
        or it cannot be told (see cuda_mapping)."""
        return self.cuda_mapping(env).get(index)

    def _nvml_entries(self) -> list[DeviceEntry]:
        return [e for e in self.devices if e.kind == "cuda" and e.source == "nvml"]

    def _entry_for(self, gpu: GpuInfo) -> DeviceEntry | None:
        for entry in self._nvml_entries():
            if gpu.uuid and entry.uuid == gpu.uuid:
                return entry
            if not gpu.uuid and (entry.index, entry.mig_index) == (gpu.index, gpu.mig_index):
                return entry
        return None

    def _interchangeable(self, index: int) -> DeviceEntry | None:
        # Which GPU cuda:N is cannot be told, but if every device CUDA could mean is the same
        # part, they share traits and fingerprint: any of them answers for all.
        candidates = self._nvml_entries()
        if 0 <= index < len(candidates) and len({e.fingerprint for e in candidates}) == 1:
            return candidates[0]
        return None

    # --- look-ups by device ---

    def device(
        self, kind: str, index: int | None = None, env: Mapping[str, str] | None = None
    ) -> DeviceEntry | None:
        """The entry for ("cuda", 0), ("cpu"), "cuda:1", ...; index None = the first of a kind.

        For "cuda" the index is CUDA's (what `--device cuda:N` and torch mean), mapped to the
        NVML GPU through cuda_mapping(env); other kinds use the index the entry was listed
        with."""
        if index is None and ":" in kind:
            kind, _, number = kind.partition(":")
            index = int(number) if number.isdigit() else None
        if kind == "cuda" and self._nvml_entries():
            wanted = 0 if index is None else index
            mapping = self.cuda_mapping(env)
            gpu = mapping.get(wanted)
            if gpu is not None:
                return self._entry_for(gpu)
            return None if mapping.known else self._interchangeable(wanted)
        for entry in self.devices:
            if entry.kind == kind and (index is None or entry.index == index):
                return entry
        return None

    def device_traits(
        self, kind: str, index: int | None = None, env: Mapping[str, str] | None = None
    ) -> DeviceTraits | None:
        entry = self.device(kind, index, env)
        return entry.traits if entry else None

    def hardware_fingerprint(
        self,
        kind: str,
        index: int | None = None,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Identifies the hardware a result was measured on; stable across framework upgrades.

        Never raises: a device detect did not see (MPS without --probe, CUDA in a container
        without NVML, ROCm, an unmappable MIG slice, ...) gets undetected_fingerprint."""
        entry = self.device(kind, index, env)
        if entry is not None:
            return entry.fingerprint
        return self.undetected_fingerprint(kind, name)

    def undetected_fingerprint(self, kind: str, name: str | None = None) -> str:
        """A stable fingerprint for a device detect could not list: its kind, the name the
        caller knows it by (or "undetected") and the host CPU, so runs on the same machine
        compare. MPS gets the same fingerprint as when a --probe lists it."""
        if kind == "mps":
            return fingerprint(mps_identity(self.cpu))
        return fingerprint(
            {
                "kind": kind,
                "name": name or "undetected",
                "detected": False,
                "host_cpu": self.cpu.model,
                "host_logical_cores": self.cpu.logical_cores,
            }
        )

    def framework(self, name: str) -> FrameworkInfo | None:
        return next((f for f in self.frameworks if f.name == name), None)

    def _gpus_dict(self, mapping: CudaMapping) -> list[dict]:
        position = {id(g): i for i, g in enumerate(mapping.gpus or ())}
        out = []
        for gpu in self.gpus:
            data = gpu.to_dict()
            data["cuda_index"] = position.get(id(gpu))
            for mig_data, mig in zip(data["mig_devices"], gpu.mig_devices, strict=True):
                mig_data["cuda_index"] = position.get(id(mig))
            out.append(data)
        return out

    def _devices_dict(self, mapping: CudaMapping) -> list[dict]:
        by_entry = {}
        for i, gpu in enumerate(mapping.gpus or ()):
            entry = self._entry_for(gpu)
            if entry is not None:
                by_entry[id(entry)] = i
        out = []
        for entry in self.devices:
            data = entry.to_dict()
            data["cuda_index"] = None
            if entry.source == "nvml":
                data["cuda_index"] = by_entry.get(id(entry))
            elif entry.kind == "cuda":  # listed by the torch probe: torch's own numbering
                data["cuda_index"] = entry.index
            out.append(data)
        return out

    def to_dict(self) -> dict:
        mapping = self.cuda_mapping()
        return {
            "schema_version": self.schema_version,
            "mpbench_version": self.mpbench_version,
            "probed": self.probed,
            "host": self.host.to_dict(),
            "cpu": self.cpu.to_dict(),
            "nvidia_driver": self.nvidia_driver.to_dict() if self.nvidia_driver else None,
            "nvidia_device_files": list(self.nvidia_device_files),
            "gpus": self._gpus_dict(mapping),
            "cuda_mapping": {
                "environment": dict(self.cuda_environment),
                "known": mapping.known,
                "note": mapping.note,
            },
            "tpu": self.tpu.to_dict() if self.tpu else None,
            "frameworks": [f.to_dict() for f in self.frameworks],
            "devices": self._devices_dict(mapping),
            "measured": self.measured,
            "measured_steps": self.measured_steps,
            "tuning": self.tuning.to_dict() if self.tuning is not None else None,
            "notes": list(self.notes),
        }
