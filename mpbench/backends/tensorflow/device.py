"""Map the cell's device ("cpu", "cuda", "cuda:N") to a TensorFlow device, and read its memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpbench.backends.base import Unsupported, cpu_device_info
from mpbench.results.schema import DeviceInfo

NO_GPU = "TensorFlow sees no GPU (CPU-only build?): pip install 'tensorflow[and-cuda]'"


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
        return Placement("/CPU:0", cpu_device_info())
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
