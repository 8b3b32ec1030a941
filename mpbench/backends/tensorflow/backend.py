"""Run one cell in TensorFlow / Keras 3: the runner calls `run_cell` in the cell's own process.

TensorFlow is imported inside `run_cell`, after its logging is configured (runtime.py), so
that importing this module stays cheap and quiet.
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mpbench.backends import base
from mpbench.backends.base import (
    BUILDING,
    END_TO_END,
    EVALUATING,
    LOADING,
    TRAINING,
    BusyEvidence,
    CellSpec,
    Measurements,
    Progress,
    enter_phase,
)
from mpbench.backends.busy import CPU_DEVICE_BUSY, HostBusyMeter, cpu_threads
from mpbench.backends.stopping import StopCheck, stopped_reason
from mpbench.backends.tensorflow import distributed
from mpbench.backends.tensorflow.device import Placement
from mpbench.policies import POLICIES
from mpbench.results.schema import MemoryStats, Status
from mpbench.telemetry.cell import CellTelemetry
from mpbench.telemetry.memory import fill as fill_memory
from mpbench.workloads import get_workload

LOOPS = ("fit", "custom")
# The axes that move a batch of images from one layout to the other (UserWorkload.layout).
_TRANSPOSE = {("NCHW", "NHWC"): (0, 2, 3, 1), ("NHWC", "NCHW"): (0, 3, 1, 2)}

# The runner reports an ImportError from importing a backend as a skipped cell with the
# install hint; look for TensorFlow without importing it (that happens in run_cell).
if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None:
    raise ImportError("No module named 'tensorflow' (or 'keras')")


def run_cell(spec: CellSpec, progress: Progress, warn: Callable[[str], None]) -> Measurements:
    """One cell, as a sequence of steps (docs/measurement.md says what each one measures)."""
    _refuse_unsupported(spec)
    from mpbench.backends.tensorflow.runtime import import_tensorflow

    tf = import_tensorflow(spec.verbose)
    import keras

    from mpbench.backends.tensorflow import fp8

    cell = _set_up(tf, spec)
    enter_phase(progress, LOADING)
    data, data_layout = _data(spec, cell.workload, warn)
    plan = base.plan_steps(
        len(data.x_train), spec.effective_batch * cell.world, spec.epochs, spec.max_steps,
        spec.warmup_steps,
    )  # fmt: skip
    window = base.end_to_end_window(plan)
    total = plan.total_steps + window.total_steps
    # One device: everything under it. Replicas: the strategy places the work itself.
    placed = (
        tf.device(cell.placement.tf_device) if cell.mirrored is None else contextlib.nullcontext()
    )
    with placed:
        enter_phase(progress, BUILDING)
        model, jit_compile, state = _build(tf, cell, data, warn)
        step = _training(cell, model, jit_compile, data, plan)
        stop = StopCheck.for_cell(spec, plan, window, len(data.x_test), cell.batch, progress)
        # The first step traces (and with jit, compiles) the train function: a warm-up step.
        enter_phase(
            progress, TRAINING, warmup=plan.warmup_steps, timed=plan.total_steps, total=total
        )
        timed = _timed_steps(tf, cell, model, step, plan, progress, total, state, stop)
        end_to_end, accuracy, test_loss = None, None, None
        if timed.trained.stopped is None:  # a cell that cannot pay trains nothing more
            enter_phase(progress, END_TO_END)
            end_to_end, e2e_trained = _end_to_end(
                cell, model, step, data, window, progress, plan.total_steps, total
            )
            enter_phase(progress, EVALUATING)
            accuracy, test_loss = _evaluate(
                cell, model, data, timed.trained.micro_batches_run + e2e_trained
            )
        status, reason, divergence = _verdict(spec, timed)
    memory = _memory_stats(cell, timed, data)
    params = fp8.param_counts(model)
    return Measurements(
        framework_version=f"tensorflow {tf.__version__} / keras {keras.__version__}",
        device=cell.placement.info,
        precision=state,
        step_times_s=timed.trained.step_times_s,
        warmup_steps=plan.warmup_steps,
        samples_per_step=spec.effective_batch * cell.world,
        epoch_losses=timed.trained.epoch_losses,
        test_accuracy=accuracy,
        test_loss=test_loss,
        params=params.trainable,
        params_non_trainable=params.non_trainable,
        memory=memory,
        loss_scale=timed.loss_scale,
        data=data.info,
        extra_config={
            "jit_compile": jit_compile,
            "loop": spec.loop,
            # The same words at every world size: compare matches a data-parallel cell's
            # config to its world-size-1 twin's (the strategy's input path is in the record's
            # precision.replica_devices and distributed fields).
            "input_pipeline": "pre-batched tf.data, prefetched"
            + (" to the device" if cell.placement.is_gpu else ""),
            **cell.flops,
            **data_layout,
        },
        end_to_end=end_to_end,
        threads=cell.threads,
        micro_batches_per_step=spec.accumulate,
        status=status,
        reason=reason,
        telemetry=timed.telemetry.report(),
        divergence=divergence,
        distributed=cell.mirrored.stats(spec) if cell.mirrored else None,
        fp8=cell.fp8,
        busy=timed.busy,
        stopped=timed.trained.stopped,
    )


def _data(
    spec: CellSpec, workload: Any, warn: Callable[[str], None]
) -> tuple[base.Dataset, dict[str, str]]:
    """The cell's data, and for a user workload that declares its images' layout the layout
    the cell trained on (`data_layout`, as torch's cells say it): 4-d arrays as Keras' image
    layers take them (NHWC, its default image format; NCHW where Keras is configured
    channels_first), transposed where the workload's `layout` is the other."""
    import keras
    import numpy as np

    data = base.load_dataset(spec, workload, warn)
    _refuse_named_inputs(data.x_train)
    given = getattr(workload, "layout", None) if workload.kind == "user" else None
    if given is None or data.x_train.ndim != 4:
        return data, {}  # no images, or a layout nobody declared: as they are
    wanted = "NHWC" if keras.config.image_data_format() == "channels_last" else "NCHW"
    if given == wanted:
        return data, {"data_layout": f"{wanted} (as given)"}
    # Contiguous copies: a strided view would be copied again by every batch tf.data draws.
    x_train, x_test = (
        np.ascontiguousarray(x.transpose(_TRANSPOSE[(given, wanted)]))
        for x in (data.x_train, data.x_test)
    )
    moved = base.Dataset(x_train, data.y_train, x_test, data.y_test, data.info)
    return moved, {"data_layout": f"{wanted} (given {given}, transposed)"}


def _refuse_named_inputs(x: Any) -> None:
    """base.Unsupported (a skipped cell, with the reason) for a user workload whose x is a
    dict of inputs by keyword (workloads/inputs.py): its torch cells call model(**x); this
    backend's steps, FLOP count, read-back and fp8 check feed one array, so its Keras cells
    are skipped rather than failed."""
    from mpbench.workloads.inputs import named

    if named(x):
        raise base.Unsupported(
            f"its data() gives x as a dict of inputs ({', '.join(x)}): mpbench feeds a dict x "
            "to torch models only (model(**x)); a Keras cell needs x as one array"
        )


def _user_flops(cell: _Cell, model: Any, data: Any) -> dict[str, Any]:
    """A user workload's FLOPs per micro-batch as it gives them, else counted from the
    TensorFlow graph of one training step on the cell's first micro-batch (flops.py: traced,
    not run), or unknown with the reason."""
    given = cell.workload.flops(cell.spec.batch_size)
    if given is not None:
        return {"flops_per_micro_batch": given, "flops_source": "the workload"}
    from mpbench.backends.tensorflow import flops

    micro = slice(0, cell.spec.batch_size)
    cell.counted = flops.counted(model, data.x_train[micro], data.y_train[micro])
    return cell.counted.record()


def _refuse_unsupported(spec: CellSpec) -> None:
    """base.Unsupported (a skipped cell, with the reason) before TensorFlow is imported."""
    if spec.loop not in LOOPS:
        raise base.Unsupported(f"unknown training loop {spec.loop!r} (choose from fit, custom)")
    if spec.device.split(":", 1)[0].lower() == "mps":
        raise base.Unsupported(
            "TensorFlow has no 'mps' device (Apple GPUs need the tensorflow-metal plugin)"
        )
    refused = distributed.refusal(spec)
    if refused:
        raise base.Unsupported(refused)


@dataclass
class _Cell:
    """What every step of one cell shares: the spec and where and how it trains."""

    spec: CellSpec
    workload: Any
    threads: dict[str, Any]
    placement: Placement
    mirrored: Any  # distributed.Mirrored: replicas in sync on this node, or None
    fp8: dict[str, Any] | None = None  # a float8 cell's record (tensorflow/fp8.py), once labelled
    # A user workload's flops_per_micro_batch and flops_source (_user_flops), once built.
    flops: dict[str, Any] = field(default_factory=dict)
    counted: Any = None  # flops.Count, where the FLOPs were counted from the graph

    @property
    def world(self) -> int:
        return self.spec.world_size

    @property
    def batch(self) -> int:
        """A step is one optimizer step over `accumulate` micro-batches of spec.batch_size,
        on each of the `world` replicas: `batch` samples per micro-batch step in all."""
        return self.spec.batch_size * self.world


def _set_up(tf: Any, spec: CellSpec) -> _Cell:
    """The thread pools, the workload, the device (or the replicas' strategy) and the policy."""
    from mpbench.backends.tensorflow import device, precision

    threads = base.thread_settings(
        *device.pin_threads(tf, spec.intra_op_threads, spec.inter_op_threads)
    )
    workload = get_workload(spec.workload)
    mirrored = None
    if spec.world_size > 1:
        # Before the runtime starts (the strategy starts it): logical CPUs / visible GPUs.
        replicas = device.resolve_replicas(tf, spec.device, spec.world_size)
        placement = replicas.placement
        mirrored = distributed.mirrored(tf, replicas, spec.world_size)
    else:
        placement = device.resolve(tf, spec.device)
    precision.apply_policy(spec.policy, placement)
    return _Cell(spec, workload, threads, placement, mirrored)


def _build(
    tf: Any, cell: _Cell, data: Any, warn: Callable[[str], None]
) -> tuple[Any, bool, dict[str, Any]]:
    """The compiled model (in the strategy's scope for replicas: mirrored variables), whether
    XLA is on, and the precision in effect as read back from Keras."""
    import keras

    from mpbench.backends.tensorflow import models, precision

    spec = cell.spec
    # Outside the scope for the rest: fit, predict and the custom step use the strategy
    # themselves, and a Keras loss inside it divides by the replica count.
    with cell.mirrored.strategy.scope() if cell.mirrored else contextlib.nullcontext():
        keras.utils.set_random_seed(spec.seed)
        model = models.compiled_model(
            cell.workload,
            spec.units,
            spec.policy,
            spec.loop,
            spec.jit,
            spec.loss_scale if POLICIES[spec.policy].loss_scaling else None,
            spec.accumulate,
            spec.sizes,
        )
        if cell.workload.kind != "user":  # a user workload owns its optimizer
            models.check_optimizer(model.optimizer, cell.workload.optimizer)
        jit_compile = bool(model.jit_compile)  # Keras may refuse XLA for a model
        if spec.jit and not jit_compile:
            warn("XLA (jit_compile) was requested but Keras disabled it for this model")
        state = precision.read_back(model, data.x_test[:1], spec.loop, jit_compile)
        # Which dtype each op ran in, from one traced forward and its loss (never executed,
        # so outside the timed steps and without a side effect on the model).
        if cell.workload.kind == "language_model":
            state.update(precision.traced_op_dtypes(model, data.x_test[:2], data.y_test[:2]))
        elif cell.workload.kind == "user":
            state.update(precision.user_op_dtypes(model, data.x_test[:2], data.y_test[:2]))
    if cell.workload.kind == "user":
        cell.flops = _user_flops(cell, model, data)
    if state["loss_scaling"] != POLICIES[spec.policy].loss_scaling:
        raise RuntimeError(
            f"loss scaling is {'on' if state['loss_scaling'] else 'off'} "
            f"under {spec.policy}: the policy was not applied as intended"
        )
    if POLICIES[spec.policy].fp8:
        # Labelled (or refused: Unsupported) before any training step.
        from mpbench.backends.tensorflow import fp8

        micro = slice(0, spec.batch_size)
        cell.fp8 = fp8.finish(
            model, cell.placement, spec.fp8_mode, jit_compile,
            data.x_train[micro], data.y_train[micro], cell.counted,
        )  # fmt: skip
    # TensorFlow autotunes cuDNN convolutions unless this is set to false.
    state["cudnn_autotune"] = os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1") not in ("0", "false")
    if cell.mirrored:
        state["replicas"] = cell.mirrored.count
        state["replica_devices"] = list(cell.mirrored.replicas.devices)
    return model, jit_compile, state


@dataclass
class _Step:
    """What the loop trains from: the pre-batched dataset, and for the custom loop its
    traced step and the iterator it draws from (None under fit)."""

    batches: Any
    train_step: Any = None
    iterator: Any = None


def _training(cell: _Cell, model: Any, jit_compile: bool, data: Any, plan: Any) -> _Step:
    from mpbench.backends.tensorflow import loops

    mirrored = cell.mirrored
    batches = loops.training_batches(
        data.x_train,
        data.y_train,
        plan,
        cell.batch,
        cell.placement,
        cell.spec.accumulate,
        replicated=bool(mirrored),
    )
    if cell.spec.loop != "custom":
        return _Step(batches)
    if mirrored:
        train_step = loops.custom_train_step(
            model, jit_compile, mirrored.strategy, global_batch=cell.batch
        )
        iterator = iter(mirrored.strategy.experimental_distribute_dataset(batches))
    else:
        train_step = loops.custom_train_step(model, jit_compile)  # traced on first call
        iterator = iter(batches)
    return _Step(batches, train_step, iterator)


@dataclass
class _Timed:
    """The timed steps' figures."""

    trained: Any  # loops.TrainResult
    telemetry: CellTelemetry
    memory: Any  # telemetry.memory.TrainingMemory
    device_peak: int | None  # the allocator's peak over training (None on a CPU)
    loss_scale: Any  # LossScaleStats, or None without loss scaling
    busy: BusyEvidence  # the host's CPU time over the timed steps


def _timed_steps(
    tf: Any,
    cell: _Cell,
    model: Any,
    step: _Step,
    plan: Any,
    progress: Progress,
    total: int,
    state: dict[str, Any],
    stop: StopCheck,
) -> _Timed:
    """The timed steps, with the memory meter and the telemetry around them; `stop` may end
    them early (a cell that cannot pay: backends/stopping.py)."""
    from mpbench.backends.tensorflow import device, loops

    spec, placement, micro = cell.spec, cell.placement, cell.spec.accumulate
    replica_devices = cell.mirrored.replicas.devices if cell.mirrored else ()
    meter = device.memory_meter(tf, placement, replica_devices)
    # A dynamic loss scale moves, so its floor is a divergence signal; a static one not.
    dynamic = state["loss_scaling"] and spec.loss_scale is None
    telemetry = CellTelemetry(
        telemetry_device(placement), dynamic_scale=dynamic, warmup_steps=plan.warmup_steps
    )
    telemetry.start_timed()
    host = HostBusyMeter().start()
    try:
        if spec.loop == "fit":
            trained = loops.train_with_fit(
                model, step.batches, plan, progress, total, micro, telemetry, stop
            )
        else:
            trained = loops.train_with_custom_loop(
                step.train_step,
                step.iterator,
                plan,
                progress,
                total,
                micro,
                telemetry,
                loss_scaled=state["loss_scaling"],
                stop=stop,
            )
    except BaseException:
        telemetry.close()  # a diverged cell (CellDiverged) stopped it already
        # The memory sampler's thread reads every 20 ms: left running, it would take the GIL
        # from whatever this process does next (a fallback's steps, an in-process caller).
        with contextlib.suppress(Exception):  # the failure that got here is the news
            meter.stop()
        raise
    # Joules per sample: a GPU's energy over the samples that GPU trained (the sampler
    # reads replica 0's GPU); a CPU's package over every replica's samples.
    sampled = 1 if placement.is_gpu else cell.world
    busy = _busy(cell, host)
    telemetry.stop_timed(trained.steps_run * spec.effective_batch * sampled)
    training_memory = meter.stop()
    device_peak = training_memory.peak_bytes if placement.is_gpu else None
    if trained.steps_run != plan.total_steps and trained.stopped is None:
        raise RuntimeError(f"trained {trained.steps_run} steps, planned {plan.total_steps}")
    # The loss scale's figures and the whole-cell verdict are the timed steps', the steps
    # the side file numbers 1..N (as in torch): read now, before the end-to-end window.
    loss_scale = (
        loops.loss_scale_stats(
            model.optimizer, trained.micro_batches_run, spec.loss_scale is not None
        )
        if state["loss_scaling"]
        else None
    )
    return _Timed(trained, telemetry, training_memory, device_peak, loss_scale, busy)


def _busy(cell: _Cell, host: HostBusyMeter) -> BusyEvidence:
    """The host's CPU time over the timed steps; on a GPU nothing measures the device's
    busy time in a TensorFlow cell (the bottleneck is then classified without it)."""
    if not cell.placement.is_gpu:
        busy = host.stop(cpu_threads(cell.threads.get("intra_op")))
        busy.unavailable["device_busy_fraction"] = CPU_DEVICE_BUSY
        return busy
    busy = host.stop(1, source="none: TensorFlow cells do not profile their GPU kernels")
    busy.unavailable["device_busy_fraction"] = (
        "a TensorFlow cell: mpbench reads no kernel times from TensorFlow's profiler"
    )
    return busy


def _end_to_end(
    cell: _Cell,
    model: Any,
    step: _Step,
    data: Any,
    window: Any,
    progress: Progress,
    done: int,
    total: int,
) -> tuple[Any, int]:
    """The end-to-end window, and the micro-batches it trained."""
    from mpbench.backends.tensorflow import loops

    micro = cell.spec.accumulate
    if cell.spec.loop == "fit":
        return loops.end_to_end_fit(
            model, data.x_train, data.y_train, cell.batch, window, progress, done, total, micro
        )
    return loops.end_to_end_custom(
        step.train_step,
        step.iterator,
        window.total_steps,
        cell.batch,
        progress,
        done,
        total,
        micro,
    )


def _evaluate(
    cell: _Cell, model: Any, data: Any, micro_batches_trained: int
) -> tuple[float, float]:
    """Test accuracy and loss; a non-finite test loss is a divergence."""
    from mpbench.backends.tensorflow import loops

    accuracy, test_loss = loops.evaluate(model, data.x_test, data.y_test, cell.batch)
    if not math.isfinite(test_loss):
        raise base.Diverged(f"test loss is {test_loss} after {micro_batches_trained} micro-batches")
    return accuracy, test_loss


def _verdict(spec: CellSpec, timed: _Timed) -> tuple[str, str | None, Any]:
    """The cell's status, reason and divergence: a stopped cell is stopped (its few steps
    judge no loss scale); a loss-scaled cell is judged on its timed steps' skips, counted in
    micro-batches (Keras skips single micro-batches, loss_scale_stats); cells shorter than
    the detector's window on all of them, here."""
    if timed.trained.stopped is not None:
        return Status.STOPPED.value, stopped_reason(timed.trained.stopped), None
    loss_scale = timed.loss_scale
    if loss_scale is None:
        return "ok", None, None
    scale_text = (
        f"a static loss scale of {spec.loss_scale:g}"
        if spec.loss_scale is not None
        else "a dynamic loss scale"
    )
    skipped, counted = loss_scale.skipped_steps or 0, loss_scale.counted_steps or 0
    fired = timed.telemetry.end_of_cell(skipped, counted, scale_text)
    if fired is not None:
        return "diverged", fired.reason, fired.to_dict()
    return "ok", None, None


def _memory_stats(cell: _Cell, timed: _Timed, data: Any) -> MemoryStats:
    memory = MemoryStats(
        device_peak_allocated_bytes=timed.device_peak, host_peak_rss_bytes=base.peak_rss_bytes()
    )
    # TensorFlow streams batches from host memory (tf.data); nothing is preloaded on the
    # device, so the dataset's device bytes are 0 on a GPU. On a CPU the arrays are in RSS.
    dataset_bytes = 0 if cell.placement.is_gpu else data.x_train.nbytes + data.y_train.nbytes
    fill_memory(memory, timed.memory, dataset_bytes)
    return memory


def telemetry_device(placement: Placement) -> str:
    """The telemetry's device name, as torch names it: "cpu", or "cuda:N" with the cell's
    CUDA index N (TensorFlow itself calls the one GPU it was left "/GPU:0", device.resolve)."""
    if placement.is_gpu:
        return f"cuda:{placement.info.index or 0}"
    return "cpu"
