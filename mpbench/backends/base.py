"""What the runner hands a backend (CellSpec) and what a backend hands back (Measurements).

Both frameworks implement one function, `run_cell(spec, progress, warn) -> Measurements`, in
`mpbench/backends/<framework>/backend.py`; the runner turns Measurements into a CellRecord.
Measurements cross from the cell's process to the runner as JSON: the cell writes
`to_dict()`, the runner reads it back with `Measurements.from_dict`, which says in one line
what is missing or wrong instead of failing later on a key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import resource
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpbench.results.schema import (
    CompileStats,
    DataInfo,
    DeviceInfo,
    DistributedStats,
    DivergenceInfo,
    EndToEndStats,
    Fp8Stats,
    LossScaleStats,
    MemoryStats,
    Status,
    StopStats,
)

# progress(step, total_steps): called after every training step (a synced step's after its
# clock read; the end-to-end window's inside it, which costs about 0.3 µs a step).
Progress = Callable[[int, int], None]

# The phases a cell goes through, said with enter_phase(progress, ...): the runner shows the
# running cell's phase live beside its step count (runner/progress.py). TRAINING carries the
# plan (`warmup`, `timed`, `total` steps), from which the runner tells the warm-up steps
# from the timed ones; END_TO_END is the window after the timed steps.
LOADING, BUILDING, COMPILING, TRAINING, END_TO_END, EVALUATING = (
    "loading data",
    "building",
    "compiling",
    "training",
    "end-to-end",
    "evaluating",
)


def enter_phase(progress: Progress, phase: str, **plan: int) -> None:
    """Say that the cell enters `phase` where `progress` can hear it (the cell process's
    events: launchers/cell.py); a plain callable, as tests pass, hears only steps. Never
    inside a timed interval."""
    said = getattr(progress, "phase", None)
    if said is not None:
        said(phase, **plan)


@dataclass
class CellSpec:
    """One cell, fully resolved: JSON-serialisable, sent to the child process."""

    run_id: str
    cell_id: str
    framework: str  # "torch" | "tensorflow"
    workload: str
    policy: str  # canonical name
    repeat: int
    device: str  # "cpu", "cuda", "cuda:1", "mps"
    batch_size: int
    epochs: int
    # Cap on the timed steps (warm-up included); the end-to-end window after them trains
    # about as many again (end_to_end_window), so a cell trains up to about twice this.
    max_steps: int | None
    warmup_steps: int
    units: int | None  # dense width (mnist_dense), d_model (transformer_lm); else None
    seed: int
    data: str = "auto"  # auto | real | synthetic
    data_dir: str | None = None
    allow_download: bool = True
    synthetic_train_size: int | None = None  # None: the real split sizes
    synthetic_test_size: int | None = None
    loop: str = "fit"  # TensorFlow only: fit | custom
    jit: bool = False  # TensorFlow only: XLA jit_compile
    # Training recipes (docs/recipes.md). batch_size above is the micro-batch a step feeds.
    loss_scale: float | None = None  # static loss scale (mixed_float16); None: dynamic
    accumulate: int = 1  # micro-batches per optimizer step
    batch_scale_16bit: int = 1  # this cell's factor; batch_size already includes it
    reference_batch_size: int | None = None  # the float32 reference's batch (batch scaling)
    compile: bool = False  # torch only: torch.compile the model
    # Data parallelism (docs/distributed.md): replicas per node and nodes; batch_size is each
    # replica's (weak scaling), so the job trains world_size x batch_size per step.
    nproc: int = 1
    nnodes: int = 1
    node_rank: int | None = None  # this node's (several nodes); None: the rendezvous assigns it
    rdzv_endpoint: str | None = None  # HOST:PORT where the nodes meet (several nodes)
    grad_comm: str = "fp32"  # torch DDP: the gradient all-reduce's precision (comm hook)
    # The float8 policy (mpbench.fp8_rules): auto | hardware | emulated, and torchao's recipe. They
    # are not in config(): the record's `fp8` says what ran.
    fp8_mode: str = "auto"
    fp8_recipe: str = "tensorwise"
    fp8_eager: bool = False  # torch float8 cells: no torch.compile of the converted model
    verbose: bool = False
    # Thread pools, pinned by the runner and identical for every policy of a run.
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    # A language model's sizes beyond its width (`units`); None for the other workloads.
    heads: int | None = None
    layers: int | None = None
    seq_len: int | None = None
    # A cell that cannot pay stops early (backends/stopping.py): its step against its float32
    # twin's, more than `stop_slower_than` times (None: off), or its projected time past its
    # `timeout` (seconds; None: no such rule). `float32_step_s`: the twin's median step in this
    # run, per this cell's batch, which the runner hands it as it starts (None: none yet).
    stop_slower_than: float | None = 10.0
    timeout: float | None = None
    float32_step_s: float | None = None

    @property
    def sizes(self) -> dict[str, int]:
        """The workload's sizes beyond `units` (the spec's keyword arguments), as set."""
        named = {"heads": self.heads, "layers": self.layers, "seq_len": self.seq_len}
        return {key: value for key, value in named.items() if value is not None}

    def config(self) -> dict[str, Any]:
        """The effective configuration stored in the record (what makes two cells comparable)."""
        keys = ("batch_size", "epochs", "max_steps", "warmup_steps", "units", "seed", "data")
        out = {k: getattr(self, k) for k in keys}
        out.update(self.sizes)  # only a language model's: other records keep their keys
        if self.framework == "tensorflow":
            out.update(loop=self.loop, jit=self.jit)
        # Recipe axes appear only where the cell differs from the default, so records of runs
        # without them keep the config they always had. compare takes the loss scale and the
        # 16-bit batch factor out of the group identity (they vary within one group: fp16 at
        # two scales against one float32); accumulation and compile stay in it.
        if self.loss_scale is not None:
            out["loss_scale"] = self.loss_scale  # mixed_float16 cells only
        if self.accumulate > 1:
            out.update(accumulate=self.accumulate, effective_batch_size=self.effective_batch)
        if self.batch_scale_16bit > 1:
            out.update(
                batch_scale_16bit=self.batch_scale_16bit,
                reference_batch_size=self.reference_batch_size,
            )
        if self.compile and self.framework == "torch":
            out["compile"] = True
        if self.world_size > 1:  # group identity: a ratio is taken at one world size
            out.update(world_size=self.world_size, nproc_per_node=self.nproc, nnodes=self.nnodes)
            if self.framework == "torch":
                out["grad_comm"] = self.grad_comm
        return out

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def effective_batch(self) -> int:
        """Samples per optimizer step: the micro-batch times the micro-batches accumulated."""
        return self.batch_size * self.accumulate


@dataclass
class Dataset:
    """Preprocessed arrays a backend trains on (float32 in [0, 1], int labels)."""

    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any
    info: Any  # mpbench.results.DataInfo


@dataclass
class BusyEvidence:
    """How busy the device and the host were, as the cell measured them (docs/measurement.md,
    "What limits a step"); the runner classifies the record's `bottleneck` from it
    (runner/records.py, mpbench.results.bottleneck)."""

    source: str  # what measured the device-busy time, or "process CPU time" on a CPU
    # The device's busy time (the union of its kernels' and copies' intervals) and the wall
    # time of the profiled steps, per step; None where nothing measures it (`unavailable`).
    device_busy_s: float | None = None
    busy_step_s: float | None = None
    busy_steps: int | None = None
    # The process's CPU time (every thread) and the wall time over the timed steps, and the
    # threads that CPU time is shared out among: the intra-op threads on a CPU, the one
    # launching thread on an accelerator.
    host_cpu_s: float | None = None
    host_wall_s: float | None = None
    threads: int | None = None
    # A 16-bit cell on a CPU: the share of the step spent converting dtypes, and what
    # measured it (torch: profiled.profile_casts); None where not measured.
    cast_share: float | None = None
    cast_source: str | None = None
    unavailable: dict[str, str] = field(default_factory=dict)

    @property
    def device_busy_fraction(self) -> float | None:
        if self.device_busy_s is None or not self.busy_step_s:
            return None
        return self.device_busy_s / self.busy_step_s

    @property
    def host_busy_fraction(self) -> float | None:
        if self.host_cpu_s is None or not self.host_wall_s or not self.threads:
            return None
        return self.host_cpu_s / (self.host_wall_s * self.threads)


@dataclass
class Measurements:
    framework_version: str
    device: DeviceInfo
    # The state read back from the framework (docs/architecture.md, "The precision contract").
    precision: dict[str, Any]
    step_times_s: list[float]  # every timed step, warm-up included
    warmup_steps: int
    samples_per_step: int
    epoch_losses: list[float]
    test_accuracy: float | None
    test_loss: float | None
    params: int  # trainable (CellRecord.params says what each framework counts)
    memory: MemoryStats = field(default_factory=MemoryStats)
    loss_scale: LossScaleStats | None = None
    data: DataInfo | None = None
    # Settings the backend determined itself (e.g. hyper-parameters read back, TF loop/XLA);
    # the runner already records the requested config from the spec.
    extra_config: dict[str, Any] = field(default_factory=dict)
    end_to_end: EndToEndStats | None = None
    threads: dict[str, Any] = field(default_factory=dict)  # as the framework reports them
    micro_batches_per_step: int = 1  # a timed step is one optimizer step of this many
    # A cell that finished but must not count as ok (e.g. most steps skipped by a static loss
    # scale): the status and reason its record gets, with these measurements kept.
    status: str = "ok"
    reason: str | None = None
    # torch --compile: CompileStats' fields (a dict here and in the record's JSON alike).
    compile: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None  # CellTelemetry.report() (mpbench.telemetry.cell)
    divergence: dict[str, Any] | None = None  # the signal, where status is "diverged"
    # A data-parallel cell: DistributedStats' fields as the backend knows them (world_size,
    # nodes, nproc_per_node, launcher, backend, grad_comm, devices, rank_step_median_s,
    # allreduce_s_per_step, allreduce_overlap_s_per_step, comm_source, unavailable); the
    # record adds the derived ones (per-device throughput, straggler ratio, share, efficiency).
    # step_times_s are then the job's (per step, the slowest rank) and samples_per_step global.
    distributed: dict[str, Any] | None = None
    # A float8 cell: results.Fp8Stats' fields (mpbench.fp8_rules builds them), None for the rest.
    fp8: dict[str, Any] | None = None
    # How busy the device and the host were (the bottleneck's evidence); None: not measured.
    busy: BusyEvidence | None = None
    params_non_trainable: int | None = None  # frozen parameters and running state
    # A cell stopped early (status "stopped"): the rule and what it measured; its steps are
    # step_times_s, and it has no accuracy, no end-to-end window, no evaluation.
    stopped: StopStats | None = None

    def to_dict(self) -> dict[str, Any]:
        """What the cell sends the runner (its `done` event): every field, the dataclasses
        among them as objects, ready for JSON."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Measurements:
        """Measurements from what `to_dict` wrote, after JSON: every field present and of its
        type, the dataclasses rebuilt, and each dict the record makes a results dataclass of
        holding that dataclass's fields. MalformedMeasurements, naming the field, otherwise."""
        if not isinstance(raw, dict):
            raise MalformedMeasurements(f"an object was expected, not {_kind(raw)}")
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        unknown = sorted(set(raw) - {f.name for f in fields})
        if unknown:
            raise MalformedMeasurements(f"unknown field(s) {', '.join(map(str, unknown))}")
        values = {}
        for f in fields:
            if f.name not in raw:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise MalformedMeasurements(f"{f.name} is missing")
                continue  # a field the cell may leave out: its default
            values[f.name] = _typed(f.name, raw[f.name], hints[f.name])
        for name, part in _RECORD_PARTS.items():
            if values.get(name) is not None:
                _check_fields(name, values[name], part)
        if values.get("status", "ok") not in {status.value for status in Status}:
            raise MalformedMeasurements(f"status {values['status']!r} is no record status")
        return cls(**values)


class MalformedMeasurements(ValueError):
    """A cell's measurements that Measurements.from_dict cannot read; its one-line message
    names the field, and becomes the reason the cell fails with."""


# The dict fields the record turns into a results dataclass (runner/records.py), with the keys
# that dataclass does not take: the divergence signal's reason is the record's `reason`.
_RECORD_PARTS: dict[str, tuple[type, frozenset[str]]] = {
    "compile": (CompileStats, frozenset()),
    "distributed": (DistributedStats, frozenset()),
    "fp8": (Fp8Stats, frozenset()),
    "divergence": (DivergenceInfo, frozenset({"reason"})),
}


def _check_fields(name: str, value: dict[str, Any], part: tuple[type, frozenset[str]]) -> None:
    kind, ignored = part
    fields = dataclasses.fields(kind)
    unknown = sorted(set(value) - {f.name for f in fields} - ignored)
    if unknown:
        raise MalformedMeasurements(f"{name}: unknown field(s) {', '.join(map(str, unknown))}")
    for f in fields:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in value:
            raise MalformedMeasurements(f"{name}: {f.name} is missing")


def _typed(name: str, value: Any, hint: Any) -> Any:
    """`value` as a field of type `hint` holds it (a dataclass rebuilt from its dict), or
    MalformedMeasurements. Containers are checked one level deep: a list's numbers, a dict's
    being a dict; what is inside a dict is its reader's to check."""
    if hint is Any:
        return value
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        *others, last = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        for inner in others:
            try:
                return _typed(name, value, inner)
            except MalformedMeasurements:
                continue
        return _typed(name, value, last)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise MalformedMeasurements(f"{name}: an object was expected, not {_kind(value)}")
        try:
            return hint(**value)
        except TypeError as exc:  # a field missing, or one the dataclass does not have
            raise MalformedMeasurements(f"{name}: {exc}") from None
    origin = typing.get_origin(hint) or hint
    if origin is list:
        if not isinstance(value, list):
            raise MalformedMeasurements(f"{name}: a list was expected, not {_kind(value)}")
        (item,) = typing.get_args(hint)
        for index, element in enumerate(value):
            _typed(f"{name}[{index}]", element, item)
        return value
    if origin is float:  # a whole number too: a framework may give one, and JSON keeps it
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MalformedMeasurements(f"{name}: a number was expected, not {_kind(value)}")
        return value
    if isinstance(value, bool) and origin is not bool:  # a bool is an int to Python
        raise MalformedMeasurements(f"{name}: {origin.__name__} expected, not true or false")
    if not isinstance(value, origin):
        raise MalformedMeasurements(f"{name}: {origin.__name__} expected, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {value!r}"[:80]


class Diverged(Exception):
    """The training loss became non-finite: the cell ends with status `diverged`."""


class Unsupported(Exception):
    """The framework cannot run this cell here (e.g. CUDA asked for, a CPU-only build):
    the cell ends with status `skipped` and this reason."""


def check_finite(loss: float, step: int) -> float:
    if not math.isfinite(loss):
        raise Diverged(f"loss became {loss} at step {step}")
    return loss


@dataclass(frozen=True)
class StepPlan:
    steps_per_epoch: int
    epochs: int  # epochs actually started (the last may be cut short by max_steps)
    total_steps: int
    warmup_steps: int


def plan_steps(
    train_size: int, batch_size: int, epochs: int, max_steps: int | None, warmup_steps: int
) -> StepPlan:
    """Full batches only (drop the ragged last one) so every timed step does equal work."""
    steps_per_epoch = train_size // batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"batch size {batch_size} exceeds the training set ({train_size})")
    total = steps_per_epoch * epochs
    if max_steps is not None:
        total = min(total, max_steps)
    if total <= warmup_steps:
        raise ValueError(
            f"{total} training steps leave none to time after {warmup_steps} warm-up steps; "
            "raise --max-steps/--epochs or lower --warmup-steps"
        )
    return StepPlan(steps_per_epoch, math.ceil(total / steps_per_epoch), total, warmup_steps)


# CPU flags that decide how fast the reduced-precision policies run (docs/architecture.md,
# "The precision contract").
_PRECISION_FLAGS = ("amx_bf16", "avx512_bf16", "bf16", "amx_fp16", "avx512_fp16")


def cpu_device_info() -> DeviceInfo:
    """The CPU as a record's device: model name, and the precision flags as its capability."""
    from mpbench.detect.cpu import read_cpu

    cpu = read_cpu()
    present = cpu.present_flags() or frozenset()
    found = [flag for flag in _PRECISION_FLAGS if flag in present]
    return DeviceInfo(kind="cpu", name=cpu.model, capability=",".join(found) or None)


@dataclass(frozen=True)
class WindowPlan:
    """The end-to-end window: `epochs` passes of `steps_per_epoch` steps each."""

    epochs: int
    steps_per_epoch: int

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


def end_to_end_window(plan: StepPlan) -> WindowPlan:
    """About as many steps as were timed one by one: whole epochs when that is an epoch or
    more (rounded up: up to an epoch more than the timed steps), else a window of that many
    steps (the first batches of a shuffled epoch). A cell trains its timed steps and then
    these, nothing else (an untimed step that only traces or compiles is undone), so its
    record's timed steps plus `end_to_end.steps` are every optimizer step it trained."""
    timed = plan.total_steps - plan.warmup_steps
    if timed < plan.steps_per_epoch:
        return WindowPlan(1, timed)
    return WindowPlan(math.ceil(timed / plan.steps_per_epoch), plan.steps_per_epoch)


def thread_settings(intra_op: int, inter_op: int) -> dict[str, Any]:
    """The thread pools as the framework reports them, plus OMP_NUM_THREADS as this cell
    process sees it: what the record keeps."""
    return {
        "intra_op": intra_op,
        "inter_op": inter_op,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }


def peak_rss_bytes() -> int:
    """Peak resident set size of this (the cell's) process."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def load_dataset(spec: CellSpec, workload: Any, warn: Callable[[str], None]) -> Dataset:
    """Load the workload's data (real or synthetic) as float32 arrays in the workload's shape;
    a language model's as int64 token windows (N, seq_len) and their next tokens."""
    import numpy as np

    from mpbench import data as datasets
    from mpbench.results.schema import DataInfo

    if workload.kind == "user":
        return user_dataset(workload, spec.seed, spec.workload)
    loaded = datasets.load(
        workload.dataset,
        mode=spec.data,
        data_dir=spec.data_dir,
        allow_download=spec.allow_download,
        seed=spec.seed,
        synthetic_train_size=spec.synthetic_train_size,
        synthetic_test_size=spec.synthetic_test_size,
        warn=warn,
        seq_len=spec.seq_len,
    )
    info = DataInfo(**loaded.describe())
    if workload.kind == "language_model":
        tokens = [a.astype(np.int64) for a in (loaded.x_train, loaded.y_train)]
        tokens += [a.astype(np.int64) for a in (loaded.x_test, loaded.y_test)]
        return Dataset(*tokens, info)
    shape = (-1, *workload.input_shape)

    def prepare(images: Any) -> Any:
        # One float32 array, scaled in place: a second one would page in as much memory
        # again, which a cell's start-up pays (about 0.1-0.3 s for MNIST's 188 MB here).
        scaled = images.astype(np.float32)
        scaled /= 255.0
        return scaled.reshape(shape)

    return Dataset(
        prepare(loaded.x_train),
        loaded.y_train.astype(np.int64),
        prepare(loaded.x_test),
        loaded.y_test.astype(np.int64),
        info,
    )


def user_dataset(workload: Any, seed: int, name: str | None = None) -> Dataset:
    """A user workload's `data(seed)` as its cells train on it (workloads/user.py user_data:
    the one place for the forms data() may return and the checks; preflight runs it once
    before the first cell). `name`: the workload as the run names it, for messages."""
    from mpbench.results.schema import DataInfo
    from mpbench.workloads.user import user_data

    data = user_data(workload, seed, name)
    info = DataInfo(
        name=workload.name,
        source="user",
        train_size=data.train_size,
        test_size=data.test_size,
        origin=data.how,
    )
    return Dataset(*data.arrays, info)
