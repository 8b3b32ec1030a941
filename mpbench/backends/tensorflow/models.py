"""Build a workload's layers (mpbench.workloads) as a Keras model, and its optimizer."""

from __future__ import annotations

import keras

from mpbench.workloads import Conv, Dense, Flatten, MaxPool, OptimizerSpec, Workload
from mpbench.workloads.spec import Layer


def _keras_layer(layer: Layer) -> keras.layers.Layer:
    if isinstance(layer, Dense):
        return keras.layers.Dense(layer.units, activation=layer.activation)
    if isinstance(layer, Conv):
        # "valid" padding and stride 1, as the workload's FLOP and parameter counts assume.
        return keras.layers.Conv2D(
            layer.filters, layer.kernel, padding="valid", activation=layer.activation
        )
    if isinstance(layer, MaxPool):
        return keras.layers.MaxPooling2D(layer.size)
    if isinstance(layer, Flatten):
        return keras.layers.Flatten()
    raise TypeError(f"no Keras layer for workload layer {layer!r}")


def build_model(workload: Workload, units: int | None) -> keras.Sequential:
    """The workload's layers under the global dtype policy, then a float32 softmax: under a
    mixed policy the probabilities (and so the loss) stay float32, as the Keras guide does."""
    layers = [_keras_layer(layer) for layer in workload.layers(units)]
    return keras.Sequential(
        [
            keras.Input(shape=workload.input_shape),
            *layers,
            keras.layers.Activation("softmax", dtype="float32", name="probabilities"),
        ],
        name=workload.name,
    )


def build_optimizer(spec: OptimizerSpec) -> keras.optimizers.Optimizer:
    """The workload's optimizer with every hyper-parameter spelled out (torch uses the same)."""
    kinds = {"rmsprop": keras.optimizers.RMSprop, "adam": keras.optimizers.Adam}
    if spec.name not in kinds:
        raise ValueError(f"no Keras optimizer for {spec.name!r}")
    return kinds[spec.name](learning_rate=spec.learning_rate, **spec.params)


def optimizer_settings(spec: OptimizerSpec) -> dict:
    """The optimizer as the record states it, in the same flat shape as the torch backend."""
    return {"optimizer": spec.name, "learning_rate": spec.learning_rate, **spec.params}


def compiled_model(
    workload: Workload, units: int | None, policy: str, loop: str, jit_compile: bool
) -> keras.Sequential:
    """The compiled model, built under the global dtype policy already set for `policy`."""
    model = build_model(workload, units)
    optimizer = build_optimizer(workload.optimizer)
    if loop == "custom" and policy == "mixed_float16":
        # fit() wraps the optimizer itself (Keras 3 compile, auto_scale_loss=True);
        # a custom loop has to do it, or float16 gradients underflow.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(),
        jit_compile=jit_compile,
    )
    return model
