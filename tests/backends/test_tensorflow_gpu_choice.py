"""Which GPU a TensorFlow cell trains on, on fakes of TensorFlow and of NVML (no GPU here).

- TensorFlow lists the GPUs CUDA numbers but leaves out those it will not use, so its GPU N
  need not be cuda:N; NVML (tests/fakes/pynvml_fake.py) says what CUDA numbers, and the cell
  must train on the board telemetry and energy read, or refuse.
- A data-parallel cell runs its replicas from cuda:0; a cuda:N request is refused rather than
  recorded as cuda:N while replica 0 runs on cuda:0 (torch's ranks likewise).
- TensorFlow's allocator without statistics (TF_GPU_ALLOCATOR=cuda_malloc_async built without
  them) makes the cell Unsupported, never a made-up memory figure.

The tf fake keeps the real signatures: list_physical_devices("GPU") -> PhysicalDevice-like
objects, experimental.get_device_details(device) -> {"device_name", "compute_capability"},
set_visible_devices / set_memory_growth before list_logical_devices, and reset_memory_stats /
get_memory_info raising ValueError where the allocator keeps no statistics
(tensorflow/python/eager/pywrap_tfe: "Cannot reset memory stats for device ...").
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from builders import cell_spec

from mpbench.backends.base import Unsupported
from mpbench.backends.tensorflow import device as tf_device


class FakeTF:
    """tf.config for a machine whose TensorFlow sees the GPUs `seen` (CATALOGUE keys of the
    NVML fake, in CUDA's order, left-out ones missing)."""

    def __init__(self, fake_nvml, *seen: str, stats: bool = True) -> None:
        self.physical = [
            SimpleNamespace(name=f"/physical_device:GPU:{i}", device_type="GPU")
            for i in range(len(seen))
        ]
        self.details = {
            device.name: {
                "device_name": fake_nvml.CATALOGUE[key].name,
                "compute_capability": fake_nvml.CATALOGUE[key].compute_capability,
            }
            for device, key in zip(self.physical, seen, strict=True)
        }
        self.visible = list(self.physical)
        self.growth: dict[str, bool] = {}
        self.stats = stats
        experimental = SimpleNamespace(
            get_device_details=lambda device: dict(self.details[device.name]),
            set_memory_growth=lambda device, enable: self.growth.__setitem__(device.name, enable),
            reset_memory_stats=self.reset_memory_stats,
            get_memory_info=self.get_memory_info,
        )
        self.config = SimpleNamespace(
            list_physical_devices=lambda kind=None: list(self.physical),
            set_visible_devices=lambda devices, kind=None: setattr(self, "visible", list(devices)),
            list_logical_devices=lambda kind=None: [
                SimpleNamespace(name=f"/device:GPU:{i}") for i in range(len(self.visible))
            ],
            experimental=experimental,
        )

    def reset_memory_stats(self, device: str) -> None:
        if not self.stats:
            raise ValueError(f"Cannot reset memory stats for device '{device}'")

    def get_memory_info(self, device: str) -> dict[str, int]:
        if not self.stats:
            raise ValueError(f"Allocator stats not available for device '{device}'")
        return {"current": 1_000, "peak": 5_000}


def test_the_cuda_index_is_found_in_a_shorter_tensorflow_list(fake_nvml):
    fake = fake_nvml("P100", "A100", "H100")  # CUDA: cuda:0 P100, cuda:1 A100, cuda:2 H100
    tf = FakeTF(fake, "A100", "H100")  # TensorFlow left the P100 out
    placement = tf_device.resolve(tf, "cuda:1")
    assert tf.visible == [tf.physical[0]]  # the A100, TensorFlow's GPU 0
    assert placement.info.name == "NVIDIA A100-SXM4-80GB" and placement.info.index == 1
    assert placement.tf_device == "/GPU:0"


def test_a_gpu_tensorflow_left_out_is_refused(fake_nvml):
    fake = fake_nvml("P100", "A100", "H100")
    with pytest.raises(Unsupported, match=r"leaves cuda:0 \(Tesla P100-PCIE-16GB\) out"):
        tf_device.resolve(FakeTF(fake, "A100", "H100"), "cuda:0")


def test_an_ambiguous_order_is_refused_with_the_uuid_to_select(fake_nvml):
    fake = fake_nvml("A100", "A100", "H100")
    tf = FakeTF(fake, "A100", "H100")  # one A100 left out: which one cannot be told
    with pytest.raises(Unsupported, match=f"CUDA_VISIBLE_DEVICES={fake.gpu(0).uuid}"):
        tf_device.resolve(tf, "cuda:0")
    placement = tf_device.resolve(tf, "cuda:2")  # the H100 is TensorFlow's GPU 1 either way
    assert tf.visible == [tf.physical[1]] and placement.info.index == 2


def test_the_same_count_keeps_the_index(fake_nvml):
    fake = fake_nvml("A100", "H100")
    tf = FakeTF(fake, "A100", "H100")
    tf_device.resolve(tf, "cuda:1")
    assert tf.visible == [tf.physical[1]]


def test_without_nvml_the_index_is_taken_as_tensorflow_gives_it(fake_nvml):
    fake = fake_nvml("A100", "H100", init_error=12)  # NVML_ERROR_LIBRARY_NOT_FOUND
    tf = FakeTF(fake, "H100")
    assert tf_device.resolve(tf, "cuda:0").info.name == "NVIDIA H100 80GB HBM3"
    with pytest.raises(Unsupported, match="TensorFlow sees 1 GPU"):
        tf_device.resolve(tf, "cuda:1")


def test_replicas_start_at_cuda_zero_and_a_later_index_is_refused(fake_nvml):
    fake = fake_nvml("A100", "A100", "A100")
    with pytest.raises(Unsupported, match="not from cuda:1"):
        tf_device.resolve_replicas(FakeTF(fake, "A100", "A100", "A100"), "cuda:1", 2)
    tf = FakeTF(fake, "A100", "A100", "A100")
    replicas = tf_device.resolve_replicas(tf, "cuda:0", 2)
    assert tf.visible == tf.physical[:2] and replicas.placement.info.index == 0


def test_replicas_on_a_gpu_tensorflow_left_out_are_refused(fake_nvml):
    fake = fake_nvml("P100", "A100", "H100")
    with pytest.raises(Unsupported, match="leaves cuda:0"):
        tf_device.resolve_replicas(FakeTF(fake, "A100", "H100"), "cuda", 2)


def test_an_allocator_without_statistics_makes_the_cell_unsupported(fake_nvml, monkeypatch):
    fake = fake_nvml("A100")
    monkeypatch.setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async")
    placement = tf_device.resolve(FakeTF(fake, "A100"), "cuda:0")
    with pytest.raises(Unsupported, match="TF_GPU_ALLOCATOR=cuda_malloc_async"):
        tf_device.memory_meter(FakeTF(fake, "A100", stats=False), placement)
    measured = tf_device.memory_meter(FakeTF(fake, "A100"), placement).stop()
    assert (measured.start_bytes, measured.peak_bytes) == (1_000, 5_000)
    assert measured.source == "tensorflow allocator (cuda_malloc_async)"


def test_torch_ranks_refuse_a_later_cuda_index(monkeypatch):
    torch_distributed = pytest.importorskip("mpbench.backends.torch.distributed")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    spec = cell_spec(device="cuda:1", nproc=2)
    with pytest.raises(Unsupported, match="runs rank r on cuda:r, not from cuda:1"):
        torch_distributed.DataParallel.join(spec)
