"""The result record: one per cell, the contract between `run` and `compare`
(docs/architecture.md, "The result contract").

Records are plain dataclasses written with `to_dict`. Reading one back goes through
versions.load_record, which knows every schema version and checks every value (validate.py);
this module imports neither, so the imports run one way: io → versions → validate → schema.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.results.step_stats import StepStats

SCHEMA_VERSION = 14


class Status(str, Enum):
    OK = "ok"
    SKIPPED = "skipped"
    DIVERGED = "diverged"
    OOM = "oom"
    TIMEOUT = "timeout"
    ERROR = "error"
    # v14: stopped early because it could not pay (StopStats): measured, not a failure
    STOPPED = "stopped"


class SchemaError(InvalidInput):
    """A record or file that does not follow this schema (bad input: exit 2)."""


@dataclass
class StepTimeStats:
    """Raw per-step times (seconds, warm-up excluded) and every statistic derived from them."""

    raw_s: list[float]
    warmup_steps: int  # how many leading steps were excluded from raw_s
    count: int = 0
    median_s: float | None = None
    mean_s: float | None = None
    p10_s: float | None = None
    p90_s: float | None = None
    stdev_s: float | None = None
    # Drift (v2): medians of the first and second half of the timed steps, and whether they
    # differ by more than the within-run interval allows (mpbench.results.stats.drift).
    first_half_median_s: float | None = None
    second_half_median_s: float | None = None
    drifting: bool | None = None
    # Gradient accumulation (--accumulate): a timed step is one optimizer step of this many
    # micro-batches; the median per micro-batch is median_s / micro_batches_per_step.
    micro_batches_per_step: int | None = None
    micro_batch_median_s: float | None = None

    @classmethod
    def from_samples(cls, raw_s: list[float], warmup_steps: int) -> StepTimeStats:
        """The record's step statistics of the timed steps (step_stats.StepStats)."""
        stats = StepStats(raw_s)
        if not stats.count:
            return cls(raw_s=[], warmup_steps=warmup_steps)
        return cls(
            raw_s=stats.raw_s,
            warmup_steps=warmup_steps,
            count=stats.count,
            median_s=stats.median,
            mean_s=stats.mean,
            p10_s=stats.p10,
            p90_s=stats.p90,
            stdev_s=stats.stdev,
            first_half_median_s=stats.first_half_median,
            second_half_median_s=stats.second_half_median,
            drifting=stats.drifting,
        )


@dataclass
class DeviceInfo:
    kind: str  # cpu, cuda, mps, ...
    name: str
    capability: str | None = None  # "8.0" on NVIDIA; CPU flags summary elsewhere
    index: int | None = None


@dataclass
class DataInfo:
    name: str  # "mnist", "cifar10", "synthetic-mnist", "synthetic-cifar10"
    source: str  # "real" or "synthetic"
    origin: str | None = None  # file or folder it came from; None for synthetic
    sha256: dict[str, str] | None = None  # file name -> digest of what was read
    train_size: int = 0
    test_size: int = 0


@dataclass
class MemoryStats:
    """Process-lifetime peaks (v1) and, from v2, *training memory*: the peak while training
    minus what was resident when training started (model, optimizer state, preloaded data),
    docs/measurement.md. `training_source` says how it was measured: "cuda allocator" (torch
    memory_allocated / max_memory_allocated), "tensorflow allocator" (get_memory_info
    current / peak) or "process anonymous RSS sampled" (psutil, on CPUs; "process RSS sampled"
    before: the whole RSS, code pages included)."""

    device_peak_allocated_bytes: int | None = None
    device_peak_reserved_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    training_bytes: int | None = None  # training_peak_bytes - training_start_bytes
    training_start_bytes: int | None = None
    training_peak_bytes: int | None = None
    training_source: str | None = None
    sample_interval_s: float | None = None  # RSS sampling period; None for allocator figures
    samples: int | None = None  # how many RSS samples the peak was taken from
    dataset_device_bytes: int | None = None  # the dataset's bytes preloaded on the device


@dataclass
class AccuracyStats:
    test_accuracy: float | None = None
    test_loss: float | None = None
    train_loss_per_epoch: list[float] = field(default_factory=list)


@dataclass
class LossScaleStats:
    final_scale: float | None = None
    skipped_steps: int | None = None
    mode: str | None = None  # "dynamic" or "static" (--loss-scale)
    initial_scale: float | None = None
    counted_steps: int | None = None  # the steps skipped_steps is out of
    # What one skip throws away, which differs between frameworks under accumulation: torch
    # skips the whole optimizer step, Keras only the overflowing micro-batch.
    skip_unit: str | None = None


@dataclass
class CompileStats:
    """torch.compile (--compile): the first, compiling step's time, kept out of the step
    statistics, and how often Dynamo compiled again afterwards (0 expected)."""

    backend: str
    compile_s: float  # the first training step, which compiles forward and backward
    recompiles: int  # frames compiled after the first step (warm-up included)
    frames_compiled: int  # all frames Dynamo compiled in the cell
    evaluation_recompiles: int | None = None  # compiles caused by evaluation


@dataclass
class EndToEndStats:
    """Throughput without per-step synchronisation (docs/measurement.md): what a training job sees.
    The synced step times measure the math; this window includes the input pipeline and the
    work between steps, timed with one clock read at each end of the window."""

    samples_per_s: float
    steps: int
    seconds: float
    input_pipeline: str  # exactly which input path fed the window


@dataclass
class TelemetryStats:
    """What happened during the cell (v4, docs/telemetry.md): the summaries; the per-step
    numerics and the device series are in the side file it names (mpbench.telemetry)."""

    side_file: str | None  # relative to the run directory; None: it could not be written
    numerics_points: int  # steps kept in the side file (evenly spaced, at most 1000)
    numerics_stride: int  # every how many steps a point was kept
    steps: int  # optimizer steps observed (every one, whatever the stride)
    skipped_steps: int  # steps the loss scaler skipped
    nonfinite_steps: int  # steps with a non-finite loss or gradient
    grad_norm_median: float | None = None  # of the kept points' unscaled global norms
    samples: int = 0  # device samples taken during the timed steps
    interval_s: float | None = None
    # v11: 100 is one core busy; ΔCPU-time/Δt of the process over the window (v4-10: a mean
    # of psutil readings); None, with the reason in `unavailable`, for a window under 20 ticks
    mean_cpu_util_pct: float | None = None
    peak_rss_bytes: int | None = None
    # v11: NVML's sampled means (this one and mean_power_w) are over the window, None with the
    # reason in `unavailable` where it holds too few readings (docs/telemetry.md)
    mean_gpu_util_pct: float | None = None
    # NVML's `used` for the whole device (every process, contexts, reserves), not the
    # allocator's peak that `memory` holds (docs/telemetry.md); v1-6 called it
    # peak_gpu_memory_bytes
    peak_nvml_device_used_bytes: int | None = None
    mean_power_w: float | None = None
    max_temperature_c: float | None = None
    mean_sm_clock_mhz: float | None = None
    unavailable: dict[str, str] = field(default_factory=dict)  # metric -> why it is missing
    # v11: the measured window's length: the timed steps after warm-up, as energy's
    window_s: float | None = None


@dataclass
class EnergyStats:
    """Energy over the timed steps (v4): measured by a counter or integrated power samples,
    never estimated from a TDP; `joules` None with the reason where nothing measures it."""

    joules: float | None
    joules_per_sample: float | None
    source: str | None  # "NVML total energy counter", "RAPL package zones (powercap)", ...
    reason: str | None
    window_s: float | None = None
    # v11: which steps the window held: "timed steps" (after warm-up; v4-10 included it) or
    # "steady window" (the same step run alone, then undone, where the timed steps were too
    # short for the counter), and how many optimizer steps
    window: str | None = None
    steps: int | None = None
    # v11: joules / window_s, the counter's mean power (beside telemetry.mean_power_w, NVML's
    # sampled mean, which a short window cannot give)
    mean_power_w: float | None = None


@dataclass
class DivergenceInfo:
    """The signal that ended a cell `diverged` (v4): which, at which step, with what values."""

    signal: str  # non_finite_loss | loss_scale_floor | skipped_fraction | loss_spike
    step: int
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class DistributedStats:
    """A data-parallel cell (v5, docs/distributed.md): how it ran and what the world cost.
    The record's step time is the job's: per step, the slowest rank; its throughput global."""

    world_size: int  # replicas (ranks, or a strategy's replicas in sync)
    nodes: int
    nproc_per_node: int
    launcher: str  # "torchrun" | "tf.distribute.MirroredStrategy"
    backend: str  # "gloo", "nccl", or the strategy's cross-device ops
    grad_comm: str  # the gradient all-reduce's precision, as run: fp32 | fp16 | bf16
    # "real": an accelerator per replica; "shared": rank processes sharing one CPU's cores;
    # "logical": TensorFlow logical devices splitting one CPU. Only "real" measures scaling.
    devices: str
    per_device_samples_per_s: float | None = None
    rank_step_median_s: list[float] = field(default_factory=list)  # rank order; [] if one process
    straggler_ratio: float | None = None  # max / median of rank_step_median_s
    allreduce_s_per_step: float | None = None  # median over the timed steps, rank 0
    allreduce_overlap_s_per_step: float | None = None  # of that, overlapped with backward
    allreduce_share: float | None = None  # allreduce_s_per_step / the job's median step
    comm_source: str | None = None  # where the all-reduce times come from
    # Weak scaling (fixed per-replica batch): thr_N / (N * thr_1) against `scaling_reference`,
    # the same cell at world size 1 in the same run; None when that cell did not finish ok.
    scaling_efficiency: float | None = None
    scaling_reference: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)  # field -> why it is missing


@dataclass
class ContentionStats:
    """What else used the machine during the cell's timed steps (v6, docs/measurement.md;
    measured by mpbench.results.contention, which also holds the rule that sets
    `contended` and `why`). None where this machine cannot tell; `unavailable` says why."""

    wall_s: float
    cpus: int
    busy_cores: float  # the whole machine's busy CPU time / wall time
    own_cores: float  # the cell's process tree
    other_cores: float  # busy - own: everything else
    steal_pct: float | None = None
    psi_some_pct: float | None = None  # system-wide: includes the cell's own threads
    throttled_s: float | None = None  # the cgroup's CPU quota
    load_1min_start: float | None = None
    load_1min_end: float | None = None
    runnable_end: int | None = None  # runnable threads at the end (procs_running)
    cpu_mhz: float | None = None
    gpu_other_processes: int | None = None
    gpu_clock_event_reasons: list[str] | None = None  # the slowing ones seen in the window
    unavailable: dict[str, str] = field(default_factory=dict)
    contended: bool = False
    why: list[str] = field(default_factory=list)  # which rules fired, in words

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class StartupStats:
    """v8: how the cell's process was started and what that cost (docs/measurement.md,
    "Starting a cell")."""

    launcher: str  # "fork server" (forked from its framework's server) or "new process"
    # From asking for the process to its first training step done: the interpreter or the
    # fork, the imports, data, model and one step (a compile, with --compile). None: no step.
    seconds: float | None = None
    # Why its first start was lost and it ran again as a new process: its fork server died
    # under it ("the torch fork server (pid N) was killed by SIGKILL while cell M ran").
    # None: it ran once.
    rerun: str | None = None


@dataclass
class Fp8GemmRow:
    """v12: one GEMM of an fp8 layer's training step, (m×k)·(k×n), timed on the device before
    training in bf16 and fp8 at exactly this shape; the cast is dynamic scaling's traffic at
    the measured bandwidth. None where not timed (no fp8 hardware, a refused shape)."""

    layer: str  # the nn.Linear's qualified name
    role: str  # "forward" | "grad_input" | "grad_weight"
    m: int
    k: int
    n: int
    bf16_ms: float | None = None
    fp8_ms: float | None = None
    cast_ms: float | None = None
    predicted_gain: float | None = None  # bf16 / (fp8 + cast): above 1, fp8 should win
    fp8: bool = True  # False: a GEMM the recipe keeps in bf16 (rowwise_with_gw_hp's grad_weight)
    error: str | None = None  # why it has no times


@dataclass
class Fp8Prediction:
    """v12: what fp8 should gain over bf16 on a cell's fp8 layers, from their GEMMs' timings
    (mpbench.fp8_gemms); `note` says why there is no gain where there is none."""

    rows: list[Fp8GemmRow]
    predicted_gain: float | None  # sum of bf16 times / sum of fp8 + cast, over every row
    bandwidth_gb_s: float | None  # what the cast overhead was priced at
    method: str  # how the timings were taken, in words
    note: str | None = None  # "no fp8 hardware: ...", or why some shape was not timed
    gemm_gain: float | None = None  # the same without the casts: the GEMMs alone
    hardware: bool = True  # False where no fp8 GEMM could run (emulated): no times


@dataclass
class Fp8Stats:
    """v9: a float8 cell's fp8, as it ran (docs/policies.md, "fp8"; the rules: mpbench.fp8_rules).
    `mode` is what executed, never what was asked: `emulated` step times are the cost of
    emulation, and compare shows no speed-up for them."""

    mode: str  # "hardware" | "emulated"
    why: str  # why that mode: the device, the path, or --fp8-mode emulated
    requested: str  # --fp8-mode: auto | hardware | emulated
    backend: str  # "torchao 0.18.0 float8 training", "keras 3.15.1 float8 Dense layers"
    gemm: str  # how each fp8 GEMM ran, in words
    recipe: str  # torchao: tensorwise | rowwise | rowwise_with_gw_hp; Keras: delayed
    scaling: str  # how the scales are chosen
    formats: dict[str, str]  # operand -> float8 dtype: {"forward": "float8_e4m3fn", ...}
    base_policy: str  # what every other op runs in: mixed_bfloat16
    layers_fp8: list[str] = field(default_factory=list)
    skipped_layers: dict[str, str] = field(default_factory=dict)  # layer -> why it stayed
    # The fp8 GEMMs' share of the forward FLOPs per sample (the step's share too); None
    # where the model's FLOPs are unknown (flop_share_note says why).
    flop_share_fp8: float | None = None
    flop_share_note: str | None = None
    # v12: torch, whether the converted model ran under torch.compile (the default for a
    # float8 cell; --fp8-eager: False); None for Keras, whose XLA is config's `jit`.
    compiled: bool | None = None
    # v12: torch, each fp8 GEMM's shape and its gain over bf16 predicted from timings taken on
    # the device before training (mpbench.fp8_gemms); None where none was made.
    prediction: Fp8Prediction | None = None
    # v13: layers mpbench swapped for an equivalent nn.Linear so that fp8 can take them
    # (transformers' Conv1D: the same weights, transposed), name -> what was swapped.
    swapped_layers: dict[str, str] = field(default_factory=dict)
    # v13: where the GEMM shapes came from ("each layer's input in one traced forward ...").
    shapes_source: str | None = None


@dataclass
class StopStats:
    """v14: a cell that could not pay, stopped after a few timed steps (docs/measurement.md,
    "A cell that cannot pay stops early"): the rule that stopped it and what it measured. Its
    step statistics are the timed steps it ran; it has no accuracy, end-to-end window or
    evaluation, and compare takes no ratio from it."""

    rule: str  # "slower than float32" | "past the timeout"
    steps: int  # timed steps run (warm-up excluded), what step_time holds
    planned_steps: int  # timed steps planned (warm-up excluded)
    step_s: float  # the median of those steps when it stopped
    # The whole cell's time had it run on: the time it had taken so far, and the steps left,
    # the end-to-end window and the evaluation at step_s.
    projected_s: float
    timeout_s: float | None = None  # the cell's timeout (--timeout)
    slower_than_float32: float | None = None  # step_s / float32_step_s: the measured ratio
    # The float32 twin's median step in this run, per this cell's batch; None: none measured
    float32_step_s: float | None = None
    limit: float | None = None  # --stop-slower-than; None: off


# What can limit a step (mpbench.results.bottleneck decides which): compare reads `kind`.
BOTTLENECK_KINDS = ("compute-bound", "memory-bound", "launch-bound", "input-bound", "unknown")


@dataclass
class BottleneckStats:
    """v11: what limited the cell's step, from evidence the cell measured (docs/measurement.md,
    "What limits a step"; the rule and its thresholds: mpbench.results.bottleneck). `kind`
    "unknown" where the evidence is missing, with the reason in `evidence` and `unavailable`:
    no class is guessed."""

    kind: str  # "compute-bound" | "memory-bound" | "launch-bound" | "input-bound" | "unknown"
    evidence: str  # one line: "device busy 14 % of the step (kernels 0.25 of 1.78 ms); ..."
    # the change that would help, or None (compute-bound: None or "already compute-bound: ...")
    remedy: str | None
    # what measured the device-busy time: "torch.profiler CUDA kernel time over 5 steps",
    # "process CPU time"
    source: str
    device_busy_fraction: float | None = None
    host_busy_fraction: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None  # the policy's peak the share is taken of
    bytes_per_step: float | None = None
    arithmetic_intensity: float | None = None  # FLOPs / byte
    ridge_point: float | None = None  # peak FLOP/s / bandwidth, FLOPs / byte
    bandwidth_gbps: float | None = None
    input_share: float | None = None
    unavailable: dict[str, str] = field(default_factory=dict)  # evidence -> why it is missing
    # v14: a 16-bit cell on a CPU: the share of its step spent converting dtypes (torch's
    # aten::_to_copy under torch.profiler), and what measured it; None where not measured.
    cast_share: float | None = None
    cast_source: str | None = None


@dataclass
class CellRecord:
    run_id: str
    cell_id: str
    timestamp: str
    framework: str
    framework_version: str | None
    workload: str
    policy: str
    repeat: int
    device: DeviceInfo
    status: Status
    reason: str | None = None
    config: dict[str, Any] = field(default_factory=dict)  # the effective config of the cell
    precision: dict[str, Any] = field(default_factory=dict)  # state read back after applying
    data: DataInfo | None = None
    step_time: StepTimeStats | None = None
    throughput_samples_per_s: float | None = None
    memory: MemoryStats = field(default_factory=MemoryStats)
    accuracy: AccuracyStats = field(default_factory=AccuracyStats)
    loss_scale: LossScaleStats | None = None
    # Trainable parameters (torch: parameters that require a gradient; Keras:
    # trainable_weights). v13: the frozen and running state apart, in `params_non_trainable`
    # (torch: parameters that need no gradient and persistent floating-point buffers such as
    # BatchNorm's running statistics; Keras: the floating-point non_trainable_weights, no
    # integer counter), so that both frameworks
    # count one model alike.
    params: int | None = None
    params_non_trainable: int | None = None
    flops_per_step: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    mfu: float | None = None
    measured_peak_tflops: float | None = None  # `detect --measure` peak of the policy's dtype
    mfu_measured: float | None = None  # achieved / measured peak
    end_to_end: EndToEndStats | None = None
    threads: dict[str, Any] = field(default_factory=dict)  # intra/inter-op, OMP_NUM_THREADS
    compile: CompileStats | None = None  # torch --compile
    telemetry: TelemetryStats | None = None
    energy: EnergyStats | None = None
    divergence: DivergenceInfo | None = None
    fallback_of: str | None = None  # --on-diverge fallback: the cell_id of the diverged cell
    distributed: DistributedStats | None = None  # --nproc N > 1 (or several nodes)
    contention: ContentionStats | None = None  # v6: what else ran during the timed steps
    # v6: figures computed but not believable, each with the reason (e.g. "mfu_measured":
    # "above 105 % of the measured peak: the peak was measured on a busy machine").
    implausible: dict[str, str] = field(default_factory=dict)
    hardware_fingerprint: str = ""
    wall_s: float | None = None
    startup: StartupStats | None = None  # v8
    fp8: Fp8Stats | None = None  # v9: float8 cells only
    bottleneck: BottleneckStats | None = None  # v11: what limited the step, with its evidence
    stopped: StopStats | None = None  # v14: status `stopped` only: why, and what it measured
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["status"] = self.status.value
        return out
