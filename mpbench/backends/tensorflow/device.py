"""Map the cell's device ("cpu", "cuda", "cuda:N") to a TensorFlow device, and read its memory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mpbench.backends.base import Unsupported, cpu_device_info
from mpbench.detect.cuda_order import CudaMapping
from mpbench.detect.gpu import GpuInfo
from mpbench.results.schema import DeviceInfo
from mpbench.telemetry.memory import TrainingMemory, rss_sampler
from mpbench.telemetry.nvml import nvml_cuda_mapping

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


def _fits(details: dict[str, Any], gpu: GpuInfo) -> bool:
    """Whether TensorFlow's GPU (get_device_details) can be NVML's `gpu`: no compute
    capability or name that both sides know differs (what one cannot say fits anything)."""
    capability, known = details.get("compute_capability"), gpu.compute_capability
    if capability is not None and known is not None and tuple(capability) != tuple(known):
        return False
    name = details.get("device_name")
    named = not any(error.startswith("nvmlDeviceGetName") for error in gpu.errors)
    return name is None or not named or name.casefold() == gpu.name.casefold()


def _embeds(seen: Sequence[dict[str, Any]], gpus: Sequence[GpuInfo]) -> bool:
    """Whether TensorFlow's GPUs `seen` can be `gpus` in order with some of them left out."""
    position = 0
    for details in seen:
        while position < len(gpus) and not _fits(details, gpus[position]):
            position += 1
        if position == len(gpus):
            return False
        position += 1
    return True


def tf_position(tf: Any, gpus: Sequence[Any], index: int, mapping: CudaMapping) -> int:
    """Where CUDA device `index` is in TensorFlow's GPU list.

    TensorFlow lists the GPUs CUDA numbers, in CUDA's order, but leaves out those it will not
    use ("Ignoring visible gpu device ...": fewer multiprocessors than
    TF_MIN_GPU_MULTIPROCESSOR_COUNT, a compute capability its build has no kernels for), so
    its GPU N is CUDA's N only when none was left out; otherwise a `cuda:N` cell would train
    on another board than the one telemetry and energy read through NVML. NVML's view of
    what CUDA numbers (`mapping`) tells: the same count, position N; fewer, the one position
    that lines TensorFlow's GPUs (name, compute capability) up with NVML's in order, if only
    one does. Unsupported when TensorFlow does not use that GPU or the order is ambiguous.
    Without an NVML view (no driver library, an order NVML cannot reproduce) TensorFlow's
    position N is taken, as nothing can be checked."""
    if not mapping.known:
        if index >= len(gpus):
            raise Unsupported(
                f"TensorFlow sees {len(gpus)} GPU(s); cuda:{index} is not one of them"
            )
        return index
    nvml = list(mapping.gpus or ())
    target = mapping.get(index)
    if target is None:
        raise Unsupported(
            mapping.note or f"CUDA numbers {len(nvml)} GPU(s); cuda:{index} is not one of them"
        )
    if len(nvml) == len(gpus):
        return index
    seen = [tf.config.experimental.get_device_details(gpu) for gpu in gpus]
    places = [
        j
        for j, details in enumerate(seen)
        if _fits(details, target)
        and _embeds(seen[:j], nvml[:index])
        and _embeds(seen[j + 1 :], nvml[index + 1 :])
    ]
    unused = _embeds(seen, nvml[:index] + nvml[index + 1 :])
    select = (
        f"select it before TensorFlow starts (CUDA_VISIBLE_DEVICES={target.uuid})"
        if target.uuid
        else "select it with CUDA_VISIBLE_DEVICES"
    )
    if len(places) == 1 and not unused:
        return places[0]
    if not places and unused:
        raise Unsupported(
            f"TensorFlow leaves cuda:{index} ({target.name}) out of its {len(gpus)} GPU(s) "
            f"of the {len(nvml)} CUDA numbers (too few multiprocessors, or a compute "
            "capability this TensorFlow has no kernels for)"
        )
    raise Unsupported(
        f"TensorFlow sees {len(gpus)} of the {len(nvml)} GPUs CUDA numbers, and which of "
        f"its GPUs is cuda:{index} ({target.name}) cannot be told; {select}"
    )


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
    gpu = gpus[tf_position(tf, gpus, index, nvml_cuda_mapping())]
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
    - cuda / cuda:0: CUDA devices 0 .. replicas-1, as torchrun puts rank r on cuda:r, found
      in TensorFlow's list as `resolve` finds one; each made visible with memory growth on.
      Fewer GPUs than replicas: Unsupported. cuda:N with N > 0 is Unsupported too: the
      replicas would still start at cuda:0 while the run fingerprints cuda:N (the index is
      not an offset; CUDA_VISIBLE_DEVICES chooses the GPUs)."""
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
    if _gpu_index(device) != 0:  # a malformed index is refused as for one replica
        raise Unsupported(
            f"--nproc {replicas} runs its replicas on cuda:0 .. cuda:{replicas - 1}, not from "
            f"{device}: use --device cuda, and CUDA_VISIBLE_DEVICES to choose the GPUs"
        )
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise Unsupported(NO_GPU)
    if len(gpus) < replicas:
        raise Unsupported(
            f"--nproc {replicas}: MirroredStrategy needs a GPU per replica and TensorFlow "
            f"sees {len(gpus)} GPU(s)"
        )
    mapping = nvml_cuda_mapping()
    chosen = [gpus[tf_position(tf, gpus, r, mapping)] for r in range(replicas)]
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
    """TensorFlow's allocator counters on the GPU (docs/measurement.md): `current` when
    training starts, `peak` after it, with the peak reset first
    (tf.config.experimental.reset_memory_stats / get_memory_info, both keyed by "GPU:0").

    With TF_GPU_ALLOCATOR=cuda_malloc_async the counters are GpuCudaMallocAsyncAllocator's:
    bytes its callers hold, kept when it was built with statistics (the default,
    compute_stats=true), and reset to the bytes in use as BFC's are (ClearStats). Without
    statistics TensorFlow raises ValueError ("Cannot reset memory stats", "Allocator stats
    not available"): the cell is then Unsupported with the reason, never given a made-up
    figure. The source names the allocator, since compare should not set the two side by
    side unawares."""

    def __init__(self, tf: Any, placement: Placement) -> None:
        self._tf, self._name = tf, placement.memory_name
        allocator = os.environ.get("TF_GPU_ALLOCATOR")
        self.source = f"tensorflow allocator ({allocator})" if allocator else "tensorflow allocator"
        try:
            tf.config.experimental.reset_memory_stats(self._name)
            self.start_bytes = int(tf.config.experimental.get_memory_info(self._name)["current"])
        except ValueError as exc:
            raise Unsupported(
                f"TensorFlow's allocator on {self._name} keeps no memory statistics "
                f"(TF_GPU_ALLOCATOR={allocator or 'unset'}; {exc}): training memory cannot "
                "be measured"
            ) from exc

    def stop(self) -> TrainingMemory:
        peak = int(self._tf.config.experimental.get_memory_info(self._name)["peak"])
        return TrainingMemory(self.start_bytes, peak, self.source)


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
