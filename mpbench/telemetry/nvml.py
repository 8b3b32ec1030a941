"""The cell's GPU as NVML sees it, for everything in telemetry that reads NVML: which GPU
"cuda:N" is in this process (detect's mapping rules), and one open handle with its own
nvmlInit, released by close(). The energy meter and the device sampler each open their own
(NVML's init is reference-counted); the TensorFlow backend asks for the mapping alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mpbench.detect.cuda_order import CudaMapping, cuda_mapping
from mpbench.detect.gpu import GpuInfo, read_gpu


@dataclass
class NvmlDevice:
    """An open NVML handle for a cell's GPU; NVML stays initialised until close()."""

    pynvml: Any
    handle: Any
    gpu: GpuInfo
    _open: bool = True

    def close(self) -> None:
        # nvmlInit/nvmlShutdown are reference-counted: this releases only our own init.
        if self._open:
            self._open = False
            with contextlib.suppress(self.pynvml.NVMLError):
                self.pynvml.nvmlShutdown()


def cuda_index(device: str) -> int | None:
    """N of "cuda:N" ("cuda" is 0); None for any other device."""
    kind, _, number = device.partition(":")
    if kind != "cuda":
        return None
    return int(number) if number.isdigit() else (0 if not number else None)


def _absent(pynvml: Any, error: Exception) -> bool:
    """NVML is not there at all (no driver library, driver not loaded), not merely failing."""
    kinds = tuple(
        getattr(pynvml, name)
        for name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
        if hasattr(pynvml, name)
    )
    return isinstance(error, kinds)


@dataclass(frozen=True)
class NvmlUnavailable:
    """Why a cuda device has no NVML handle; `absent`: no NVML at all on this machine."""

    reason: str
    absent: bool = False


def _handle(pynvml: Any, gpu: GpuInfo) -> Any:
    if gpu.uuid:  # a UUID names a MIG slice too, and does not depend on enumeration order
        return pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
    parent = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
    if gpu.mig_index is None:
        return parent
    return pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, gpu.mig_index)


def open_nvml_device(
    device: str, nvml: Any = None, env: Mapping[str, str] | None = None
) -> NvmlDevice | NvmlUnavailable:
    """The NVML handle of "cuda:N" as this process's CUDA numbers it, or why there is none.

    cuda:N is mapped to an NVML GPU with detect's rules (CUDA_DEVICE_ORDER,
    CUDA_VISIBLE_DEVICES, MIG), since NVML numbers GPUs in PCI bus order and ignores
    CUDA_VISIBLE_DEVICES. `nvml`: a pynvml module to use instead of importing it. Never raises.
    """
    index = cuda_index(device)
    if index is None:
        return NvmlUnavailable(f"{device} is not an NVIDIA GPU")
    if nvml is None:
        try:
            import pynvml as nvml  # lazily: it loads ctypes and looks for libnvidia-ml
        except ImportError:
            return NvmlUnavailable("nvidia-ml-py is not installed", absent=True)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        return NvmlUnavailable(f"NVML could not start ({error})", absent=_absent(nvml, error))
    try:
        mapping = _mapping(nvml, env)
        gpu = mapping.get(index)
        if gpu is None:
            reason = mapping.note or f"NVML lists no GPU that CUDA numbers {index}"
        else:
            return NvmlDevice(nvml, _handle(nvml, gpu), gpu)
    except nvml.NVMLError as error:
        reason = f"NVML could not open {device} ({error})"
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()
    return NvmlUnavailable(f"{device}: {reason}")


def _mapping(nvml: Any, env: Mapping[str, str] | None) -> CudaMapping:
    """What CUDA numbers 0, 1, ... in `env` (this process's by default); NVML initialised."""
    gpus: list[GpuInfo] = []
    unreadable = 0
    for number in range(nvml.nvmlDeviceGetCount()):
        try:
            gpus.append(read_gpu(nvml, number))
        except nvml.NVMLError:
            unreadable += 1
    return cuda_mapping(gpus, os.environ if env is None else env, unreadable)


def nvml_cuda_mapping(nvml: Any = None, env: Mapping[str, str] | None = None) -> CudaMapping:
    """The GPUs this process's CUDA numbers 0, 1, ..., as NVML sees them; an unknown mapping
    (with the reason) where NVML cannot tell. Starts no CUDA context. Never raises."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return CudaMapping(None, "nvidia-ml-py is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        return CudaMapping(None, f"NVML could not start ({error})")
    try:
        return _mapping(nvml, env)
    except nvml.NVMLError as error:
        return CudaMapping(None, f"NVML could not list the GPUs ({error})")
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()
