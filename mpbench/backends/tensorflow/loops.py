"""The two training loops (`fit` and a custom `tf.function` loop), timed step by step.

Both draw the same pre-batched input pipeline, time each step with the one StepTimer, stop
after exactly `plan.total_steps` steps, and report the same things (TrainResult).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field

import keras
import numpy as np
import tensorflow as tf

from mpbench.backends.base import Progress, StepPlan, check_finite
from mpbench.backends.tensorflow.device import Placement
from mpbench.backends.timing import StepTimer
from mpbench.results.schema import LossScaleStats


@dataclass
class TrainResult:
    step_times_s: list[float] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)
    steps_run: int = 0


def training_batches(
    x: np.ndarray, y: np.ndarray, plan: StepPlan, batch_size: int, placement: Placement
) -> tf.data.Dataset:
    """An endless dataset of whole batches, cut once before training so that a step only
    takes the next ready batch (no per-sample slicing or batching inside the timed step);
    prefetched, and on a GPU prefetched onto the device so the host-to-device copy overlaps
    the previous step."""
    used = plan.steps_per_epoch * batch_size
    xb = x[:used].reshape(plan.steps_per_epoch, batch_size, *x.shape[1:])
    yb = y[:used].reshape(plan.steps_per_epoch, batch_size)
    batches = tf.data.Dataset.from_tensor_slices((xb, yb)).repeat()
    if placement.is_gpu:
        return batches.apply(tf.data.experimental.prefetch_to_device(placement.tf_device, 2))
    return batches.prefetch(2)


class _StepTimingCallback(keras.callbacks.Callback):
    """Times `fit` steps. Overriding on_train_batch_end makes Keras call it synchronously,
    with the step's logs already converted to Python floats: the conversion waits for the
    device, so the clock is read after the step's work has finished."""

    def __init__(self, plan: StepPlan, progress: Progress, result: TrainResult) -> None:
        super().__init__()
        self._plan, self._progress, self._result = plan, progress, result
        self._timer = StepTimer()

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._timer.start()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        running_loss = float((logs or {})["loss"])  # the epoch's running mean so far
        self._timer.stop()
        step = self._result.steps_run = self._result.steps_run + 1
        # A non-finite step loss makes the running mean non-finite from that step on.
        check_finite(running_loss, step)
        self._progress(step, self._plan.total_steps)
        if step >= self._plan.total_steps:
            self.model.stop_training = True

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._result.epoch_losses.append(float((logs or {})["loss"]))

    def on_train_end(self, logs: dict | None = None) -> None:
        self._result.step_times_s = list(self._timer.times_s)


def train_with_fit(
    model: keras.Model, batches: tf.data.Dataset, plan: StepPlan, progress: Progress
) -> TrainResult:
    result = TrainResult()
    model.fit(
        batches,
        epochs=plan.epochs,
        steps_per_epoch=plan.steps_per_epoch,
        callbacks=[_StepTimingCallback(plan, progress, result)],
        shuffle=False,
        verbose=0,
    )
    return result


def train_with_custom_loop(
    model: keras.Model,
    batches: tf.data.Dataset,
    plan: StepPlan,
    progress: Progress,
    jit_compile: bool,
) -> TrainResult:
    """A hand-written step with the Keras 3 loss-scaling API: `scale_loss` inside the tape,
    then `apply`, which (for a LossScaleOptimizer) unscales and skips non-finite steps. For
    other optimizers `scale_loss` is the identity, so one step serves every policy."""
    optimizer, loss_fn = model.optimizer, model.loss
    variables = model.trainable_variables
    optimizer.build(variables)  # create slots eagerly, not inside the traced step

    @tf.function(jit_compile=jit_compile)
    def train_on_batch(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            probabilities = model(x, training=True)
            loss = loss_fn(y, probabilities)
            scaled_loss = optimizer.scale_loss(loss)
        gradients = tape.gradient(scaled_loss, variables)
        optimizer.apply(gradients, variables)
        return loss

    @tf.function
    def train_step(iterator: Iterator) -> tf.Tensor:
        # The iterator is read outside the XLA cluster (iterator ops do not compile).
        x, y = next(iterator)
        return train_on_batch(x, y)

    result, timer = TrainResult(), StepTimer()
    iterator = iter(batches)
    epoch_losses: list[float] = []
    for step in range(1, plan.total_steps + 1):
        timer.start()
        loss = float(train_step(iterator))  # reading the loss waits for the device
        timer.stop()
        result.steps_run = step
        epoch_losses.append(check_finite(loss, step))
        progress(step, plan.total_steps)
        if step % plan.steps_per_epoch == 0 or step == plan.total_steps:
            result.epoch_losses.append(statistics.fmean(epoch_losses))
            epoch_losses = []
    result.step_times_s = list(timer.times_s)
    return result


def evaluate(
    model: keras.Model, x: np.ndarray, y: np.ndarray, batch_size: int
) -> tuple[float, float]:
    """(test accuracy, test loss): the same loss function as training, on float32 outputs."""
    inputs = tf.data.Dataset.from_tensor_slices(x).batch(batch_size).prefetch(2)
    probabilities = model.predict(inputs, verbose=0)
    accuracy = float(np.mean(np.argmax(probabilities, axis=-1) == y))
    loss = float(keras.ops.convert_to_numpy(model.loss(y, probabilities)))
    return accuracy, loss


def loss_scale_stats(optimizer: keras.optimizers.Optimizer, steps_run: int) -> LossScaleStats:
    """Final dynamic loss scale, and the steps skipped for non-finite gradients: the inner
    optimizer's iteration counter only advances on steps the LossScaleOptimizer applied."""
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise TypeError(f"expected a LossScaleOptimizer, got {type(optimizer).__name__}")
    scale = float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
    applied = int(keras.ops.convert_to_numpy(optimizer.inner_optimizer.iterations))
    return LossScaleStats(
        final_scale=scale if math.isfinite(scale) else None, skipped_steps=steps_run - applied
    )
