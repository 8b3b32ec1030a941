"""NVIDIA GPUs through NVML (the `pynvml` module of nvidia-ml-py).

NVML talks to the driver directly: no CUDA context, no framework, a few milliseconds. A
machine without the driver is normal (laptops, CPU servers), so every NVML failure becomes
an empty GPU list plus a note, never an exception. Past nvmlInit, one failing call costs one
fact, not the GPU: each call is tried on its own and what failed is kept in `GpuInfo.errors`.

MIG: a GPU in MIG mode runs no CUDA work as a whole; CUDA sees its MIG devices ("slices"),
each with its own memory and UUID. Those are read through nvmlDeviceGetMaxMigDeviceCount /
nvmlDeviceGetMigDeviceHandleByIndex (an empty slot answers NVML_ERROR_NOT_FOUND, nvml.h) and
listed under the parent with no datasheet peaks (a slice has a fraction of the SMs).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mpbench.detect.peaks import all_peaks, lookup, normalise_name
from mpbench.policies import FP8_MIN_CC

GIB = 1024**3
NO_PEAKS: dict[str, float | None] = dict.fromkeys(all_peaks(""))

# Turing parts without Tensor Cores (TU116/TU117): the GeForce 16 series, GeForce MX450/MX550
# and the TU117 workstation parts. They have compute capability 7.5 and dedicated fp16 units
# at twice the fp32 rate instead (NVIDIA GTX 1660 Ti launch material; TU116/TU117 die notes).
_NO_TENSOR_CORES = re.compile(
    r"geforce gtx 16\d\d\b.*|geforce mx[45]50\b.*|(quadro )?t(400|500|550|600|1000|1200|2000)\b.*"
)

T = TypeVar("T")


def has_tensor_cores(name: str, compute_capability: tuple[int, int] | None) -> bool | None:
    """Tensor Cores: compute capability >= 7.0, except the TU116/TU117 Turing parts."""
    if compute_capability is None:
        return None
    if compute_capability < (7, 0):
        return False
    return not (compute_capability == (7, 5) and _NO_TENSOR_CORES.fullmatch(normalise_name(name)))


@dataclass(frozen=True)
class GpuInfo:
    """One NVIDIA GPU as NVML sees it, or one MIG slice of one (then `mig_index` is set)."""

    index: int  # NVML index (nvidia-smi's order); a slice carries its parent's
    name: str
    compute_capability: tuple[int, int] | None  # None only when NVML could not say
    memory_total_bytes: int | None  # a slice: its own memory; None when NVML could not say
    peak_tflops: dict[str, float | None]  # dense datasheet peaks; None when not known
    uuid: str | None = None  # "GPU-..." (a slice: "MIG-..."), what CUDA_VISIBLE_DEVICES takes
    pci_bus_id: str | None = None  # "00000000:07:00.0"; a slice carries its parent's
    mig_mode: bool | None = None  # MIG enabled; None when the GPU has no MIG (or NVML failed)
    mig_devices: tuple[GpuInfo, ...] = ()  # the slices of a GPU in MIG mode
    mig_index: int | None = None  # a slice: its index under the parent
    gpu_instance_id: int | None = None  # a slice: for the legacy MIG-GPU-<uuid>/<gi>/<ci> form
    compute_instance_id: int | None = None
    parent_uuid: str | None = None  # a slice: the parent GPU's UUID
    errors: tuple[str, ...] = ()  # NVML calls that failed for this GPU, with NVML's words

    @property
    def is_mig_slice(self) -> bool:
        return self.mig_index is not None

    @property
    def label(self) -> str:
        return f"{self.index}" if self.mig_index is None else f"{self.index}/mig{self.mig_index}"

    @property
    def tensor_cores(self) -> bool | None:
        return has_tensor_cores(self.name, self.compute_capability)

    def _at_least(self, cc: tuple[int, int]) -> bool | None:
        return None if self.compute_capability is None else self.compute_capability >= cc

    @property
    def tf32(self) -> bool | None:
        return self._at_least((8, 0))

    @property
    def bf16(self) -> bool | None:
        return self._at_least((8, 0))

    @property
    def fp8(self) -> bool | None:
        # The policy table's rule (float8 is rated fast from here): one constant, not two.
        return self._at_least(FP8_MIN_CC)

    @property
    def capability(self) -> str | None:
        cc = self.compute_capability
        return None if cc is None else "{}.{}".format(*cc)

    @property
    def memory_total_gib(self) -> float | None:
        memory = self.memory_total_bytes
        return None if memory is None else round(memory / GIB, 1)

    def to_dict(self) -> dict:
        known = None if self.is_mig_slice else lookup(self.name)
        data = {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "compute_capability": self.capability,
            "memory_total_bytes": self.memory_total_bytes,
            "memory_total_gib": self.memory_total_gib,
            "tensor_cores": self.tensor_cores,
            "tf32": self.tf32,
            "bf16": self.bf16,
            "fp8": self.fp8,
            "peak_tflops": dict(self.peak_tflops),
            "peak_source": known.source if known else None,
            "errors": list(self.errors),
        }
        if self.is_mig_slice:
            data.update(
                mig_index=self.mig_index,
                gpu_instance_id=self.gpu_instance_id,
                compute_instance_id=self.compute_instance_id,
                parent_uuid=self.parent_uuid,
            )
        else:
            data.update(mig_mode=self.mig_mode, mig_devices=[m.to_dict() for m in self.mig_devices])
        return data


@dataclass(frozen=True)
class NvidiaDriver:
    driver_version: str | None
    cuda_driver_version: str | None  # the newest CUDA the driver supports, e.g. "12.4"

    def to_dict(self) -> dict:
        return {
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
        }


@dataclass
class NvidiaProbe:
    gpus: list[GpuInfo] = field(default_factory=list)
    driver: NvidiaDriver | None = None
    notes: list[str] = field(default_factory=list)
    unreadable: int = 0  # GPUs NVML counted but could not open


def _text(value: str | bytes) -> str:
    # nvidia-ml-py >= 11.515 returns str; older releases (and pynvml forks) return bytes.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int) -> str:
    """NVML's integer CUDA version (1000 * major + 10 * minor, e.g. 12040) as "12.4"."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def nvidia_device_files(dev_root: str | os.PathLike[str] = "/dev") -> tuple[str, ...]:
    """The /dev/nvidia<N> GPU device nodes: GPUs may be there even when NVML cannot be read
    (a container started without the NVIDIA runtime's libraries, a missing nvidia-ml-py)."""
    root = Path(dev_root)
    try:
        names = sorted(
            (p.name for p in root.iterdir() if re.fullmatch(r"nvidia\d+", p.name)),
            key=lambda name: int(name[len("nvidia") :]),
        )
    except OSError:
        return ()
    return tuple(str(root / name) for name in names)


def _no_gpu_note(pynvml, error: Exception) -> str:
    if isinstance(error, getattr(pynvml, "NVMLError_LibraryNotFound", ())):
        return "no NVIDIA driver found (NVML library not found): no NVIDIA GPU listed"
    if isinstance(error, getattr(pynvml, "NVMLError_DriverNotLoaded", ())):
        return "NVIDIA driver installed but not loaded (NVML): no NVIDIA GPU listed"
    return f"NVML could not start ({error}): no NVIDIA GPU listed"


def _read_driver(pynvml, notes: list[str]) -> NvidiaDriver:
    driver = cuda = None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError as error:
        notes.append(f"NVML: driver version unavailable ({error})")
    try:
        cuda = cuda_version_text(int(pynvml.nvmlSystemGetCudaDriverVersion()))
    except pynvml.NVMLError as error:
        notes.append(f"NVML: CUDA driver version unavailable ({error})")
    return NvidiaDriver(driver, cuda)


class _Calls:
    """Runs one NVML call at a time; a failure is written down and answered with None."""

    def __init__(self, pynvml) -> None:
        self.pynvml = pynvml
        self.errors: list[str] = []

    def get(self, what: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except self.pynvml.NVMLError as error:
            self.errors.append(f"{what}: {error}")
            return None


def _capability(value: Any) -> tuple[int, int] | None:
    return None if value is None else (int(value[0]), int(value[1]))


def _mig_enabled(pynvml, calls: _Calls, handle) -> bool | None:
    # nvmlDeviceGetMigMode answers NVML_ERROR_NOT_SUPPORTED on a GPU without MIG (nvml.h):
    # that is "no MIG", not a failure worth reporting.
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError_NotSupported:
        return None
    except pynvml.NVMLError as error:
        calls.errors.append(f"nvmlDeviceGetMigMode: {error}")
        return None
    return int(current) == int(getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1))


def _read_mig_slice(pynvml, parent_handle, k: int, parent: dict) -> GpuInfo | None:
    try:
        handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent_handle, k)
    except pynvml.NVMLError_NotFound:
        return None  # an empty slot: no MIG device was created there
    calls = _Calls(pynvml)
    name = calls.get("nvmlDeviceGetName", lambda: _text(pynvml.nvmlDeviceGetName(handle)))
    uuid = calls.get("nvmlDeviceGetUUID", lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
    memory = calls.get("nvmlDeviceGetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    gi = calls.get("nvmlDeviceGetGpuInstanceId", lambda: pynvml.nvmlDeviceGetGpuInstanceId(handle))
    ci = calls.get(
        "nvmlDeviceGetComputeInstanceId", lambda: pynvml.nvmlDeviceGetComputeInstanceId(handle)
    )
    return GpuInfo(
        index=parent["index"],
        name=name or f"{parent['name']} MIG slice {k}",
        compute_capability=parent["compute_capability"],  # the slice runs the parent's SMs
        memory_total_bytes=None if memory is None else int(memory.total),
        peak_tflops=dict(NO_PEAKS),  # datasheets give whole-GPU figures only
        uuid=uuid,
        pci_bus_id=parent["pci_bus_id"],
        mig_index=k,
        gpu_instance_id=None if gi is None else int(gi),
        compute_instance_id=None if ci is None else int(ci),
        parent_uuid=parent["uuid"],
        errors=tuple(calls.errors),
    )


def _read_mig_slices(pynvml, calls: _Calls, handle, parent: dict) -> tuple[GpuInfo, ...]:
    count = calls.get(
        "nvmlDeviceGetMaxMigDeviceCount", lambda: pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)
    )
    slices = []
    for k in range(int(count or 0)):
        try:
            found = _read_mig_slice(pynvml, handle, k, parent)
        except pynvml.NVMLError as error:
            calls.errors.append(f"nvmlDeviceGetMigDeviceHandleByIndex({k}): {error}")
            continue
        if found is not None:
            slices.append(found)
    return tuple(slices)


def read_gpu(pynvml, index: int) -> GpuInfo:
    """One GPU. Only a failing nvmlDeviceGetHandleByIndex loses it (raised to the caller)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    calls = _Calls(pynvml)
    name = calls.get("nvmlDeviceGetName", lambda: _text(pynvml.nvmlDeviceGetName(handle)))
    name = name or "unknown NVIDIA GPU"
    cc = _capability(
        calls.get(
            "nvmlDeviceGetCudaComputeCapability",
            lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle),
        )
    )
    uuid = calls.get("nvmlDeviceGetUUID", lambda: _text(pynvml.nvmlDeviceGetUUID(handle)))
    pci = calls.get("nvmlDeviceGetPciInfo", lambda: pynvml.nvmlDeviceGetPciInfo(handle))
    bus_id = None if pci is None else _text(pci.busId).upper()
    mig = _mig_enabled(pynvml, calls, handle)
    # In MIG mode the parent's memory is "aggregate information, only if the caller has
    # appropriate privileges" (NVML docs): a failure here must not lose the GPU.
    memory = calls.get("nvmlDeviceGetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle))
    parent = {"index": index, "name": name, "compute_capability": cc}
    parent.update(uuid=uuid, pci_bus_id=bus_id)
    slices = _read_mig_slices(pynvml, calls, handle, parent) if mig else ()
    return GpuInfo(
        index=index,
        name=name,
        compute_capability=cc,
        memory_total_bytes=None if memory is None else int(memory.total),
        peak_tflops=all_peaks(name),
        uuid=uuid,
        pci_bus_id=bus_id,
        mig_mode=mig,
        mig_devices=slices,
        errors=tuple(calls.errors),
    )


def probe_nvidia() -> NvidiaProbe:
    """Every NVIDIA GPU NVML can see; an empty list and a note when there is none."""
    try:
        import pynvml  # lazily: the module loads ctypes and looks for libnvidia-ml
    except ImportError:
        return NvidiaProbe(
            notes=["nvidia-ml-py is not installed (pip install nvidia-ml-py): GPUs not checked"]
        )
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return NvidiaProbe(notes=[_no_gpu_note(pynvml, error)])
    probe = NvidiaProbe()
    try:
        probe.driver = _read_driver(pynvml, probe.notes)
        count = pynvml.nvmlDeviceGetCount()
        for index in range(count):
            try:
                probe.gpus.append(read_gpu(pynvml, index))
            except pynvml.NVMLError as error:
                probe.unreadable += 1
                probe.notes.append(f"NVML: GPU {index} skipped ({error})")
    except pynvml.NVMLError as error:
        probe.notes.append(f"NVML failed while listing GPUs ({error})")
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    for gpu in probe.gpus:
        probe.notes += [f"NVML: GPU {gpu.label}: {error}" for error in gpu.errors]
        for mig in gpu.mig_devices:
            probe.notes += [f"NVML: GPU {mig.label}: {error}" for error in mig.errors]
        if gpu.mig_mode and not gpu.mig_devices:
            probe.notes.append(
                f"GPU {gpu.index} ({gpu.name}) is in MIG mode with no MIG device: CUDA cannot "
                "use it until one is created (nvidia-smi mig -cgi ... -C)"
            )
    if not probe.gpus and not probe.notes:
        probe.notes.append("NVIDIA driver loaded but NVML reports no GPU")
    return probe
