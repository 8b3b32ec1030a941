"""Train one cell in PyTorch: preload data on the device, apply the policy, time every step."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from mpbench.backends.base import (
    BUILDING,
    COMPILING,
    END_TO_END,
    EVALUATING,
    LOADING,
    TRAINING,
    BusyEvidence,
    CellSpec,
    Measurements,
    Progress,
    StepPlan,
    Unsupported,
    WindowPlan,
    check_finite,
    cpu_device_info,
    end_to_end_window,
    enter_phase,
    load_dataset,
    peak_rss_bytes,
    plan_steps,
    thread_settings,
)
from mpbench.backends.busy import CPU_DEVICE_BUSY, HostBusyMeter
from mpbench.backends.stopping import NEVER, StopCheck, stopped_reason
from mpbench.backends.timing import StepTimer
from mpbench.backends.torch.compiled import Compiler, undone
from mpbench.backends.torch.distributed import DataParallel, job_step_times
from mpbench.backends.torch.flops import counted
from mpbench.backends.torch.fp8 import apply_fp8, fp8_compiled
from mpbench.backends.torch.inputs import Inputs, call, device_of
from mpbench.backends.torch.inputs import nbytes as input_bytes
from mpbench.backends.torch.models import build_model, build_optimizer
from mpbench.backends.torch.outputs import OutputReader, read_output
from mpbench.backends.torch.precision import TorchPrecision, apply_policy, read_tf32
from mpbench.backends.torch.profiled import PROFILED_STEPS, profile_casts, profile_steps
from mpbench.backends.torch.steps import Batch, StepResult, cross_entropy, train_step
from mpbench.policies import resolve
from mpbench.results.schema import (
    DeviceInfo,
    EndToEndStats,
    LossScaleStats,
    MemoryStats,
    Status,
    StopStats,
)
from mpbench.telemetry.cell import CellTelemetry
from mpbench.telemetry.memory import MemorySampler, TrainingMemory, rss_sampler
from mpbench.telemetry.memory import fill as fill_memory
from mpbench.telemetry.numerics import torch_grad_health
from mpbench.workloads import get_workload
from mpbench.workloads.inputs import arrays, each, head, rows, samples


def resolve_device(requested: str) -> torch.device:
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise Unsupported(
            f"torch {torch.__version__} sees no CUDA device (CPU-only build?): "
            "install a CUDA build of torch"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise Unsupported("torch reports MPS unavailable on this machine")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def describe_device(device: torch.device) -> DeviceInfo:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return DeviceInfo(
            "cuda", torch.cuda.get_device_name(device), f"{major}.{minor}", device.index
        )
    if device.type == "mps":
        return DeviceInfo("mps", "Apple GPU (MPS)")
    return cpu_device_info()


def synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None  # CPU ops run synchronously


def _to_device(
    array: Any, device: torch.device, channels_last: bool, images: bool = True
) -> torch.Tensor:
    """`images`: 4-d arrays are NHWC images, transposed to the NCHW torch's convolutions take
    (mpbench's own; a user workload's where its `layout` says NHWC)."""
    tensor = torch.from_numpy(array)
    if tensor.dim() == 4 and images:  # data comes channels-last (N, H, W, C); torch convs take NCHW
        tensor = tensor.permute(0, 3, 1, 2).contiguous()
        if channels_last:
            tensor = tensor.to(memory_format=torch.channels_last)
    return tensor.to(device)


def pin_threads(spec: CellSpec) -> dict[str, Any]:
    """Pin torch's thread pools to what the runner chose (the same for every policy of a
    run), and report what torch then uses. set_num_interop_threads must come before any
    inter-op parallel work, so this runs first in the cell."""
    if spec.intra_op_threads:
        torch.set_num_threads(spec.intra_op_threads)
    if spec.inter_op_threads:
        torch.set_num_interop_threads(spec.inter_op_threads)
    return thread_settings(torch.get_num_threads(), torch.get_num_interop_threads())


def memory_meter(device: torch.device) -> Any:
    """Starts measuring training memory now; `.stop()` returns a TrainingMemory."""
    if device.type == "cuda":
        return CudaAllocatorMeter(device)
    if device.type == "mps":
        # MPS keeps no peak counter: sample what tensors occupy (documented as "the current
        # GPU memory occupied by tensors in bytes").
        return MemorySampler(torch.mps.current_allocated_memory, "mps allocator sampled").start()
    return rss_sampler().start()


class CudaAllocatorMeter:
    """memory_allocated when training starts, max_memory_allocated after it
    (docs/measurement.md): the caching allocator's exact counters of bytes in live tensors."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        self.start_bytes = torch.cuda.memory_allocated(device)

    def stop(self) -> TrainingMemory:
        torch.cuda.synchronize(self.device)
        peak = torch.cuda.max_memory_allocated(self.device)
        return TrainingMemory(self.start_bytes, peak, "cuda allocator")


def run_cell(spec: CellSpec, progress: Progress, warn: Callable[[str], None]) -> Measurements:
    """One cell, as a sequence of steps (docs/measurement.md says what each one measures)."""
    cell = _set_up(spec)
    enter_phase(progress, LOADING)
    data, tensors = _preload(cell, warn)
    enter_phase(progress, BUILDING)
    model, optimizer, precision = _build(cell, tensors)
    extra = user_config(cell, model, tensors) if cell.loss else {}
    plan = plan_steps(
        samples(tensors.x_train), cell.global_batch, spec.epochs, spec.max_steps, spec.warmup_steps
    )
    steps = _Steps(
        model, model, optimizer, precision, _batches(cell, tensors, plan), plan,
        synchronizer(cell.device), progress, cell.loss,
        cell.parallel.after_step if cell.parallel else None,
    )  # fmt: skip
    steps, compiler = _trained_forward(cell, steps, tensors)
    state: dict[str, Any] = {}  # the precision in effect, read back during the first step
    stop = StopCheck.for_cell(
        spec, plan, steps.window, samples(tensors.x_test), spec.batch_size, progress
    )
    enter_phase(
        progress, TRAINING, warmup=plan.warmup_steps, timed=plan.total_steps, total=steps.total
    )
    timed = _timed_steps(cell, steps, state, stop)
    stopped = timed.trained.stopped
    end_to_end, busy, test_accuracy, test_loss, compile_stats = None, timed.busy, None, None, None
    if stopped is None:  # a cell that cannot pay trains, profiles and evaluates nothing more
        _steady_window(cell, steps, tensors, timed)
        enter_phase(progress, END_TO_END)
        end_to_end = _train_end_to_end(steps)
        busy = _device_busy(cell, steps, timed.busy)
        enter_phase(progress, EVALUATING)
        test_accuracy, test_loss, compile_stats = _evaluate_cell(
            cell, steps, compiler, tensors, warn
        )
    elif compiler:
        compiler.training_done()
        compile_stats = compiler.stats()
    memory = _memory_stats(cell.device, timed.memory, tensors.nbytes)
    status, reason, divergence = _verdict(precision, timed, len(timed.trained.step_times_s))
    _read_back(state, cell, steps, timed.loss_scale, tensors)
    step_times_s, report, distributed = timed.trained.step_times_s, timed.telemetry.report(), None
    if cell.parallel:
        step_times_s, end_to_end, distributed = _job_figures(
            cell.parallel, step_times_s, end_to_end, plan, report, cell.device
        )
        state["replicas"] = cell.world
    return Measurements(
        framework_version=f"torch {torch.__version__}",
        device=describe_device(cell.device),
        precision=state,
        step_times_s=step_times_s,
        warmup_steps=plan.warmup_steps,
        samples_per_step=cell.global_batch,
        epoch_losses=timed.trained.epoch_losses,
        test_accuracy=test_accuracy,
        test_loss=test_loss,
        params=trainable_parameters(model),
        params_non_trainable=non_trainable_parameters(model),
        memory=memory,
        loss_scale=timed.loss_scale,
        data=data.info,
        end_to_end=end_to_end,
        threads=cell.threads,
        micro_batches_per_step=spec.accumulate,
        status=status,
        reason=reason,
        compile=dataclasses.asdict(compile_stats) if compile_stats else None,
        telemetry=report,
        divergence=divergence,
        distributed=distributed,
        extra_config=extra,
        fp8=cell.fp8,
        busy=busy,
        stopped=stopped,
    )


@dataclass
class _Cell:
    """What every step of one cell shares: the spec and where and how it trains."""

    spec: CellSpec
    workload: Any
    policy: Any
    parallel: DataParallel | None  # one rank of a torchrun job (docs/distributed.md), or None
    device: torch.device
    threads: dict[str, Any]
    channels_last: bool
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None  # None: built-in
    fp8: dict[str, Any] | None = None  # a float8 cell's record (backends/torch/fp8.py)
    output: OutputReader | None = None  # a user model's: the tensor taken from its output
    layout: str | None = None  # a user workload's images as the cell trains on them
    chosen: dict[str, Any] | None = None  # what a user workload chose for the policy

    @property
    def world(self) -> int:
        return self.parallel.world_size if self.parallel else 1

    @property
    def global_batch(self) -> int:
        """A step is one optimizer step over `accumulate` micro-batches of spec.batch_size, on
        every rank: the job's step trains `world` times the samples."""
        return self.spec.effective_batch * self.world


def _set_up(spec: CellSpec) -> _Cell:
    """The workload, the policy, the device (a rank's own under torchrun), the thread pools
    and the seed."""
    workload = get_workload(spec.workload)
    policy = resolve(spec.policy)
    parallel = DataParallel.join(spec)
    device = resolve_device(parallel.device(spec.device) if parallel else spec.device)
    threads = pin_threads(spec)
    torch.manual_seed(spec.seed)
    # channels_last lets cuDNN use Tensor Cores without layout transposes on NVIDIA GPUs.
    channels_last = (
        device.type == "cuda" and workload.kind == "classifier" and len(workload.input_shape) == 3
    )
    return _Cell(spec, workload, policy, parallel, device, threads, channels_last)


@dataclass
class _Tensors:
    x_train: Inputs  # a tensor, or a user workload's dict of them by keyword
    y_train: torch.Tensor
    x_test: Inputs
    y_test: torch.Tensor

    @property
    def nbytes(self) -> int:
        return sum(input_bytes(t) for t in (self.x_train, self.y_train, self.x_test, self.y_test))


def _preload(cell: _Cell, warn: Callable[[str], None]) -> tuple[Any, _Tensors]:
    """The dataset, loaded and copied to the device before anything is timed."""
    data = load_dataset(cell.spec, cell.workload, warn)
    device, channels_last = cell.device, cell.channels_last
    # mpbench's own images are NHWC; a user workload's as its `layout` declares (None: as given)
    given = getattr(cell.workload, "layout", None) if cell.workload.kind == "user" else "NHWC"
    images = given == "NHWC"
    if cell.workload.kind == "user" and given and any(a.ndim == 4 for a in arrays(data.x_train)):
        cell.layout = "NCHW (given NHWC, transposed)" if images else "NCHW (as given)"

    def moved(array: Any) -> torch.Tensor:
        return _to_device(array, device, channels_last, images)

    tensors = _Tensors(
        each(data.x_train, moved),
        torch.from_numpy(data.y_train).to(device),
        each(data.x_test, moved),
        torch.from_numpy(data.y_test).to(device),
    )
    return data, tensors


def _build(
    cell: _Cell, tensors: _Tensors
) -> tuple[torch.nn.Module, torch.optim.Optimizer, TorchPrecision]:
    """The workload's model and optimizer on the device, and the policy applied. A float8
    cell's plan traces one forward of a micro-batch of the training data."""
    sample = head(tensors.x_train, cell.spec.batch_size)
    if cell.workload.kind == "user":
        model, optimizer, cell.loss = build_user(cell.workload, cell.device)
        cell.chosen = chosen_for_policy(cell.workload, model, cell.policy)
        cell.output = read_output(model, cell.workload.output)
        if cell.policy.fp8:
            cell.fp8 = apply_fp8(cell, model, sample, optimizer)
        return model, optimizer, apply_policy(cell.policy, cell.device, cell.spec.loss_scale)
    model = build_model(cell.workload, cell.spec.units, **cell.spec.sizes).to(cell.device)
    if cell.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if cell.policy.fp8:  # before the optimizer, so it holds the converted layers' parameters
        cell.fp8 = apply_fp8(cell, model, sample)
    optimizer = build_optimizer(cell.workload, model.parameters())
    precision = apply_policy(cell.policy, cell.device, cell.spec.loss_scale)
    return model, optimizer, precision


def _batches(cell: _Cell, tensors: _Tensors, plan: StepPlan) -> _Batches:
    spec = cell.spec
    generator = torch.Generator(device=cell.device).manual_seed(spec.seed)
    batches = _Batches(
        tensors.x_train,
        tensors.y_train,
        spec.batch_size,
        plan.steps_per_epoch,
        generator,
        spec.accumulate,
    )
    if cell.parallel:
        batches.rank, batches.world = cell.parallel.rank, cell.world
    return batches


Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (float32 output, targets)


@dataclass(frozen=True)
class _Steps:
    """The step context: what every training step of one cell is made of, the same from the
    compiling step to the last profiled one, so that each phase (the timed steps, the steady
    and end-to-end windows, the profiled steps, the evaluation) takes it whole."""

    model: torch.nn.Module  # the eager module: its weights, what is undone, what evaluates
    forward: Callable[..., torch.Tensor]  # what a step calls: `model`, DDP's, or compiled
    optimizer: torch.optim.Optimizer
    precision: TorchPrecision
    batches: _Batches
    plan: StepPlan  # the timed steps
    sync: Callable[[], None]  # waits for the device: before each clock read
    progress: Progress
    loss: Loss | None = None  # a user workload's; None: the built-ins' cross-entropy
    after_step: Callable[[], None] | None = None  # a rank's: DDP's per-step figures

    @property
    def window(self) -> WindowPlan:
        """The end-to-end window trained after the timed steps."""
        return end_to_end_window(self.plan)

    @property
    def total(self) -> int:
        """The steps the progress display counts: the timed ones and the window's."""
        return self.plan.total_steps + self.window.total_steps

    def train(
        self,
        micro_batches: list[Batch],
        readback: dict[str, Any] | None = None,
        check_skip: bool = False,
    ) -> StepResult:
        """One optimizer step over `micro_batches` (steps.py)."""
        return train_step(
            self.forward,
            self.optimizer,
            self.precision,
            micro_batches,
            readback,
            check_skip=check_skip,
            loss_fn=self.loss,
        )

    def undone(self) -> contextlib.AbstractContextManager[None]:
        """Whatever trains inside is undone on leaving (compiled.undone): weights, optimizer
        and loss scaler as they were."""
        return undone(self.model, self.optimizer, self.precision.scaler)


def _trained_forward(
    cell: _Cell, steps: _Steps, tensors: _Tensors
) -> tuple[_Steps, Compiler | None]:
    """The steps calling what they train: the model, wrapped for DDP on a rank, compiled with
    --compile or as a float8 cell (torchao's float8 training is meant to run compiled:
    fp8_compiled), its compiling step undone, so the cell trains the eager cell's steps."""
    spec = cell.spec
    steps.model.train()
    trained_module = cell.parallel.wrap(steps.model, cell.device) if cell.parallel else steps.model
    if not (spec.compile or (cell.policy.fp8 and fp8_compiled(spec))):
        return dataclasses.replace(steps, forward=trained_module), None
    enter_phase(steps.progress, COMPILING)
    compiler = Compiler(trained_module)
    compiled = dataclasses.replace(steps, forward=compiler.module)
    first = [(head(tensors.x_train, spec.batch_size), tensors.y_train[: spec.batch_size])]
    first *= spec.accumulate
    # The compiling step trains nothing: the cell then trains the eager cell's steps, and
    # meets the memory meter as the eager cell does (no gradients, no optimizer state: the
    # first timed step allocates them, as training memory, in both).
    with compiled.undone():
        compiler.compile_step(lambda: compiled.train(first), compiled.sync)
    return compiled, compiler


@dataclass
class _Timed:
    """The timed steps' figures."""

    trained: _Trained
    telemetry: CellTelemetry
    memory: TrainingMemory
    loss_scale: LossScaleStats | None
    busy: BusyEvidence  # the host's CPU time over the timed steps


def _timed_steps(cell: _Cell, steps: _Steps, state: dict[str, Any], stop: StopCheck) -> _Timed:
    """The timed steps, with the memory meter and the telemetry around them; `stop` may end
    them early (a cell that cannot pay: backends/stopping.py)."""
    precision, plan = steps.precision, steps.plan
    meter = memory_meter(cell.device)
    dynamic = precision.scaler is not None and precision.static_scale is None
    telemetry = CellTelemetry(
        str(cell.device), dynamic_scale=dynamic, warmup_steps=plan.warmup_steps
    )
    telemetry.start_timed()
    host = HostBusyMeter().start()
    trained: _Trained | None = None
    try:
        trained = _train_synced(steps, state, telemetry, stop)
    except BaseException:
        # The memory sampler's thread reads every 20 ms: left running, it would take the GIL
        # from whatever this process does next (a fallback's steps, an in-process caller).
        with contextlib.suppress(Exception):  # the failure that got here is the news
            meter.stop()
        raise
    finally:
        steps = len(trained.step_times_s) if trained else plan.total_steps  # stopped: fewer
        telemetry.stop_timed(steps * cell.global_batch)
    # The CPU time is shared out among the intra-op threads on a CPU; on an accelerator one
    # Python thread launches the work.
    busy = host.stop(torch.get_num_threads() if cell.device.type == "cpu" else 1)
    training_memory = meter.stop()
    # The loss scale's figures are the timed steps' (those the side file numbers 1..N and
    # the whole-cell verdict judges): read before the end-to-end window trains on.
    loss_scale = (
        _loss_scale_stats(precision, trained.skipped_steps, steps, cell.spec)
        if precision.scaler
        else None
    )
    return _Timed(trained, telemetry, training_memory, loss_scale, busy)


def _device_busy(cell: _Cell, steps: _Steps, busy: BusyEvidence) -> BusyEvidence:
    """On CUDA, the GPU's busy time over PROFILED_STEPS more steps under torch.profiler; on a
    CPU, a 16-bit cell's share of the step spent converting dtypes, profiled alike
    (profiled.py); the steps undone afterwards (weights, optimizer, scaler and RNG), so the
    cell trains exactly the steps it would have. Elsewhere the timed steps' host figures as
    they are."""
    profiler = _busy_profiler(cell, busy)
    if profiler is None:
        return busy
    count = min(PROFILED_STEPS, steps.batches.steps_per_epoch)
    micro_batches = steps.batches.epoch(count)

    def step() -> None:
        steps.train(next(micro_batches))

    devices = [cell.device.index or 0] if cell.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), steps.undone():
        return profiler(step, count, steps.sync, busy)


def _busy_profiler(cell: _Cell, busy: BusyEvidence) -> Callable[..., BusyEvidence] | None:
    """What profiles this cell's extra steps (profiled.py), or None, with `busy` told why."""
    if cell.device.type == "cpu":
        busy.unavailable["device_busy_fraction"] = CPU_DEVICE_BUSY
        # float32 converts nothing: float32 weights, inputs and gradients.
        return None if cell.policy.compute_dtype == "float32" else profile_casts
    if cell.device.type != "cuda":
        busy.source = f"none: no kernel timing on {cell.device.type}"
        busy.unavailable["device_busy_fraction"] = (
            f"torch.profiler times CUDA kernels only, not {cell.device.type}'s"
        )
        return None
    return profile_steps


def _steady_window(cell: _Cell, steps: _Steps, tensors: _Tensors, timed: _Timed) -> None:
    """Energy of timed steps too short for the energy counter (NVML's needs 1 s): the same
    step, on the first batch, free-running for at least that long and measured alone, then
    undone (weights, optimizer, scaler and RNG), so the cell trains exactly the steps it
    would have. After the memory meter stopped; the state copies are on the host. Not on a
    rank: every rank would have to run as many steps as the others (docs/telemetry.md)."""
    telemetry = timed.telemetry
    seconds = telemetry.steady_seconds()
    if seconds is None or cell.parallel:
        return
    measured = timed.trained.step_times_s[steps.plan.warmup_steps :]
    step_s = statistics.median(measured) if measured else seconds
    chunk = max(1, int(seconds / max(step_s, 1e-6) / 4))  # about four syncs in the window
    rows = cell.spec.batch_size
    batch = [(head(tensors.x_train, rows), tensors.y_train[:rows])] * cell.spec.accumulate
    cuda = [cell.device.index or 0] if cell.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), steps.undone():
        steps.sync()
        telemetry.start_steady()
        start, count = time.monotonic(), 0
        while time.monotonic() - start < seconds:
            for _ in range(chunk):
                steps.train(batch)
            count += chunk
            steps.sync()
        telemetry.stop_steady(count)


def _evaluate_cell(
    cell: _Cell,
    steps: _Steps,
    compiler: Compiler | None,
    tensors: _Tensors,
    warn: Callable[[str], None],
) -> tuple[float, float, Any]:
    """Test accuracy and loss; with --compile, the compiler's figures (and a warning when
    it recompiled)."""
    model, x, y, batch_size = steps.model, tensors.x_test, tensors.y_test, cell.spec.batch_size
    if not compiler:
        accuracy, loss = _evaluate(model, model, steps.precision, x, y, batch_size, steps.loss)
        return accuracy, loss, None
    compiler.training_done()
    # A rank evaluates its module eagerly: a compiled DDP forward is for training.
    forward = model if cell.parallel else steps.forward
    accuracy, loss = _evaluate(forward, model, steps.precision, x, y, batch_size, steps.loss)
    compile_stats = compiler.stats()
    if compile_stats.recompiles:
        warn(
            f"torch.compile recompiled {compile_stats.recompiles} time(s) after the first "
            "step (0 expected); run with TORCH_LOGS=recompiles to see why"
        )
    return accuracy, loss, compile_stats


def _memory_stats(
    device: torch.device, training_memory: TrainingMemory, dataset_bytes: int
) -> MemoryStats:
    memory = MemoryStats(host_peak_rss_bytes=peak_rss_bytes())
    if device.type == "cuda":
        memory.device_peak_allocated_bytes = torch.cuda.max_memory_allocated(device)
        memory.device_peak_reserved_bytes = torch.cuda.max_memory_reserved(device)
    fill_memory(memory, training_memory, dataset_bytes)
    return memory


def _verdict(precision: TorchPrecision, timed: _Timed, counted: int) -> tuple[str, str | None, Any]:
    """The cell's status, reason and divergence: a stopped cell is stopped (its few steps
    judge no loss scale); a loss-scaled cell is judged on its timed steps' skips (cells
    shorter than the detector's window on all of them, here)."""
    if timed.trained.stopped is not None:
        return Status.STOPPED.value, stopped_reason(timed.trained.stopped), None
    if precision.scaler:
        scale_text = (
            f"a static loss scale of {precision.static_scale:g}"
            if precision.static_scale is not None
            else "a dynamic loss scale"
        )
        skipped = timed.trained.skipped_steps
        fired = timed.telemetry.end_of_cell(skipped, counted, scale_text)
        if fired is not None:
            return "diverged", fired.reason, fired.to_dict()
    return "ok", None, None


def _read_back(
    state: dict[str, Any],
    cell: _Cell,
    steps: _Steps,
    loss_scale: LossScaleStats | None,
    tensors: _Tensors,
) -> None:
    """The precision actually in effect, as the framework reports it, into `state`; for a
    language model also the dtype each op of a forward pass and its loss ran in, as torch's
    dispatcher saw them (op_dtypes.py)."""
    model, precision = steps.model, steps.precision
    state.update(read_tf32())
    state.update(
        policy=cell.policy.name,
        variable_dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
        loss_scaling=bool(precision.scaler and precision.scaler.is_enabled()),
        cudnn_benchmark=torch.backends.cudnn.benchmark,
        memory_format="channels_last" if cell.channels_last else "contiguous",
    )
    if loss_scale:
        state["loss_scale_mode"] = loss_scale.mode
    if cell.workload.kind in ("language_model", "user"):
        from mpbench.backends.torch.op_dtypes import traced_op_dtypes

        x, y = head(tensors.x_test, 2), tensors.y_test[:2]
        state.update(traced_op_dtypes(model, precision, x, y, steps.loss))


def _job_figures(
    parallel: DataParallel,
    step_times_s: list[float],
    end_to_end: EndToEndStats,
    plan: StepPlan,
    telemetry: dict[str, Any],
    device: torch.device,
) -> tuple[list[float], EndToEndStats, dict[str, Any]]:
    """Every rank's figures gathered (every rank calls this: it is a collective): the
    job's step times (the slowest rank, step by step), the end-to-end window of the slowest
    rank at the job's samples, the energy of all ranks, each rank's median step."""
    energy = telemetry.get("energy") or {}
    mine = {"steps": step_times_s, "window_s": end_to_end.seconds, "joules": energy.get("joules")}
    everyone = parallel.gather(mine)
    job = job_step_times([rank["steps"] for rank in everyone])
    medians = [statistics.median(rank["steps"][plan.warmup_steps :]) for rank in everyone]
    seconds = max(rank["window_s"] for rank in everyone)
    samples = end_to_end.samples_per_s * end_to_end.seconds * parallel.world_size
    window = dataclasses.replace(end_to_end, samples_per_s=samples / seconds, seconds=seconds)
    if energy:
        joules = [rank["joules"] for rank in everyone]
        if all(j is not None for j in joules):
            per_joule = energy["joules_per_sample"] / energy["joules"] if energy["joules"] else 0
            per_sample = per_joule * sum(joules)  # the same samples, every rank's joules
            energy.update(joules=sum(joules), joules_per_sample=per_sample)
            energy["source"] = f"{energy['source']}, summed over {len(joules)} ranks"
        else:
            energy.update(joules=None, joules_per_sample=None)
            energy["reason"] = "not every rank could measure its device's energy"
    devices = "real" if device.type == "cuda" else "shared"
    return job, window, parallel.report(medians, devices, plan.warmup_steps)


def optimizer_parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The parameters the optimizer updates (the eager module's, also under --compile)."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def _loss_scale_stats(
    precision: TorchPrecision, skipped: int, counted: int, spec: CellSpec
) -> LossScaleStats:
    static = precision.static_scale is not None
    return LossScaleStats(
        final_scale=float(precision.scaler.get_scale()),
        skipped_steps=skipped,
        mode="static" if static else "dynamic",
        initial_scale=precision.static_scale if static else 65536.0,  # GradScaler's default
        counted_steps=counted,
        skip_unit=(
            f"optimizer step (all {spec.accumulate} micro-batches)"
            if spec.accumulate > 1
            else "optimizer step"
        ),
    )


@dataclass
class _Batches:
    """Whole batches drawn from tensors preloaded on the device, reshuffled every epoch;
    each step takes `accumulate` consecutive micro-batches."""

    x: Inputs  # a tensor, or a user workload's dict of them by keyword
    y: torch.Tensor
    batch_size: int
    steps_per_epoch: int
    generator: torch.Generator
    accumulate: int = 1
    # Data parallel: every rank draws the same order (same seed) and takes its own slice of
    # each global step, `world * accumulate` micro-batches.
    rank: int = 0
    world: int = 1
    # One (x, y) buffer per micro-batch of a step, which each step's batches are gathered
    # into (_gather), made at the first step.
    buffers: list[tuple[Inputs, torch.Tensor]] = field(default_factory=list)

    def epoch(self, steps: int | None = None) -> Iterator[list[tuple[Inputs, torch.Tensor]]]:
        order = torch.randperm(samples(self.x), device=device_of(self.x), generator=self.generator)
        size = self.batch_size
        for index in range(steps or self.steps_per_epoch):
            step = []
            first = (index * self.world + self.rank) * self.accumulate
            for slot, micro in enumerate(range(first, first + self.accumulate)):
                step.append(self._gather(slot, order[micro * size : (micro + 1) * size]))
            yield step

    def _gather(self, slot: int, rows: torch.Tensor) -> tuple[Inputs, torch.Tensor]:
        """The batch of `rows`, gathered into the same buffers every step. A new tensor per
        batch (`x[rows]`) made the step itself slower: at the CPU default (64 units, batch
        8192, a 25 MB batch) a hand-written loop's step took 10.0 ms (float32) and 6.57 ms
        (bf16) on fresh gathered batches against 9.23 and 5.93 ms on a reused buffer (medians
        of 5 in-process rounds, a 2-core AMX Xeon, load 0.8-1.2): each new batch is fresh
        pages to fault in and unmap again. A step is over before the next batch is gathered
        (a CPU runs it synchronously, a GPU in stream order), so nothing reads a buffer
        while it is overwritten. A tensor of another layout (channels_last) is gathered as
        it was: index_select's `out` would not keep its strides. A dict x (a user workload's
        inputs by keyword) is gathered input by input, the same rows of each."""
        if not all(t.is_contiguous() for t in [*arrays(self.x), self.y]):
            return each(self.x, lambda t: t[rows]), self.y[rows]
        shape = (len(rows),)

        def buffer(t: torch.Tensor) -> torch.Tensor:
            return t.new_empty(shape + tuple(t.shape[1:]))

        while len(self.buffers) <= slot:
            self.buffers.append((each(self.x, buffer), buffer(self.y)))
        x, y = self.buffers[slot]
        for source, out in zip([*arrays(self.x), self.y], [*arrays(x), y], strict=True):
            torch.index_select(source, 0, rows, out=out)
        return x, y


@dataclass
class _Trained:
    step_times_s: list[float]
    epoch_losses: list[float]
    skipped_steps: int
    stopped: StopStats | None = None  # a cell that could not pay, stopped early


def _train_synced(
    steps: _Steps,
    readback: dict[str, Any],
    telemetry: CellTelemetry,
    stop: StopCheck | None = None,
) -> _Trained:
    """Every step timed on its own, the device synchronised before each clock read. After
    each step's clock read (outside the timed region) its numerics go to `telemetry`: the
    loss, the scale, whether it was skipped and, for the steps the side file keeps, the
    gradient health; a divergence signal ends the cell there (CellDiverged), and `stop`
    where it cannot pay (one comparison a step between its decisions)."""
    precision, plan, total = steps.precision, steps.plan, steps.total
    timer = StepTimer(steps.sync)
    epoch_losses: list[float] = []
    skipped_steps = 0
    step = 0
    stopped = None
    next_check = stop.next_step if stop else NEVER
    while step < plan.total_steps and stopped is None:
        losses: list[float] = []
        for micro_batches in steps.batches.epoch():
            if step >= plan.total_steps:
                break
            timer.start()
            result = steps.train(
                micro_batches,
                readback if step == 0 else None,
                check_skip=precision.scaler is not None,
            )
            timer.stop()
            step += 1
            if steps.after_step:
                steps.after_step()
            loss = result.loss.item()
            grad_norm = nonfinite = None
            if telemetry.wants_gradients():
                # After scaler.step the gradients are unscaled in place (skipped step or
                # not), and accumulation left the mean gradient of the effective batch.
                grad_norm, nonfinite = torch_grad_health(optimizer_parameters(steps.optimizer))
            scale = float(precision.scaler.get_scale()) if precision.scaler else None
            telemetry.step(step, loss, scale, result.skipped, grad_norm, nonfinite)
            losses.append(loss)
            skipped_steps += bool(result.skipped)
            steps.progress(step, total)
            if step >= next_check:
                assert stop is not None
                stopped = stop.decide(timer.times_s)
                if stopped is not None:
                    break
                next_check = stop.next_step
        epoch_losses.append(sum(losses) / len(losses))
    return _Trained(timer.times_s, epoch_losses, skipped_steps, stopped)


_TORCH_PIPELINE = (
    "tensors preloaded on the device, reshuffled each epoch (randperm), whole batches; "
    "no per-step synchronisation"
)


def _train_end_to_end(steps: _Steps) -> EndToEndStats:
    """Whole epochs free-running after the timed steps, as a training loop runs them: the
    loss is not read and the device not synchronised until the window ends (GradScaler still
    checks for overflow each step, as it does in any AMP loop)."""
    window, batches, done = steps.window, steps.batches, steps.plan.total_steps
    timer = StepTimer(steps.sync)  # one interval: the whole window
    count = 0
    loss = None
    timer.start()
    for _ in range(window.epochs):
        for micro_batches in batches.epoch(window.steps_per_epoch):
            loss = steps.train(micro_batches).loss
            count += 1
            steps.progress(done + count, steps.total)
    seconds = timer.stop()
    assert loss is not None  # plan_steps guarantees at least one step per epoch
    check_finite(loss.item(), done + count)
    samples = count * batches.batch_size * batches.accumulate  # this rank's (see _job_figures)
    return EndToEndStats(samples / seconds, count, seconds, _TORCH_PIPELINE)


def _test_batches(
    forward: Callable[[torch.Tensor], torch.Tensor],
    model: torch.nn.Module,
    precision: TorchPrecision,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    batch_size: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(float32 output, targets) of each test batch, under the training autocast state, in
    eval mode. `forward` (the compiled module with --compile) sees full batches only, so a
    short last batch cannot recompile it; that remainder goes through the eager `model`,
    which shares its weights."""
    model.eval()
    try:
        for start in range(0, samples(x_test), batch_size):
            batch = slice(start, start + batch_size)
            xb, yb = rows(x_test, batch), y_test[batch]
            with precision.autocast():
                output = call(forward if len(yb) == batch_size else model, xb)
            yield output.float(), yb
    finally:
        model.train()


@torch.no_grad()
def _evaluate(
    forward: Callable[[torch.Tensor], torch.Tensor],
    model: torch.nn.Module,
    precision: TorchPrecision,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    batch_size: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[float | None, float]:
    """(accuracy, mean loss) over every prediction: a sample's, or a token's. `loss_fn`: a
    user workload's (mean) loss, its accuracy only where the targets are class indices of
    the output's last axis."""
    batches = _test_batches(forward, model, precision, x_test, y_test, batch_size)
    if loss_fn is not None:
        return _evaluate_user(batches, y_test, loss_fn)
    correct, loss_sum = 0, 0.0
    for output, yb in batches:
        loss_sum += cross_entropy(output, yb, reduction="sum").item()
        correct += (output.argmax(dim=-1) == yb).sum().item()
    return correct / y_test.numel(), loss_sum / y_test.numel()


def _evaluate_user(
    batches: Iterator[tuple[torch.Tensor, torch.Tensor]],
    y_test: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[float | None, float]:
    correct, loss_sum, classes = 0, 0.0, not y_test.is_floating_point()
    for output, yb in batches:
        loss_sum += loss_fn(output, yb).item() * len(yb)
        classes = classes and output.shape[:-1] == yb.shape
        if classes:
            correct += (output.argmax(dim=-1) == yb).sum().item()
    return (correct / y_test.numel() if classes else None), loss_sum / len(y_test)


def build_user(workload: Any, device: torch.device) -> tuple[Any, Any, Any]:
    """A user workload's torch builder, called with the device: (model, optimizer, loss),
    checked to be what the cell can train (TypeError naming the workload otherwise)."""
    built = workload.torch(device)
    if not isinstance(built, tuple) or len(built) != 3:
        raise TypeError(
            f"workload {workload.name}: torch(device) must return (model, optimizer, loss), "
            f"got {type(built).__name__}"
        )
    model, optimizer, loss = built
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"workload {workload.name}: the model is a {type(model).__name__}, "
                        "not a torch.nn.Module")  # fmt: skip
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"workload {workload.name}: the optimizer is a "
                        f"{type(optimizer).__name__}, not a torch.optim.Optimizer")  # fmt: skip
    if not callable(loss):
        raise TypeError(f"workload {workload.name}: the loss is not callable")
    return model.to(device), optimizer, loss


def trainable_parameters(model: torch.nn.Module) -> int:
    """The record's `params`: the parameters training updates (Keras' trainable_weights)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def non_trainable_parameters(model: torch.nn.Module) -> int:
    """The record's `params_non_trainable`, as Keras counts its non_trainable_weights: frozen
    parameters and the floating-point state the model keeps in persistent buffers
    (BatchNorm's running mean and variance; not its integer batch counter, nor a cache a
    module marks non-persistent)."""
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    state = 0
    for module in model.modules():
        transient = module._non_persistent_buffers_set  # torch's own set, since torch 1.6
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and buffer.is_floating_point() and name not in transient:
                state += buffer.numel()
    return frozen + state


def user_config(cell: _Cell, model: torch.nn.Module, tensors: _Tensors) -> dict[str, Any]:
    """What a user workload's cell determined itself: its FLOPs, the tensor it took from the
    model's output, the layout its images trained in, what it chose for the policy."""
    extra = user_flops(cell, model, tensors)
    if cell.output is not None and cell.output.seen:
        extra["output"] = cell.output.seen
    if cell.layout:
        extra["data_layout"] = cell.layout
    if cell.chosen:
        extra["chosen_for_policy"] = cell.chosen
    return extra


def chosen_for_policy(workload: Any, model: torch.nn.Module, policy: Any) -> dict[str, Any] | None:
    """A user workload's torch_policy hook, called before anything is counted or timed (so
    FLOPs, the fp8 plan and the steps all see the model as it trains under the policy); what
    it returns, checked to be a dict (TypeError naming the workload otherwise)."""
    hook = getattr(workload, "torch_policy", None)
    chosen = hook(model, policy) if hook is not None else None
    if chosen is not None and not isinstance(chosen, dict):
        raise TypeError(f"workload {workload.name}: torch_policy must return a dict or None, "
                        f"got {type(chosen).__name__}")  # fmt: skip
    return chosen


def user_flops(cell: _Cell, model: torch.nn.Module, tensors: _Tensors) -> dict[str, Any]:
    """A user workload's FLOPs per micro-batch: given by the workload, else counted over one
    forward and backward pass in float32, attention on the math path (flops.py: a fused
    attention kernel would be scored 0); the gradients are then dropped: nothing trains."""
    batch = cell.spec.batch_size
    given = cell.workload.flops(batch)
    if given is not None:
        return {"flops_per_micro_batch": given, "flops_source": "the workload"}
    xb, yb = head(tensors.x_train, batch), tensors.y_train[:batch]
    devices = [cell.device.index or 0] if cell.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # dropout draws: the cell's RNG untouched
        count = counted(model, lambda: cell.loss(call(model, xb).float(), yb).backward())
    model.zero_grad(set_to_none=True)
    return {
        "flops_per_micro_batch": count.total,
        "flops_source": f"{count.source} (forward + backward, float32)",
    }
