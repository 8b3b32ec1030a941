"""Map the cell's device ("cpu", "cuda", "cuda:N") to a TensorFlow device, and read its memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mpbench.backends.base import Unsupported, cpu_device_info
from mpbench.results.schema import DeviceInfo
from mpbench.telemetry.memory import TrainingMemory, rss_sampler

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


def pin_threads(tf: Any, intra_op: int | None, inter_op: int | None) -> tuple[int, int]:
    """Set TensorFlow's thread pools before its runtime starts (afterwards the setters raise
    RuntimeError), and report what it then uses (0: TensorFlow's default)."""
    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    return (
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
    )


def resolve(tf: Any, device: str) -> Placement:
    """The TensorFlow placement for the cell's device; Unsupported where TF cannot run it.

    On a GPU, only the cell's GPU is made visible and its memory grows on demand: by default
    TensorFlow maps nearly all memory of every visible GPU, so a `cuda:1` cell would starve
    whatever else runs on the machine (desk review defect 6). Both calls must precede the
    runtime's initialisation (tf.config.set_visible_devices and
    tf.config.experimental.set_memory_growth raise RuntimeError afterwards), so this runs
    before any op. The one visible GPU is then the logical device "/GPU:0"."""
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
    gpu = gpus[index]
    info, capability = _gpu_info(tf, gpu, index)
    tf.config.set_visible_devices([gpu], "GPU")
    tf.config.experimental.set_memory_growth(gpu, True)
    logical = tf.config.list_logical_devices("GPU")
    if len(logical) != 1:
        raise RuntimeError(f"expected one visible GPU after restricting to {device}: {logical}")
    # "/device:GPU:0" -> "/GPU:0"
    name = "/" + logical[0].name.rsplit("/device:", 1)[-1]
    return Placement(name, info, tuple(capability) if capability else None)


def _gpu_info(tf: Any, gpu: Any, index: int) -> tuple[DeviceInfo, Any]:
    """The record's DeviceInfo of a physical GPU, and its compute capability (None on ROCm)."""
    details = tf.config.experimental.get_device_details(gpu)
    capability = details.get("compute_capability")  # absent on ROCm builds
    info = DeviceInfo(
        kind="cuda",
        name=details.get("device_name", gpu.name),
        capability=f"{capability[0]}.{capability[1]}" if capability else None,
        index=index,
    )
    return info, capability


@dataclass(frozen=True)
class Replicas:
    """Where a MirroredStrategy's replicas run: `placement` is replica 0's device (the
    record's device, telemetry and memory), `devices` every replica's, in replica order."""

    placement: Placement
    devices: tuple[str, ...]
    kind: str  # "logical": TensorFlow logical CPUs splitting one CPU; "real": a GPU each


def resolve_replicas(tf: Any, device: str, replicas: int) -> Replicas:
    """The devices of `replicas` data-parallel replicas in this one process. Like `resolve`,
    this must run before TensorFlow initialises its runtime: logical devices and visible
    GPUs cannot be changed afterwards (RuntimeError).

    - cpu: the one physical CPU split into `replicas` logical CPUs
      (tf.config.set_logical_device_configuration). They share the CPU's cores and one
      thread pool, so they exercise the strategy's plumbing, not scaling.
    - cuda / cuda:N: GPUs 0 .. replicas-1, as torchrun puts rank r on cuda:r (the index of
      --device is not an offset); each made visible with memory growth on. Fewer GPUs than
      replicas: Unsupported."""
    kind = device.split(":", 1)[0].lower()
    if kind == "cpu":
        cpu = tf.config.list_physical_devices("CPU")[0]
        configured = tf.config.get_logical_device_configuration(cpu)
        if configured is None or len(configured) != replicas:
            try:
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration()] * replicas
                )
            except RuntimeError as exc:
                raise RuntimeError(
                    f"cannot split the CPU into {replicas} logical devices: TensorFlow's "
                    f"runtime was initialised before the cell configured it ({exc})"
                ) from exc
        names = tuple(
            "/" + d.name.rsplit("/device:", 1)[-1] for d in tf.config.list_logical_devices("CPU")
        )
        if len(names) != replicas:
            raise RuntimeError(f"expected {replicas} logical CPUs, TensorFlow has {names}")
        return Replicas(Placement(names[0], cpu_device_info()), names, "logical")
    if kind != "cuda":
        raise Unsupported(f"the TensorFlow backend runs on cpu or cuda, not {device!r}")
    _gpu_index(device)  # a malformed index is refused as for one replica
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise Unsupported(NO_GPU)
    if len(gpus) < replicas:
        raise Unsupported(
            f"--nproc {replicas}: MirroredStrategy needs a GPU per replica and TensorFlow "
            f"sees {len(gpus)} GPU(s)"
        )
    chosen = gpus[:replicas]
    info, capability = _gpu_info(tf, chosen[0], 0)
    tf.config.set_visible_devices(chosen, "GPU")
    for gpu in chosen:
        tf.config.experimental.set_memory_growth(gpu, True)
    logical = tf.config.list_logical_devices("GPU")
    if len(logical) != replicas:
        raise RuntimeError(f"expected {replicas} visible GPUs, TensorFlow has {logical}")
    names = tuple("/" + d.name.rsplit("/device:", 1)[-1] for d in logical)
    placement = Placement(names[0], info, tuple(capability) if capability else None)
    return Replicas(placement, names, "real")


class TensorFlowAllocatorMeter:
    """TensorFlow's allocator counters on the GPU (DESIGN §5): `current` when training starts,
    `peak` after it, with the peak reset first (tf.config.experimental.reset_memory_stats /
    get_memory_info, both keyed by "GPU:0")."""

    def __init__(self, tf: Any, placement: Placement) -> None:
        self._tf, self._name = tf, placement.memory_name
        tf.config.experimental.reset_memory_stats(self._name)
        self.start_bytes = int(tf.config.experimental.get_memory_info(self._name)["current"])

    def stop(self) -> TrainingMemory:
        peak = int(self._tf.config.experimental.get_memory_info(self._name)["peak"])
        return TrainingMemory(self.start_bytes, peak, "tensorflow allocator")


class ReplicaAllocatorMeter:
    """The allocator counters of every replica's GPU: the replica whose peak is highest is
    the one reported (a per-device figure, as for one GPU)."""

    def __init__(self, tf: Any, devices: tuple[str, ...]) -> None:
        self._meters = [TensorFlowAllocatorMeter(tf, Placement(name, _NO_INFO)) for name in devices]

    def stop(self) -> TrainingMemory:
        measured = [meter.stop() for meter in self._meters]
        highest = max(measured, key=lambda m: m.peak_bytes)
        source = f"tensorflow allocator, the highest of {len(measured)} replicas' GPUs"
        return TrainingMemory(highest.start_bytes, highest.peak_bytes, source)


_NO_INFO = DeviceInfo(kind="cuda", name="replica")  # only the device name is read


def memory_meter(tf: Any, placement: Placement, devices: tuple[str, ...] = ()) -> Any:
    """Starts measuring training memory now; `.stop()` returns a TrainingMemory. `devices`:
    a MirroredStrategy's replica devices (GPUs: each one's allocator; a CPU: the RSS)."""
    if placement.is_gpu and len(devices) > 1:
        return ReplicaAllocatorMeter(tf, devices)
    if placement.is_gpu:
        return TensorFlowAllocatorMeter(tf, placement)
    return rss_sampler().start()
