"""NVIDIA GPUs through NVML (the `pynvml` module of nvidia-ml-py).

NVML talks to the driver directly: no CUDA context, no framework, a few milliseconds. A
machine without the driver is normal (laptops, CPU servers), so every NVML failure becomes
an empty GPU list plus a note, never an exception.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from mpbench.detect.peaks import all_peaks, lookup

GIB = 1024**3


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_total_bytes: int
    peak_tflops: dict[str, float | None]  # dense datasheet peaks; None when not known

    @property
    def tensor_cores(self) -> bool:
        return self.compute_capability >= (7, 0)

    @property
    def tf32(self) -> bool:
        return self.compute_capability >= (8, 0)

    @property
    def bf16(self) -> bool:
        return self.compute_capability >= (8, 0)

    @property
    def fp8(self) -> bool:
        return self.compute_capability >= (8, 9)

    @property
    def capability(self) -> str:
        return "{}.{}".format(*self.compute_capability)

    @property
    def memory_total_gib(self) -> float:
        return round(self.memory_total_bytes / GIB, 1)

    def to_dict(self) -> dict:
        known = lookup(self.name)
        return {
            "index": self.index,
            "name": self.name,
            "compute_capability": self.capability,
            "memory_total_bytes": self.memory_total_bytes,
            "memory_total_gib": self.memory_total_gib,
            "tensor_cores": self.tensor_cores,
            "tf32": self.tf32,
            "bf16": self.bf16,
            "fp8": self.fp8,
            "peak_tflops": dict(self.peak_tflops),
            "peak_source": known.source if known else None,
        }


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


def _text(value: str | bytes) -> str:
    # nvidia-ml-py >= 11.515 returns str; older releases (and pynvml forks) return bytes.
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int) -> str:
    """NVML's integer CUDA version (1000 * major + 10 * minor, e.g. 12040) as "12.4"."""
    return f"{version // 1000}.{(version % 1000) // 10}"


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


def _read_gpu(pynvml, index: int) -> GpuInfo:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(pynvml.nvmlDeviceGetName(handle))
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return GpuInfo(
        index=index,
        name=name,
        compute_capability=(int(major), int(minor)),
        memory_total_bytes=int(memory.total),
        peak_tflops=all_peaks(name),
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
                probe.gpus.append(_read_gpu(pynvml, index))
            except pynvml.NVMLError as error:
                probe.notes.append(f"NVML: GPU {index} skipped ({error})")
    except pynvml.NVMLError as error:
        probe.notes.append(f"NVML failed while listing GPUs ({error})")
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
    if not probe.gpus and not probe.notes:
        probe.notes.append("NVIDIA driver loaded but NVML reports no GPU")
    return probe
