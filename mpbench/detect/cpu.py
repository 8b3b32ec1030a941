"""The CPU: model, cores, and the instruction-set flags that decide bf16/fp16 speed.

Read from /proc/cpuinfo on Linux (the kernel's own view, also inside containers); elsewhere
the model comes from the platform and the flags are reported unknown (None), never guessed.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

PROC_CPUINFO = "/proc/cpuinfo"

# x86 flags that matter for reduced-precision math, as /proc/cpuinfo spells them.
X86_FLAGS = (
    "amx_bf16",
    "amx_tile",
    "amx_int8",
    "amx_fp16",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "avx512f",
    "avx2",
)
# Arm features with the same role (bf16 / int8 matrix multiply, half-precision SIMD, SVE).
ARM_FLAGS = ("bf16", "i8mm", "asimdhp", "sve", "sve2")

# Arm's MIDR implementer/part codes for common server cores (the kernel prints no model name).
_ARM_PARTS = {
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
    ("0x41", "0xd8e"): "ARM Neoverse-N3",
    ("0x41", "0xd84"): "ARM Neoverse-V3",
    ("0xc0", "0xac3"): "Ampere-1",
}


@dataclass(frozen=True)
class CpuInfo:
    model: str
    vendor: str | None
    architecture: str  # x86_64, aarch64, ... (from the cpuinfo format, else the platform)
    sockets: int | None
    physical_cores: int | None
    logical_cores: int | None
    flags: dict[str, bool | None]  # each flag of interest: present, absent, or unknown
    source: str  # the cpuinfo file that was read, or "platform" when there was none

    @property
    def flags_known(self) -> bool:
        return all(value is not None for value in self.flags.values())

    def present_flags(self) -> frozenset[str] | None:
        """The flags of interest this CPU has; None when they could not be read."""
        if not self.flags_known:
            return None
        return frozenset(name for name, present in self.flags.items() if present)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "vendor": self.vendor,
            "architecture": self.architecture,
            "sockets": self.sockets,
            "physical_cores": self.physical_cores,
            "logical_cores": self.logical_cores,
            "flags": dict(self.flags),
            "source": self.source,
        }


def _blocks(text: str) -> list[dict[str, str]]:
    """One dict per processor stanza (key: value lines separated by blank lines)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip().lower()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def _arm_model(block: dict[str, str]) -> str:
    implementer = block.get("cpu implementer", "?").lower()
    part = block.get("cpu part", "?").lower()
    return _ARM_PARTS.get((implementer, part), f"Arm CPU (implementer {implementer}, part {part})")


def parse_cpuinfo(text: str, source: str = PROC_CPUINFO) -> CpuInfo:
    """Parse the text of a /proc/cpuinfo (x86 or Arm)."""
    processors = [b for b in _blocks(text) if "processor" in b and b["processor"].isdigit()]
    first = processors[0] if processors else {}
    if "flags" in first:
        architecture, present = "x86_64", set(first["flags"].split())
    elif "features" in first:
        architecture, present = "aarch64", set(first["features"].split())
    else:
        architecture, present = platform.machine() or "unknown", None

    if architecture == "aarch64":
        model = first.get("model name") or _arm_model(first)
        names = (*X86_FLAGS, *ARM_FLAGS)
    else:
        model = first.get("model name") or platform.processor() or "unknown CPU"
        names = X86_FLAGS
    flags = {name: (None if present is None else name in present) for name in names}

    topology = {(b["physical id"], b["core id"]) for b in processors if "core id" in b}
    sockets = {b["physical id"] for b in processors if "physical id" in b}
    return CpuInfo(
        model=model,
        vendor=first.get("vendor_id") or first.get("cpu implementer"),
        architecture=architecture,
        sockets=len(sockets) or None,
        physical_cores=len(topology) or None,
        logical_cores=len(processors) or None,
        flags=flags,
        source=source,
    )


def _platform_model() -> str:
    """Best model name without /proc/cpuinfo (macOS gives it through sysctl)."""
    if platform.system() == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=2,
                check=False,
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _psutil_physical_cores() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return psutil.cpu_count(logical=False)


def read_cpu(path: str | os.PathLike[str] | None = None) -> CpuInfo:
    """This machine's CPU (or the cpuinfo text at `path`, for tests and other machines)."""
    live = path is None
    cpuinfo = Path(path if path is not None else PROC_CPUINFO)
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        text = None
    if text is None or not text.strip():
        return CpuInfo(
            model=_platform_model(),
            vendor=None,
            architecture=platform.machine() or "unknown",
            sockets=None,
            physical_cores=_psutil_physical_cores(),
            logical_cores=os.cpu_count(),
            flags=dict.fromkeys(X86_FLAGS),
            source="platform",
        )
    info = parse_cpuinfo(text, source=str(cpuinfo))
    if live and info.physical_cores is None:
        # Some kernels (most Arm ones) print no core topology; psutil reads it from sysfs.
        info = replace(info, physical_cores=_psutil_physical_cores())
    return info
