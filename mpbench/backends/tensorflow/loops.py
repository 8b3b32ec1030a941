"""The two training loops (`fit` and a custom `tf.function` loop), timed step by step.

Both draw the same pre-batched input pipeline, time each step with the one StepTimer, stop
after exactly `plan.total_steps` steps, and report the same things (TrainResult).
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from mpbench.backends.base import Progress, StepPlan, WindowPlan, check_finite
from mpbench.backends.stopping import NEVER, StopCheck
from mpbench.backends.tensorflow.device import Placement
from mpbench.backends.timing import StepTimer
from mpbench.results.schema import EndToEndStats, LossScaleStats, StopStats
from mpbench.telemetry.cell import CellTelemetry
from mpbench.telemetry.numerics import tf_grad_health_tensors


@dataclass
class TrainResult:
    step_times_s: list[float] = field(default_factory=list)  # per optimizer step
    epoch_losses: list[float] = field(default_factory=list)
    steps_run: int = 0  # optimizer steps
    micro_batches_run: int = 0
    stopped: StopStats | None = None  # a cell that could not pay, stopped early (stopping.py)


def _as_float64(variable: keras.Variable) -> tf.Tensor:
    """A variable's value as float64, the dtype of the step's result vector."""
    return tf.cast(variable.value, tf.float64)


def _applied_step_counter(optimizer: keras.optimizers.Optimizer) -> keras.Variable | None:
    """The inner optimizer's raw step counter under a LossScaleOptimizer (it advances only
    on applied steps), or None for an optimizer without loss scaling."""
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return None
    inner = optimizer.inner_optimizer
    return getattr(inner, "_iterations", inner.iterations)


def per_optimizer_step(micro_times_s: list[float], micro: int) -> list[float]:
    """Micro-batch times summed over each accumulation window (`micro` of them): the time of
    one optimizer step, as torch times it."""
    return [sum(micro_times_s[i : i + micro]) for i in range(0, len(micro_times_s), micro)]


def training_batches(
    x: np.ndarray,
    y: np.ndarray,
    plan: StepPlan,
    batch_size: int,
    placement: Placement,
    micro: int = 1,
    replicated: bool = False,
) -> tf.data.Dataset:
    """An endless dataset of whole (micro-)batches, cut once before training so that a step
    only takes the next ready batch (no per-sample slicing or batching inside the timed step);
    prefetched, and on a GPU prefetched onto the device so the host-to-device copy overlaps
    the previous step. `micro` micro-batches make one optimizer step (plan's steps).

    `replicated` (a MirroredStrategy): `batch_size` is the global batch; the strategy splits
    each one between its replicas and prefetches the pieces onto their devices itself
    (experimental_distribute_dataset, which `fit` also calls), so no prefetch_to_device."""
    count = plan.steps_per_epoch * micro
    used = count * batch_size
    xb = x[:used].reshape(count, batch_size, *x.shape[1:])
    yb = y[:used].reshape(count, batch_size, *y.shape[1:])  # a language model's: (N, T)
    batches = tf.data.Dataset.from_tensor_slices((xb, yb)).repeat()
    if placement.is_gpu and not replicated:
        return batches.apply(tf.data.experimental.prefetch_to_device(placement.tf_device, 2))
    return batches.prefetch(2)


def applied_micro_batches(optimizer: keras.optimizers.Optimizer) -> int:
    """Micro-batches a LossScaleOptimizer applied so far: its inner optimizer's raw
    `_iterations`, which does not advance on a skipped (non-finite) micro-batch."""
    inner = optimizer.inner_optimizer
    return int(keras.ops.convert_to_numpy(getattr(inner, "_iterations", inner.iterations)))


class _StepTimingCallback(keras.callbacks.Callback):
    """Times `fit` steps. Overriding on_train_batch_end makes Keras call it synchronously,
    with the step's logs already converted to Python floats: the conversion waits for the
    device, so the clock is read after the step's work has finished.

    After the clock read, each optimizer step goes to `telemetry`:
    - loss: `logs["loss"]` is the epoch's running mean (Keras' loss tracker, weighted by
      batch size; reset at each epoch, and every batch here is whole), so the micro-batch's
      own loss is recovered as mean_k * k - mean_(k-1) * (k - 1), k = batch index + 1, in
      float64 (the tracker's float32 sums lose ~k * 6e-8 of the mean: negligible). Under
      accumulation the step's loss is the mean of its `micro` micro-batch losses, as in the
      custom loop. A non-finite loss makes this non-finite too, and the detector fires.
    - loss scale and skipped (LossScaleOptimizer only): the scale after the step and
      whether the inner optimizer's `_iterations` did not advance at all over the step's
      micro-batches (Keras checks each micro-batch: a skip here means none of them was
      applied; the cell's skipped count stays per micro-batch, loss_scale_stats).
    - gradient norm / non-finite gradients: None, `fit` does not expose the gradients.

    `stop` (backends/stopping.py) may end training early at an optimizer step's end:
    `model.stop_training`, which fit reads after each batch.
    """

    def __init__(
        self,
        plan: StepPlan,
        progress: Progress,
        result: TrainResult,
        total: int,
        micro: int,
        telemetry: CellTelemetry | None = None,
        stop: StopCheck | None = None,
    ) -> None:
        super().__init__()
        self._plan, self._progress, self._result = plan, progress, result
        self._total, self._micro = total, micro
        self._telemetry = telemetry
        self._stop = stop
        self._next_check = stop.next_step if stop else NEVER
        self._timer = StepTimer()
        self._previous_mean = 0.0
        self._window: list[float] = []
        self._applied: int | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        optimizer = self.model.optimizer
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            self._applied = applied_micro_batches(optimizer)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._timer.start()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        running_loss = float((logs or {})["loss"])  # the epoch's running mean so far
        self._timer.stop()
        # `batch` counts from 0 in each epoch (the tracker is reset with it).
        if batch == 0:
            loss = running_loss
        else:
            loss = running_loss * (batch + 1) - self._previous_mean * batch
        self._previous_mean = running_loss
        self._window.append(loss)
        # A fit "batch" is one micro-batch; `micro` of them make an optimizer step.
        done = self._result.micro_batches_run = self._result.micro_batches_run + 1
        step = self._result.steps_run = done // self._micro
        if done % self._micro == 0:
            self._record(step, statistics.fmean(self._window))
            self._window = []
        self._progress(step, self._total)
        if done >= self._plan.total_steps * self._micro:
            self.model.stop_training = True
        elif step >= self._next_check and done % self._micro == 0:
            self._decide()

    def _decide(self) -> None:
        assert self._stop is not None
        times = per_optimizer_step(self._timer.times_s, self._micro)
        self._result.stopped = self._stop.decide(times)
        self._next_check = self._stop.next_step
        if self._result.stopped is not None:
            self.model.stop_training = True

    def _record(self, step: int, loss: float) -> None:
        if self._telemetry is None:
            check_finite(loss, step)
            return
        scale = skipped = None
        if self._applied is not None:  # a LossScaleOptimizer
            optimizer = self.model.optimizer
            scale = float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
            applied = applied_micro_batches(optimizer)
            skipped, self._applied = applied == self._applied, applied
        # Raises CellDiverged when a divergence signal fires (a non-finite loss among them).
        self._telemetry.step(step, loss, scale, skipped, None, None)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._result.epoch_losses.append(float((logs or {})["loss"]))

    def on_train_end(self, logs: dict | None = None) -> None:
        self._result.step_times_s = per_optimizer_step(self._timer.times_s, self._micro)


def train_with_fit(
    model: keras.Model,
    batches: tf.data.Dataset,
    plan: StepPlan,
    progress: Progress,
    total: int,
    micro: int = 1,
    telemetry: CellTelemetry | None = None,
    stop: StopCheck | None = None,
) -> TrainResult:
    """`micro` > 1: the optimizer accumulates (gradient_accumulation_steps), so fit's steps
    are micro-batches; they are timed one by one and summed per optimizer step. Each
    optimizer step's numerics go to `telemetry` after its clock read (_StepTimingCallback);
    without one, a non-finite loss raises Diverged. `stop` may end it early."""
    result = TrainResult()
    timing = _StepTimingCallback(plan, progress, result, total, micro, telemetry, stop)
    model.fit(
        batches,
        epochs=plan.epochs,
        steps_per_epoch=plan.steps_per_epoch * micro,
        callbacks=[timing],
        shuffle=False,
        verbose=0,
    )
    return result


def model_gradients(gradients: list[tf.Tensor], variables: list) -> list[tf.Tensor]:
    """The gradients of the model's weights: those of variables with
    `overwrite_with_gradient` left out. Keras' float8 layers keep their scales and amax
    histories in such variables, and their "gradient" is the variable's next value (an amax
    of hundreds), not a gradient: counted, it would swamp the norm of a float8 cell."""
    return [
        g
        for g, v in zip(gradients, variables, strict=True)
        if not getattr(v, "overwrite_with_gradient", False)
    ]


def gradient_health(gradients: list[tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    """In the graph: (global norm, non-finite elements) as float64 scalars, of the gradients
    given (pass them through `model_gradients`). A finite norm means every element is
    finite, so the elements are counted (`tf_grad_health_tensors`) only when it is not, as
    torch_grad_health does: a healthy step pays one reduction."""
    present = [g.values if isinstance(g, tf.IndexedSlices) else g for g in gradients]
    present = [tf.cast(g, tf.float32) for g in present if g is not None]
    norm = tf.linalg.global_norm(present) if present else tf.constant(0.0, tf.float32)
    nonfinite = tf.cond(
        tf.math.is_finite(norm),
        lambda: tf.constant(0, tf.int64),
        lambda: tf_grad_health_tensors(gradients)[1],
    )
    return tf.cast(norm, tf.float64), tf.cast(nonfinite, tf.float64)


# What one call of the custom step returns: one float64 vector, read back in one transfer.
LOSS, GRAD_NORM, NONFINITE_GRADS, LOSS_SCALE, APPLIED = range(5)
# The custom loop computes the gradient health inside its (timed) step, so it samples it:
# every GRADIENT_EVERY-th step the side file keeps. At most 1 step in 10 then pays the extra
# reduction, which the median step time does not see; the fit loop has no gradients at all.
GRADIENT_EVERY = 10


@dataclass
class CustomStep:
    """The custom loop's step function and the switch for its gradient health (a variable
    read in the graph, so switching it never retraces)."""

    run: Callable[[Iterator], tf.Tensor]
    check_gradients: tf.Variable

    def __call__(self, iterator: Iterator) -> tf.Tensor:
        return self.run(iterator)


def custom_train_step(
    model: keras.Model,
    jit_compile: bool,
    strategy: tf.distribute.Strategy | None = None,
    global_batch: int | None = None,
) -> CustomStep:
    """A hand-written step with the Keras 3 loss-scaling API: `scale_loss` inside the tape,
    then `apply`, which (for a LossScaleOptimizer) unscales and skips non-finite steps. For
    other optimizers `scale_loss` is the identity, so one step serves every policy.

    The step returns a float64 vector (indices LOSS ... APPLIED above): the loss; the
    gradients' global norm, unscaled, and their count of non-finite elements
    (gradient_health, computed in the graph only while `check_gradients` is on: NaN and -1
    otherwise. It is inside the timed step, where it cost roughly +4% at 32 units and
    +5..20% (noisy) at 1024 on this CPU, so train_with_custom_loop turns it on for one step
    in GRADIENT_EVERY only); and, for a LossScaleOptimizer, the scale after the step and
    whether the micro-batch was applied (1) or skipped (0), from the inner optimizer's
    `_iterations` read before and after `apply`. Without a LossScaleOptimizer the last two
    are 0 and 1.

    `strategy` (a MirroredStrategy, `global_batch` samples per step): see
    _replicated_train_step."""
    if strategy is not None:
        if global_batch is None:
            raise ValueError("a replicated step needs the global batch size")
        return _replicated_train_step(model, strategy, global_batch)
    optimizer, loss_fn = model.optimizer, model.loss
    variables = model.trainable_variables
    optimizer.build(variables)  # create slots eagerly, not inside the traced step
    counter = _applied_step_counter(optimizer)
    scaled = counter is not None

    check_gradients = tf.Variable(False, trainable=False, name="mpbench_check_gradients")
    unchecked = (tf.constant(math.nan, tf.float64), tf.constant(-1.0, tf.float64))

    @tf.function(jit_compile=jit_compile)
    def train_on_batch(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            probabilities = model(x, training=True)
            loss = loss_fn(y, probabilities)
            scaled_loss = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, variables)
        norm, nonfinite = tf.cond(
            check_gradients,
            lambda: gradient_health(model_gradients(gradients, variables)),
            lambda: unchecked,
        )
        if scaled:
            # Reads are ordered with `apply`'s updates (automatic control dependencies).
            norm = norm / _as_float64(optimizer.dynamic_scale)  # the scale these gradients carry
            before = _as_float64(counter)
        optimizer.apply(gradients, variables)
        if scaled:
            scale, applied = _as_float64(optimizer.dynamic_scale), _as_float64(counter) - before
        else:
            scale, applied = tf.constant(0.0, tf.float64), tf.constant(1.0, tf.float64)
        return tf.stack([tf.cast(loss, tf.float64), norm, nonfinite, scale, applied])

    @tf.function
    def train_step(iterator: Iterator) -> tf.Tensor:
        # The iterator is read outside the XLA cluster (iterator ops do not compile).
        x, y = next(iterator)
        return train_on_batch(x, y)

    return CustomStep(train_step, check_gradients)


def _replicated_train_step(
    model: keras.Model, strategy: tf.distribute.Strategy, global_batch: int
) -> CustomStep:
    """The custom step under a MirroredStrategy, as the tf.distribute custom-loop guide
    writes it: the iterator is a distributed one (experimental_distribute_dataset), each
    replica runs the step on its part of the global batch (`strategy.run`), with the loss
    averaged over the global batch (`tf.nn.compute_average_loss`: each replica's per-sample
    losses summed and divided by `global_batch`); `optimizer.apply` in the replica context
    sums the replicas' gradients (Keras' TFOptimizer all-reduce) and, for a
    LossScaleOptimizer, checks them in a merge_call.

    The returned vector is the single-device one: the loss is the replicas' shares summed
    (the global batch's mean); the non-finite gradient elements are summed over the
    replicas' own gradients (before the all-reduce: a replica cannot see the sum, which
    Keras forms inside `apply`), and so the gradient norm is not reported (NaN: the norm of
    one replica's share is not the step's gradient norm); the loss scale and whether the
    step was applied are replica 0's (every replica reads the same variables)."""
    optimizer, loss_fn = model.optimizer, model.loss
    variables = model.trainable_variables
    with strategy.scope():
        optimizer.build(variables)  # mirrored slots, created eagerly
        check_gradients = tf.Variable(False, trainable=False, name="mpbench_check_gradients")
    counter = _applied_step_counter(optimizer)
    scaled = counter is not None

    def replica_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            probabilities = model(x, training=True)
            # Per-sample losses (the compiled loss without its reduction, which would
            # also divide by the replica count), averaged over the global batch.
            per_sample = loss_fn.call(tf.cast(y, loss_fn.dtype), probabilities)
            if per_sample.shape.rank > 1:  # a language model's, per token: each sample's mean
                per_sample = tf.reduce_mean(per_sample, axis=list(range(1, per_sample.shape.rank)))
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=global_batch)
            scaled_loss = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, variables)
        _, nonfinite = tf.cond(
            check_gradients,
            lambda: gradient_health(model_gradients(gradients, variables)),
            lambda: (tf.constant(math.nan, tf.float64), tf.constant(-1.0, tf.float64)),
        )
        if scaled:
            before = _as_float64(counter)
        optimizer.apply(gradients, variables)
        if scaled:
            scale, applied = _as_float64(optimizer.dynamic_scale), _as_float64(counter) - before
        else:
            scale, applied = tf.constant(0.0, tf.float64), tf.constant(1.0, tf.float64)
        nan = tf.constant(math.nan, tf.float64)
        return tf.stack([tf.cast(loss, tf.float64), nan, nonfinite, scale, applied])

    @tf.function
    def train_step(iterator: Iterator) -> tf.Tensor:
        x, y = next(iterator)
        per_replica = strategy.run(replica_step, args=(x, y))
        local = tf.stack(strategy.experimental_local_results(per_replica))
        nonfinite = tf.where(
            local[0, NONFINITE_GRADS] < 0,
            tf.constant(-1.0, tf.float64),
            tf.reduce_sum(local[:, NONFINITE_GRADS]),
        )
        return tf.stack(
            [
                tf.reduce_sum(local[:, LOSS]),
                local[0, GRAD_NORM],
                nonfinite,
                local[0, LOSS_SCALE],
                local[0, APPLIED],
            ]
        )

    return CustomStep(train_step, check_gradients)


def train_with_custom_loop(
    train_step: CustomStep,
    iterator: Iterator,
    plan: StepPlan,
    progress: Progress,
    total: int,
    micro: int = 1,
    telemetry: CellTelemetry | None = None,
    loss_scaled: bool = False,
    stop: StopCheck | None = None,
) -> TrainResult:
    """One timed step = `micro` calls of the micro-batch step (the optimizer accumulates).

    After each step's clock read its numerics go to `telemetry` (CellDiverged when a signal
    fires; without telemetry a non-finite loss raises Diverged): the loss (the mean over the
    micro-batches); for `loss_scaled` (a LossScaleOptimizer) the scale after the step and
    `skipped` when none of the step's micro-batches was applied (Keras skips single
    micro-batches; the cell's skipped count stays per micro-batch, loss_scale_stats); the
    non-finite gradient elements summed over the micro-batches, and the gradient norm for
    `micro` == 1 (under accumulation the norm of the accumulated gradient is not returned
    by the step: None). `stop` may end it early (backends/stopping.py)."""
    result, timer = TrainResult(), StepTimer()
    epoch_losses: list[float] = []
    next_check = stop.next_step if stop else NEVER
    for step in range(1, plan.total_steps + 1):
        check = telemetry is not None and telemetry.wants_gradients() and step % GRADIENT_EVERY == 1
        train_step.check_gradients.assign(check)  # before the clock: not in the step's time
        timer.start()
        outputs = [train_step(iterator) for _ in range(micro)]
        # One read of every micro-batch's vector: it waits for the device.
        values = (outputs[0][tf.newaxis] if micro == 1 else tf.stack(outputs)).numpy()
        timer.stop()
        loss = float(np.mean(values[:, LOSS]))
        result.steps_run = step
        result.micro_batches_run += micro
        if telemetry is None:
            check_finite(loss, step)
        else:
            norm = float(values[0, GRAD_NORM]) if micro == 1 and check else math.nan
            scale = float(values[-1, LOSS_SCALE]) if loss_scaled else None
            skipped = bool(values[:, APPLIED].sum() == 0) if loss_scaled else None
            telemetry.step(
                step,
                loss,
                scale,
                skipped,
                norm if math.isfinite(norm) else None,
                int(values[:, NONFINITE_GRADS].sum()) if check else None,
            )
        epoch_losses.append(loss)
        progress(step, total)
        if step >= next_check:
            assert stop is not None
            result.stopped = stop.decide(timer.times_s)
            next_check = stop.next_step
        if step % plan.steps_per_epoch == 0 or step == plan.total_steps or result.stopped:
            result.epoch_losses.append(statistics.fmean(epoch_losses))
            epoch_losses = []
        if result.stopped is not None:
            break
    result.step_times_s = list(timer.times_s)
    return result


# --- end-to-end windows: no per-step synchronisation (docs/measurement.md) ---------------


class _EpochWindow(keras.callbacks.Callback):
    """Reads the clock when the first epoch begins and after the last one ends. No batch-end
    hook is overridden, so Keras runs its steps without waiting for each one (a batch-end
    hook would make Keras convert every step's logs, waiting for the device); converting the
    epoch's loss to a float waits for the device before the clock is read.

    The batch-begin hook, which gets no logs and waits for nothing, counts the optimizer
    steps started so far for the progress display: without it a window of one long epoch
    (a default CIFAR-10 cell's 385 steps) said nothing until its end."""

    def __init__(
        self, progress: Progress, done: int, steps_per_epoch: int, total: int, micro: int = 1
    ) -> None:
        super().__init__()
        self._progress, self._done, self._per_epoch, self._total = (
            progress,
            done,
            steps_per_epoch,
            total,
        )
        self._micro = micro  # fit's batches are micro-batches
        self.timer = StepTimer()
        self.seconds: float | None = None
        self.epochs = 0
        self.last_loss = math.nan

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        if self.epochs == 0:
            self.timer.start()

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        # `batch` counts fit's batches from 0 in each epoch: those before it were dispatched.
        started = self.epochs * self._per_epoch + batch // self._micro
        self._progress(self._done + started, self._total)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.last_loss = float((logs or {})["loss"])
        self.epochs += 1
        self._progress(self._done + self.epochs * self._per_epoch, self._total)

    def on_train_end(self, logs: dict | None = None) -> None:
        self.seconds = self.timer.stop()


@contextlib.contextmanager
def _undone(model: keras.Model) -> Iterator[None]:
    """Whatever trains inside is undone on leaving: the model's variables and its
    optimizer's (slots, step counters, gradient accumulators, the loss scale) get back the
    values they had. For a step that runs only to trace a function."""
    variables = [*model.variables, *model.optimizer.variables]
    values = [keras.ops.convert_to_numpy(v) for v in variables]
    yield
    for variable, value in zip(variables, values, strict=True):
        variable.assign(value)


def fit_pipeline(samples: int, batch_size: int) -> str:
    return (
        f"NumPy arrays passed to fit(x, y, batch_size={batch_size}, shuffle=True), "
        f"trimmed to {samples} samples (whole batches); no per-step callback"
    )


def end_to_end_fit(
    model: keras.Model,
    x: np.ndarray,
    y: np.ndarray,
    batch_size: int,
    window: WindowPlan,
    progress: Progress,
    done: int,
    total: int,
    micro: int = 1,
) -> tuple[EndToEndStats, int]:
    """`model.fit` as a Keras user calls it — arrays, batch_size, shuffled — timed over whole
    epochs. The arrays are trimmed to whole batches so that a partial last batch does not
    retrace the train function inside the window; otherwise this is the guide's own call.
    A window shorter than an epoch passes the first `window.steps_per_epoch` batches' worth
    of samples.

    Array input reaches the train function with another signature than the pre-batched
    dataset of the synced phase, so it is traced once more: one warm-up step of the same
    call, outside the window, keeps that tracing out (a long `fit` pays it once, in its first
    epoch). With accumulation (`micro` > 1) the warm-up is a whole accumulation window, so
    the timed window starts on an optimizer-step boundary. The warm-up only traces: what it
    trained is undone (`_undone`), so the cell trains exactly its timed steps and the
    window's, the steps its record counts. Returns the stats and the micro-batches trained."""
    steps_per_epoch = window.steps_per_epoch
    used = steps_per_epoch * batch_size * micro
    epochs = window.epochs
    warm = batch_size * micro
    with _undone(model):
        model.fit(x[:warm], y[:warm], batch_size=batch_size, epochs=1, verbose=0)
    timing = _EpochWindow(progress, done, steps_per_epoch, total, micro)
    model.fit(
        x[:used],
        y[:used],
        batch_size=batch_size,
        epochs=epochs,
        shuffle=True,
        callbacks=[timing],
        verbose=0,
    )
    seconds = timing.seconds
    assert seconds is not None
    steps = window.total_steps
    check_finite(timing.last_loss, done + steps)
    stats = EndToEndStats(epochs * used / seconds, steps, seconds, fit_pipeline(used, batch_size))
    return stats, steps * micro


CUSTOM_PIPELINE = (
    "pre-batched tf.data (cut once, repeated, prefetched) into the custom tf.function step; "
    "the loss read once at the end"
)


def end_to_end_custom(
    train_step: CustomStep,
    iterator: Iterator,
    steps: int,
    batch_size: int,
    progress: Progress,
    done: int,
    total: int,
    micro: int = 1,
) -> tuple[EndToEndStats, int]:
    """The custom loop free-running: steps are dispatched without reading their loss.
    Returns the stats and the micro-batches trained."""
    timer = StepTimer()  # one interval: the whole window
    loss = None
    train_step.check_gradients.assign(False)  # free-running: no telemetry
    timer.start()
    for step in range(1, steps + 1):
        for _ in range(micro):
            loss = train_step(iterator)
        progress(done + step, total)
    last = float(loss.numpy()[LOSS])  # waits for the device: the window ends when done
    seconds = timer.stop()
    check_finite(last, done + steps)
    samples = steps * micro * batch_size
    return EndToEndStats(samples / seconds, steps, seconds, CUSTOM_PIPELINE), steps * micro


def evaluate(
    model: keras.Model, x: np.ndarray, y: np.ndarray, batch_size: int
) -> tuple[float | None, float]:
    """(test accuracy, test loss): the same loss function as training, on float32 outputs."""
    inputs = tf.data.Dataset.from_tensor_slices(x).batch(batch_size).prefetch(2)
    probabilities = model.predict(inputs, verbose=0)
    loss = float(keras.ops.convert_to_numpy(model.loss(y, probabilities)))
    if np.issubdtype(y.dtype, np.floating) or probabilities.shape[:-1] != y.shape:
        return None, loss  # a user workload's targets are not class indices: no accuracy
    return float(np.mean(np.argmax(probabilities, axis=-1) == y)), loss


def loss_scale_stats(
    optimizer: keras.optimizers.Optimizer, micro_batches_run: int, static: bool
) -> LossScaleStats:
    """The loss scale now, and the micro-batches skipped for non-finite gradients of the
    `micro_batches_run` trained so far: the inner optimizer's raw counter `_iterations`
    advances only on micro-batches the LossScaleOptimizer applied (its public `iterations`
    is `_iterations // N` under gradient_accumulation_steps; research notes §2). Keras
    checks each micro-batch, so one overflowing micro-batch is dropped and the window waits
    for a finite one. Called right after the timed steps, it describes them, as the side
    file and the divergence verdict do."""
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise TypeError(f"expected a LossScaleOptimizer, got {type(optimizer).__name__}")
    scale = float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
    inner = optimizer.inner_optimizer
    applied = int(keras.ops.convert_to_numpy(getattr(inner, "_iterations", inner.iterations)))
    return LossScaleStats(
        final_scale=scale if math.isfinite(scale) else None,
        skipped_steps=micro_batches_run - applied,
        mode="static" if static else "dynamic",
        initial_scale=float(optimizer.initial_scale),
        counted_steps=micro_batches_run,
        skip_unit="micro-batch" if inner.gradient_accumulation_steps else "optimizer step",
    )
