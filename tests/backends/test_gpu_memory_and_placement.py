"""GPU branches that only a fake can reach here: the CUDA and TensorFlow allocator meters and
TensorFlow's GPU placement. The fakes keep the real APIs' signatures, return types and errors:

- torch.cuda.synchronize(device=None), reset_peak_memory_stats(device=None),
  memory_allocated(device=None) -> int, max_memory_allocated(device=None) -> int
  (torch/cuda/memory.py; the peak counts since the last reset).
- tf.config.experimental.reset_memory_stats(device: str) and get_memory_info(device: str) ->
  {"current": int, "peak": int}, keyed "GPU:0" (tensorflow/python/framework/config.py).
- tf.config.set_visible_devices(devices, device_type) and
  tf.config.experimental.set_memory_growth(device, enable) raise RuntimeError once the
  runtime is initialised; list_logical_devices("GPU") then names only the visible GPUs,
  renumbered from "/device:GPU:0".
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from mpbench.backends.tensorflow import device as tf_device  # noqa: E402
from mpbench.backends.torch import backend as torch_backend  # noqa: E402


class FakeCudaAllocator:
    """Live bytes and the peak since the last reset, like the caching allocator's stats."""

    def __init__(self, live: int) -> None:
        self.live, self.peak, self.calls = live, live, []

    def synchronize(self, device=None) -> None:
        self.calls.append(("synchronize", device))

    def reset_peak_memory_stats(self, device=None) -> None:
        self.calls.append(("reset", device))
        self.peak = self.live

    def memory_allocated(self, device=None) -> int:
        return self.live

    def max_memory_allocated(self, device=None) -> int:
        return self.peak

    def allocate(self, size: int) -> None:
        self.live += size
        self.peak = max(self.peak, self.live)

    def free(self, size: int) -> None:
        self.live -= size


def test_cuda_training_memory_is_peak_minus_what_was_resident_at_the_start(monkeypatch):
    fake = FakeCudaAllocator(live=900)  # dataset + model already on the device
    fake.allocate(5_000)
    fake.free(5_000)  # a peak from before training (data loading) must not count
    for name in ("synchronize", "reset_peak_memory_stats", "memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", fake.max_memory_allocated)
    device = torch.device("cuda", 0)
    meter = torch_backend.memory_meter(device)
    assert isinstance(meter, torch_backend.CudaAllocatorMeter)
    fake.allocate(300)  # activations of one step ...
    fake.free(300)  # ... freed after it
    fake.allocate(50)  # optimizer state stays
    measured = meter.stop()
    assert (measured.start_bytes, measured.peak_bytes) == (900, 1_200)
    assert measured.training_bytes == 300
    assert measured.source == "cuda allocator"
    assert ("reset", device) in fake.calls and fake.calls[0] == ("synchronize", device)


class FakeTensorFlow:
    """tf.config as the GPU branch uses it, for a machine with two GPUs."""

    def __init__(self) -> None:
        self.physical = [
            SimpleNamespace(name="/physical_device:GPU:0", device_type="GPU"),
            SimpleNamespace(name="/physical_device:GPU:1", device_type="GPU"),
        ]
        self.visible = list(self.physical)
        self.growth: dict[str, bool] = {}
        self.initialized = False
        self.memory = {"current": 0, "peak": 0}
        experimental = SimpleNamespace(
            get_device_details=self.get_device_details,
            set_memory_growth=self.set_memory_growth,
            reset_memory_stats=self.reset_memory_stats,
            get_memory_info=self.get_memory_info,
        )
        self.config = SimpleNamespace(
            list_physical_devices=lambda kind=None: list(self.physical),
            set_visible_devices=self.set_visible_devices,
            list_logical_devices=self.list_logical_devices,
            experimental=experimental,
        )

    def get_device_details(self, device) -> dict:
        index = self.physical.index(device)
        return {"device_name": f"NVIDIA A100-SXM4-80GB #{index}", "compute_capability": (8, 0)}

    def set_visible_devices(self, devices, device_type=None) -> None:
        if self.initialized:
            raise RuntimeError("Visible devices cannot be modified after being initialized")
        self.visible = list(devices)

    def set_memory_growth(self, device, enable) -> None:
        if self.initialized:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        if device not in self.physical:
            raise ValueError(f"Unrecognized device: {device}")
        self.growth[device.name] = enable

    def list_logical_devices(self, device_type=None) -> list:
        self.initialized = True  # listing logical devices starts the runtime
        return [SimpleNamespace(name=f"/device:GPU:{i}") for i in range(len(self.visible))]

    def reset_memory_stats(self, device: str) -> None:
        if device != "GPU:0":
            raise ValueError(f"No matching devices found for '{device}'")
        self.memory["peak"] = self.memory["current"]

    def get_memory_info(self, device: str) -> dict:
        if device != "GPU:0":
            raise ValueError(f"No matching devices found for '{device}'")
        return dict(self.memory)


@pytest.fixture(autouse=True)
def no_nvml_view(fake_nvml):
    """NVML cannot be read (no driver library), whatever machine runs these tests: the fake
    TensorFlow's GPUs are then taken in its own order. On a machine with a GPU, the real
    NVML would list that GPU, and the fake's two A100s would not line up with it."""
    fake = fake_nvml()
    fake.configure(init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND)


def test_a_tensorflow_gpu_cell_sees_only_its_gpu_and_grows_its_memory():
    tf = FakeTensorFlow()
    placement = tf_device.resolve(tf, "cuda:1")
    assert tf.visible == [tf.physical[1]]
    assert tf.growth == {"/physical_device:GPU:1": True}
    # The one visible GPU is the logical /GPU:0, whatever its physical index.
    assert placement.tf_device == "/GPU:0" and placement.memory_name == "GPU:0"
    assert placement.info.name == "NVIDIA A100-SXM4-80GB #1" and placement.info.index == 1
    assert placement.compute_capability == (8, 0)


def test_a_gpu_index_tensorflow_does_not_see_is_unsupported():
    with pytest.raises(tf_device.Unsupported, match="sees 2 GPU"):
        tf_device.resolve(FakeTensorFlow(), "cuda:2")


def test_tensorflow_training_memory_comes_from_its_allocator():
    tf = FakeTensorFlow()
    placement = tf_device.resolve(tf, "cuda")
    tf.memory = {"current": 400, "peak": 7_000}  # a peak from before training
    meter = tf_device.memory_meter(tf, placement)
    tf.memory = {"current": 450, "peak": 1_000}
    measured = meter.stop()
    assert (measured.start_bytes, measured.peak_bytes, measured.training_bytes) == (400, 1_000, 600)
    assert measured.source == "tensorflow allocator"
