"""Cloud TPU chips attached to this VM, found without importing JAX or TensorFlow.

TPU VMs expose each chip as /dev/accel<N> (v2-v5p) or as a numeric VFIO group
/dev/vfio/<N> (v5e, v6e with the newer runtime), and the runtime sets TPU_ACCELERATOR_TYPE
(e.g. "v5litepod-8") and TPU_NAME. VFIO groups also appear for any PCI passthrough device
(NICs, GPUs), so they count only when a Google TPU PCI function is present or the TPU
environment says so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

_GOOGLE_PCI_VENDOR = "0x1ae0"
# PCI device ids of TPU generations (as JAX's hardware_utils lists them).
_TPU_PCI_DEVICES = {
    "0x0027": "v2/v3",
    "0x005e": "v4",
    "0x0062": "v5p",
    "0x0063": "v5e",
    "0x006f": "v6e",
}
_ACCEL = re.compile(r"accel\d+")


@dataclass(frozen=True)
class TpuInfo:
    accelerator_type: str | None  # TPU_ACCELERATOR_TYPE, e.g. "v4-8", "v5litepod-8"
    tpu_name: str | None  # TPU_NAME
    generation: str | None  # from the PCI device id, e.g. "v5e"
    chips: int  # device files found on this VM (0 when only the environment says TPU)
    device_files: tuple[str, ...]
    evidence: tuple[str, ...]  # what made us say "TPU", in words

    @property
    def name(self) -> str:
        label = self.accelerator_type or self.generation
        return f"Cloud TPU {label}" if label else "Cloud TPU"

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "accelerator_type": self.accelerator_type,
            "tpu_name": self.tpu_name,
            "generation": self.generation,
            "chips": self.chips,
            "device_files": list(self.device_files),
            "evidence": list(self.evidence),
        }


@dataclass
class TpuProbe:
    tpu: TpuInfo | None = None
    notes: list[str] = field(default_factory=list)


def _accel_files(dev: Path) -> list[Path]:
    # /dev/accel<N> character devices. Not the /dev/accel/ directory: that is the Linux
    # compute-accelerator subsystem (Intel NPU, Habana), not a TPU.
    try:
        return sorted(p for p in dev.iterdir() if _ACCEL.fullmatch(p.name) and not p.is_dir())
    except OSError:
        return []


def _vfio_groups(dev: Path) -> list[Path]:
    try:
        return sorted(p for p in (dev / "vfio").iterdir() if p.name.isdigit())
    except OSError:
        return []


def _tpu_pci_generations(sys_root: Path) -> list[str]:
    found = []
    devices = sys_root / "bus" / "pci" / "devices"
    try:
        entries = sorted(devices.iterdir())
    except OSError:
        return found
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text().strip().lower()
            device = (entry / "device").read_text().strip().lower()
        except OSError:
            continue
        if vendor == _GOOGLE_PCI_VENDOR and device in _TPU_PCI_DEVICES:
            found.append(_TPU_PCI_DEVICES[device])
    return found


def probe_tpu(
    dev_root: str | os.PathLike[str] = "/dev",
    sys_root: str | os.PathLike[str] = "/sys",
    environ: Mapping[str, str] | None = None,
) -> TpuProbe:
    env = os.environ if environ is None else environ
    dev, sysfs = Path(dev_root), Path(sys_root)
    accel, vfio = _accel_files(dev), _vfio_groups(dev)
    pci = _tpu_pci_generations(sysfs)
    accelerator_type = env.get("TPU_ACCELERATOR_TYPE") or None
    tpu_name = env.get("TPU_NAME") or None

    evidence = []
    if accel:
        evidence.append(f"{len(accel)} /dev/accel* device(s)")
    if pci:
        evidence.append(f"{len(pci)} Google TPU PCI function(s)")
    if accelerator_type:
        evidence.append(f"TPU_ACCELERATOR_TYPE={accelerator_type}")
    if tpu_name:
        evidence.append(f"TPU_NAME={tpu_name}")
    vfio_counts = bool(vfio) and bool(pci or accelerator_type or tpu_name)
    if vfio_counts:
        evidence.append(f"{len(vfio)} numeric /dev/vfio group(s)")

    probe = TpuProbe()
    if not evidence:
        if vfio:
            probe.notes.append(
                f"{len(vfio)} VFIO group(s) under {dev / 'vfio'} but no Google TPU PCI device "
                "or TPU environment: not counted as a TPU (other passthrough devices use VFIO too)"
            )
        return probe
    files = accel or (vfio if vfio_counts else [])
    probe.tpu = TpuInfo(
        accelerator_type=accelerator_type,
        tpu_name=tpu_name,
        generation=pci[0] if pci else None,
        chips=len(files) or len(pci),
        device_files=tuple(str(p) for p in files),
        evidence=tuple(evidence),
    )
    if not files and not pci:
        probe.notes.append(
            "TPU environment variables are set but no TPU device file is visible on this VM"
        )
    return probe
