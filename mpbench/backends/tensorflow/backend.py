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

from mpbench.backends import base
from mpbench.backends.base import CellSpec, Measurements, Progress
from mpbench.backends.tensorflow import distributed
from mpbench.backends.tensorflow.device import Placement
from mpbench.results.schema import MemoryStats
from mpbench.telemetry.cell import CellTelemetry
from mpbench.telemetry.memory import fill as fill_memory
from mpbench.workloads import get_workload

LOOPS = ("fit", "custom")

# The runner reports an ImportError from importing a backend as a skipped cell with the
# install hint; look for TensorFlow without importing it (that happens in run_cell).
if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("keras") is None:
    raise ImportError("No module named 'tensorflow' (or 'keras')")


def run_cell(spec: CellSpec, progress: Progress, warn: Callable[[str], None]) -> Measurements:
    if spec.loop not in LOOPS:
        raise base.Unsupported(f"unknown training loop {spec.loop!r} (choose from fit, custom)")
    if spec.device.split(":", 1)[0].lower() == "mps":
        raise base.Unsupported(
            "TensorFlow has no 'mps' device (Apple GPUs need the tensorflow-metal plugin)"
        )
    refused = distributed.refusal(spec)
    if refused:
        raise base.Unsupported(refused)
    world = spec.world_size  # replicas in sync: MirroredStrategy over this node's devices
    from mpbench.backends.tensorflow.runtime import import_tensorflow

    tf = import_tensorflow(spec.verbose)
    import keras

    from mpbench.backends.tensorflow import device, loops, models, precision

    threads = base.thread_settings(
        *device.pin_threads(tf, spec.intra_op_threads, spec.inter_op_threads)
    )
    workload = get_workload(spec.workload)
    mirrored = None
    if world > 1:
        # Before the runtime starts (the strategy starts it): logical CPUs / visible GPUs.
        replicas = device.resolve_replicas(tf, spec.device, world)
        placement = replicas.placement
        mirrored = distributed.mirrored(tf, replicas, world)
    else:
        placement = device.resolve(tf, spec.device)
    precision.apply_policy(spec.policy, placement)
    data = base.load_dataset(spec, workload, warn)
    # A step is one optimizer step over `accumulate` micro-batches of spec.batch_size, on
    # each of the `world` replicas: `batch` samples per micro-batch step in all.
    micro = spec.accumulate
    batch = spec.batch_size * world
    plan = base.plan_steps(
        len(data.x_train), spec.effective_batch * world, spec.epochs, spec.max_steps,
        spec.warmup_steps,
    )  # fmt: skip
    window = base.end_to_end_window(plan)
    total = plan.total_steps + window.total_steps

    # One device: everything under it. Replicas: the model and its optimizer are built in
    # the strategy's scope (mirrored variables); fit, predict and the custom step use the
    # strategy themselves, and the test loss is computed outside it (inside, a Keras loss
    # divides by the replica count).
    where = tf.device(placement.tf_device) if mirrored is None else contextlib.nullcontext()
    building = mirrored.strategy.scope() if mirrored else contextlib.nullcontext()
    with where:
        with building:
            keras.utils.set_random_seed(spec.seed)
            model = models.compiled_model(
                workload,
                spec.units,
                spec.policy,
                spec.loop,
                spec.jit,
                spec.loss_scale if spec.policy == "mixed_float16" else None,
                micro,
            )
            models.check_optimizer(model.optimizer, workload.optimizer)
            jit_compile = bool(model.jit_compile)  # Keras may refuse XLA for a model
            if spec.jit and not jit_compile:
                warn("XLA (jit_compile) was requested but Keras disabled it for this model")
            state = precision.read_back(model, data.x_test[:1], spec.loop, jit_compile)
        if state["loss_scaling"] != (spec.policy == "mixed_float16"):
            raise RuntimeError(
                f"loss scaling is {'on' if state['loss_scaling'] else 'off'} "
                f"under {spec.policy}: the policy was not applied as intended"
            )
        # TensorFlow autotunes cuDNN convolutions unless this is set to false.
        state["cudnn_autotune"] = os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1") not in ("0", "false")
        if mirrored:
            state["replicas"] = mirrored.count
            state["replica_devices"] = list(mirrored.replicas.devices)

        batches = loops.training_batches(
            data.x_train, data.y_train, plan, batch, placement, micro, replicated=bool(mirrored)
        )
        if spec.loop == "custom":
            if mirrored:
                train_step = loops.custom_train_step(
                    model, jit_compile, mirrored.strategy, global_batch=batch
                )
                iterator = iter(mirrored.strategy.experimental_distribute_dataset(batches))
            else:
                train_step = loops.custom_train_step(model, jit_compile)  # traced on first call
                iterator = iter(batches)
        replica_devices = mirrored.replicas.devices if mirrored else ()
        meter = device.memory_meter(tf, placement, replica_devices)
        # A dynamic loss scale moves, so its floor is a divergence signal; a static one not.
        dynamic = state["loss_scaling"] and spec.loss_scale is None
        telemetry = CellTelemetry(telemetry_device(placement), dynamic_scale=dynamic)
        telemetry.start_timed()
        try:
            if spec.loop == "fit":
                trained = loops.train_with_fit(
                    model, batches, plan, progress, total, micro, telemetry
                )
            else:
                trained = loops.train_with_custom_loop(
                    train_step,
                    iterator,
                    plan,
                    progress,
                    total,
                    micro,
                    telemetry,
                    loss_scaled=state["loss_scaling"],
                )
        except BaseException:
            telemetry.close()  # a diverged cell (CellDiverged) stopped it already
            raise
        # Joules per sample: a GPU's energy over the samples that GPU trained (the sampler
        # reads replica 0's GPU); a CPU's package over every replica's samples.
        sampled = 1 if placement.is_gpu else world
        telemetry.stop_timed(plan.total_steps * spec.effective_batch * sampled)
        training_memory = meter.stop()
        # The allocator's peak over training (None on a CPU, where TF keeps no stats).
        device_peak = training_memory.peak_bytes if placement.is_gpu else None
        if trained.steps_run != plan.total_steps:
            raise RuntimeError(f"trained {trained.steps_run} steps, planned {plan.total_steps}")
        # The loss scale's figures and the whole-cell verdict are the timed steps', the steps
        # the side file numbers 1..N (as in torch): read now, before the end-to-end window.
        static = spec.loss_scale is not None
        loss_scale = (
            loops.loss_scale_stats(model.optimizer, trained.micro_batches_run, static)
            if state["loss_scaling"]
            else None
        )

        if spec.loop == "fit":
            end_to_end, e2e_trained = loops.end_to_end_fit(
                model,
                data.x_train,
                data.y_train,
                batch,
                window,
                progress,
                plan.total_steps,
                total,
                micro,
            )
        else:
            end_to_end, e2e_trained = loops.end_to_end_custom(
                train_step,
                iterator,
                window.total_steps,
                batch,
                progress,
                plan.total_steps,
                total,
                micro,
            )
        micro_batches_trained = trained.micro_batches_run + e2e_trained

        accuracy, test_loss = loops.evaluate(model, data.x_test, data.y_test, batch)
        if not math.isfinite(test_loss):
            raise base.Diverged(
                f"test loss is {test_loss} after {micro_batches_trained} micro-batches"
            )
        status, reason, divergence = "ok", None, None
        if loss_scale is not None:
            scale_text = (
                f"a static loss scale of {spec.loss_scale:g}" if static else "a dynamic loss scale"
            )
            # Counted in micro-batches (Keras skips single micro-batches, loss_scale_stats);
            # cells shorter than the detector's window are judged on all their steps here.
            skipped, counted = loss_scale.skipped_steps or 0, loss_scale.counted_steps or 0
            fired = telemetry.end_of_cell(skipped, counted, scale_text)
            if fired is not None:
                status, reason, divergence = "diverged", fired.reason, fired.to_dict()

    memory = MemoryStats(
        device_peak_allocated_bytes=device_peak, host_peak_rss_bytes=base.peak_rss_bytes()
    )
    # TensorFlow streams batches from host memory (tf.data); nothing is preloaded on the
    # device, so the dataset's device bytes are 0 on a GPU. On a CPU the arrays are in RSS.
    dataset_bytes = 0 if placement.is_gpu else data.x_train.nbytes + data.y_train.nbytes
    fill_memory(memory, training_memory, dataset_bytes)
    return Measurements(
        framework_version=f"tensorflow {tf.__version__} / keras {keras.__version__}",
        device=placement.info,
        precision=state,
        step_times_s=trained.step_times_s,
        warmup_steps=plan.warmup_steps,
        samples_per_step=spec.effective_batch * world,
        epoch_losses=trained.epoch_losses,
        test_accuracy=accuracy,
        test_loss=test_loss,
        params=int(model.count_params()),
        memory=memory,
        loss_scale=loss_scale,
        data=data.info,
        extra_config={
            "jit_compile": jit_compile,
            "loop": spec.loop,
            # The same words at every world size: compare matches a data-parallel cell's
            # config to its world-size-1 twin's (the strategy's input path is in the record's
            # precision.replica_devices and distributed fields).
            "input_pipeline": "pre-batched tf.data, prefetched"
            + (" to the device" if placement.is_gpu else ""),
        },
        end_to_end=end_to_end,
        threads=threads,
        micro_batches_per_step=micro,
        status=status,
        reason=reason,
        telemetry=telemetry.report(),
        divergence=divergence,
        distributed=mirrored.stats(spec) if mirrored else None,
    )


def telemetry_device(placement: Placement) -> str:
    """The telemetry's device name, as torch names it: "cpu", or "cuda:N" with the cell's
    CUDA index N (TensorFlow itself calls the one GPU it was left "/GPU:0", device.resolve)."""
    if placement.is_gpu:
        return f"cuda:{placement.info.index or 0}"
    return "cpu"
