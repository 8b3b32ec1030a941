"""Map the cell's device ("cpu", "cuda", "cuda:N") to a TensorFlow device, and read its memory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpbench.backends.base import Unsupported
from mpbench.results.schema import DeviceInfo

NO_GPU = "TensorFlow sees no GPU (CPU-only build?): pip install 'tensorflow[and-cuda]'"

# CPU flags that decide how fast the reduced-precision policies run (DESIGN.md §2).
_PRECISION_FLAGS = ("avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")


@dataclass(frozen=True)
class Placement:
    tf_device: str  # "/CPU:0" or "/GPU:N": the scope everything is built and run under
    info: DeviceInfo
    compute_capability: tuple[int, int] | None = None  # NVIDIA GPUs only

    @property
    def is_gpu(self) -> bool:
        return self.tf_device.startswith("/GPU")

    @property
    def memory_name(self) -> str:
        """The name tf.config.experimental's memory functions take ("GPU:0")."""
        return self.tf_device.lstrip("/")


def _cpu_info() -> DeviceInfo:
    name, flags = "cpu", set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name == "cpu":
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    found = [f for f in _PRECISION_FLAGS if f in flags]
    return DeviceInfo(kind="cpu", name=name, capability=",".join(found) or None)


def _gpu_index(device: str) -> int:
    _, _, index = device.partition(":")
    if not index:
        return 0
    if not index.isdigit():
        raise Unsupported(f"unrecognised CUDA device {device!r} (expected cuda or cuda:N)")
    return int(index)


def resolve(tf: Any, device: str) -> Placement:
    """The TensorFlow placement for the cell's device; Unsupported where TF cannot run it."""
    kind = device.split(":", 1)[0].lower()
    if kind == "cpu":
        return Placement("/CPU:0", _cpu_info())
    if kind != "cuda":
        raise Unsupported(f"the TensorFlow backend runs on cpu or cuda, not {device!r}")
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise Unsupported(NO_GPU)
    index = _gpu_index(device)
    if index >= len(gpus):
        raise Unsupported(f"TensorFlow sees {len(gpus)} GPU(s); {device!r} is not one of them")
    details = tf.config.experimental.get_device_details(gpus[index])
    capability = details.get("compute_capability")  # absent on ROCm builds
    info = DeviceInfo(
        kind="cuda",
        name=details.get("device_name", gpus[index].name),
        capability=f"{capability[0]}.{capability[1]}" if capability else None,
        index=index,
    )
    return Placement(f"/GPU:{index}", info, tuple(capability) if capability else None)


def reset_peak_memory(tf: Any, placement: Placement) -> None:
    if placement.is_gpu:
        tf.config.experimental.reset_memory_stats(placement.memory_name)


def peak_memory_bytes(tf: Any, placement: Placement) -> int | None:
    """Peak bytes TensorFlow's allocator held on the GPU since the last reset (None on CPU)."""
    if not placement.is_gpu:
        return None
    return int(tf.config.experimental.get_memory_info(placement.memory_name)["peak"])
