"""Turn what the probes found into device entries rated by mpbench.policies.

The rules themselves live in policies.py (shared with `run`); this module only says which
traits each kind of device has and what identifies its hardware for the fingerprint.
"""

from __future__ import annotations

from dataclasses import replace

from mpbench.detect.cpu import CpuInfo
from mpbench.detect.frameworks import FrameworkInfo, ProbedDevice
from mpbench.detect.gpu import GIB, GpuInfo, has_tensor_cores
from mpbench.detect.report import DeviceEntry, fingerprint, mps_identity
from mpbench.detect.tpu import TpuInfo
from mpbench.policies import FRAMEWORKS, DeviceTraits, MeasuredStep, rate_all, recommend

MPS_NAME = "Apple GPU (MPS)"


def _entry(
    traits: DeviceTraits,
    index: int | None,
    identity: dict,
    source: str,
    uuid: str | None = None,
    mig_index: int | None = None,
) -> DeviceEntry:
    entry = DeviceEntry(
        index=index,
        traits=traits,
        ratings=rate_all(traits),
        recommendation=recommend(traits),
        fingerprint=fingerprint({"kind": traits.kind, **identity}),
        source=source,
        uuid=uuid,
        mig_index=mig_index,
    )
    return rated(entry, list(FRAMEWORKS))


def rated(
    entry: DeviceEntry, frameworks: list[str], measured: list[MeasuredStep] | None = None
) -> DeviceEntry:
    """The entry rated for `frameworks` (the installed ones; none: both) with the device's
    measured steps: each framework's ratings, the device-level view, the recommendation."""
    traits, steps = entry.traits, list(measured or ())
    names = frameworks or list(FRAMEWORKS)
    return replace(
        entry,
        ratings=rate_all(traits, None, steps),
        framework_ratings={name: rate_all(traits, name, steps) for name in names},
        recommendation=recommend(traits, names, steps),
        measured_steps=tuple(steps),
    )


def _gib(memory_bytes: int | None) -> int | None:
    # Whole GiB: the exact byte count moves a little with driver reservations and ECC mode.
    return None if memory_bytes is None else round(memory_bytes / GIB)


def cpu_entry(cpu: CpuInfo) -> DeviceEntry:
    flags = cpu.present_flags()
    traits = DeviceTraits(kind="cpu", name=cpu.model, cpu_flags=flags)
    identity = {
        "model": cpu.model,
        "logical_cores": cpu.logical_cores,
        "flags": sorted(flags) if flags is not None else None,
    }
    source = "platform" if cpu.source == "platform" else "cpuinfo"
    return _entry(traits, None, identity, source)


def gpu_entry(gpu: GpuInfo) -> DeviceEntry:
    """A GPU, or one MIG slice of one (its name says the profile, e.g. "... MIG 3g.40gb")."""
    traits = DeviceTraits(
        kind="cuda",
        name=gpu.name,
        compute_capability=gpu.compute_capability,
        tensor_cores=gpu.tensor_cores,
    )
    identity = {
        "name": gpu.name,
        "compute_capability": gpu.capability,
        "memory_gib": _gib(gpu.memory_total_bytes),
    }
    return _entry(traits, gpu.index, identity, "nvml", gpu.uuid, gpu.mig_index)


def gpu_entries(gpus: list[GpuInfo]) -> list[DeviceEntry]:
    """What can run a cell: each GPU, except that a GPU in MIG mode is replaced by its slices
    (CUDA cannot use a MIG-mode GPU as a whole)."""
    entries = []
    for gpu in gpus:
        if gpu.mig_mode:
            entries += [gpu_entry(mig) for mig in gpu.mig_devices]
        else:
            entries.append(gpu_entry(gpu))
    return entries


def tpu_entry(tpu: TpuInfo) -> DeviceEntry:
    traits = DeviceTraits(kind="tpu", name=tpu.name)
    identity = {"type": tpu.accelerator_type or tpu.generation, "chips": tpu.chips}
    return _entry(traits, None, identity, "tpu")


def _probed_gpu_entry(kind: str, device: ProbedDevice) -> DeviceEntry:
    cc = device.compute_capability if kind == "cuda" else None
    tensor_cores = has_tensor_cores(device.name, cc) if kind == "cuda" else None
    traits = DeviceTraits(
        kind=kind, name=device.name, compute_capability=cc, tensor_cores=tensor_cores
    )
    identity = {
        "name": device.name,
        "compute_capability": "{}.{}".format(*cc) if cc else None,
        "arch": device.arch,
        "memory_gib": _gib(device.memory_total_bytes),
    }
    return _entry(traits, device.index, identity, "torch probe")


def probed_entries(
    frameworks: list[FrameworkInfo], cpu: CpuInfo, nvml_gpus: int
) -> list[DeviceEntry]:
    """Devices only a framework can show: Apple MPS, AMD ROCm, and CUDA GPUs NVML missed."""
    torch = next((f for f in frameworks if f.name == "torch"), None)
    probe = torch.probe if torch else None
    if probe is None or not probe.ok:
        return []
    entries = []
    if probe.hip_version:
        entries += [_probed_gpu_entry("rocm", d) for d in probe.devices]
    elif probe.cuda_available and nvml_gpus == 0:
        entries += [_probed_gpu_entry("cuda", d) for d in probe.devices]
    if probe.mps_available:
        traits = DeviceTraits(kind="mps", name=MPS_NAME)
        identity = {k: v for k, v in mps_identity(cpu).items() if k != "kind"}
        entries.append(_entry(traits, None, identity, "torch probe"))
    return entries


def build_devices(
    cpu: CpuInfo, gpus: list[GpuInfo], tpu: TpuInfo | None, frameworks: list[FrameworkInfo]
) -> list[DeviceEntry]:
    """Accelerators first (in index order), then the TPU, then the CPU."""
    devices = gpu_entries(gpus)
    devices += probed_entries(frameworks, cpu, len(gpus))
    if tpu is not None:
        devices.append(tpu_entry(tpu))
    devices.append(cpu_entry(cpu))
    return devices
