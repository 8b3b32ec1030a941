"""The detect report: plain dataclasses, a JSON form (docs/detect.md), device look-ups."""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import dataclass, field

from mpbench.detect.cpu import CpuInfo
from mpbench.detect.frameworks import FrameworkInfo
from mpbench.detect.gpu import GpuInfo, NvidiaDriver
from mpbench.detect.tpu import TpuInfo
from mpbench.policies import DeviceTraits, PolicyRating, Recommendation

SCHEMA_VERSION = 1


def fingerprint(identity: dict) -> str:
    """Short stable hash of what identifies a piece of hardware (no software versions)."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DeviceEntry:
    """One device that can run a cell, with what each precision policy does on it."""

    index: int | None  # GPU index; None for the CPU and the TPU
    traits: DeviceTraits
    ratings: list[PolicyRating]
    recommendation: Recommendation
    fingerprint: str
    source: str  # who found it: nvml, /proc/cpuinfo, platform, tpu, torch probe

    @property
    def kind(self) -> str:
        return self.traits.kind

    @property
    def name(self) -> str:
        return self.traits.name

    @property
    def label(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def to_dict(self) -> dict:
        cc = self.traits.compute_capability
        flags = self.traits.cpu_flags
        return {
            "kind": self.kind,
            "index": self.index,
            "name": self.name,
            "compute_capability": "{}.{}".format(*cc) if cc else None,
            "cpu_flags": sorted(flags) if flags is not None else None,
            "fingerprint": self.fingerprint,
            "source": self.source,
            "ratings": [
                {"policy": r.policy, "rating": r.rating.value, "reason": r.reason}
                for r in self.ratings
            ],
            "recommendation": {
                "policy": self.recommendation.policy,
                "reason": self.recommendation.reason,
            },
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

    def device(self, kind: str, index: int | None = None) -> DeviceEntry | None:
        """The entry for ("cuda", 0), ("cpu"), "cuda:1", ...; index None = the first of a kind."""
        if index is None and ":" in kind:
            kind, _, number = kind.partition(":")
            index = int(number) if number.isdigit() else None
        for entry in self.devices:
            if entry.kind == kind and (index is None or entry.index == index):
                return entry
        return None

    def device_traits(self, kind: str, index: int | None = None) -> DeviceTraits | None:
        entry = self.device(kind, index)
        return entry.traits if entry else None

    def hardware_fingerprint(self, kind: str, index: int | None = None) -> str:
        """Identifies the hardware a result was measured on; stable across framework upgrades."""
        entry = self.device(kind, index)
        if entry is None:
            where = kind if index is None else f"{kind}:{index}"
            raise LookupError(f"no {where} device was detected on this machine")
        return entry.fingerprint

    def framework(self, name: str) -> FrameworkInfo | None:
        return next((f for f in self.frameworks if f.name == name), None)

    def to_dict(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "mpbench_version": self.mpbench_version,
            "probed": self.probed,
            "host": self.host.to_dict(),
            "cpu": self.cpu.to_dict(),
            "nvidia_driver": self.nvidia_driver.to_dict() if self.nvidia_driver else None,
            "gpus": [g.to_dict() for g in self.gpus],
            "tpu": self.tpu.to_dict() if self.tpu else None,
            "frameworks": [f.to_dict() for f in self.frameworks],
            "devices": [d.to_dict() for d in self.devices],
            "notes": list(self.notes),
        }
