"""Build a workload's layers (mpbench.workloads) as a Keras model, and its optimizer."""

from __future__ import annotations

from typing import Any

import keras

from mpbench.backends.tensorflow.loss_scale import StaticLossScaleOptimizer
from mpbench.policies import POLICIES
from mpbench.workloads import (
    Conv,
    Dense,
    Flatten,
    LanguageModel,
    LMShape,
    MaxPool,
    OptimizerSpec,
    Workload,
)
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


def build_model(
    workload: Workload | LanguageModel, units: int | None, **sizes: int | None
) -> keras.Model:
    """The workload's layers under the global dtype policy, then a float32 softmax: under a
    mixed policy the probabilities (and so the loss) stay float32, as the Keras guide does.
    `sizes` (heads, layers, seq_len): a language model's."""
    if workload.kind == "language_model":
        return language_model(workload, workload.shape(units, **sizes))
    layers = [_keras_layer(layer) for layer in workload.layers(units)]
    return keras.Sequential(
        [
            keras.Input(shape=workload.input_shape),
            *layers,
            keras.layers.Activation("softmax", dtype="float32", name="probabilities"),
        ],
        name=workload.name,
    )


class PositionEmbedding(keras.layers.Layer):
    """A learned (seq_len, d) table added to the token embeddings: torch's
    `nn.Embedding(seq_len, d)` looked up at 0..T-1. Under a mixed policy the float32 table
    is read in the compute dtype (Keras autocasts a layer's variables inside `call`)."""

    def __init__(self, length: int, width: int, stddev: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.length, self.width, self.stddev = length, width, stddev

    def build(self, input_shape) -> None:
        self.embeddings = self.add_weight(
            shape=(self.length, self.width),
            initializer=keras.initializers.RandomNormal(stddev=self.stddev),
            name="embeddings",
        )

    def call(self, inputs):
        return inputs + keras.ops.expand_dims(self.embeddings, 0)


def language_model(workload: LanguageModel, shape: LMShape) -> keras.Model:
    """The spec's decoder-only transformer (workloads/spec.py), the torch model's twin: the
    same parameters in the same shapes (q/k/v kernels (d, h, d/h) where torch has one
    (3d, d) weight), the same initial distribution, the same functions. The head is the
    token embedding reversed (ReversibleEmbedding, tied), run in the compute dtype
    (reverse_dtype): left unset it would multiply by the float32 table, a float32 head under
    a mixed policy. MultiHeadAttention is called with use_causal_mask."""
    d, eps, std = shape.d_model, workload.layer_norm_epsilon, workload.init_std

    def normal() -> keras.initializers.Initializer:  # one per layer: unseeded ones repeat
        return keras.initializers.RandomNormal(stddev=std)

    compute_dtype = keras.mixed_precision.global_policy().compute_dtype
    tokens = keras.Input(shape=(shape.seq_len,), dtype="int64", name="tokens")
    embedding = keras.layers.ReversibleEmbedding(
        shape.vocab,
        d,
        tie_weights=True,
        embeddings_initializer=normal(),
        reverse_dtype=compute_dtype,
        name="token_embedding",
    )
    x = embedding(tokens)
    x = PositionEmbedding(shape.seq_len, d, std, name="position_embedding")(x)
    for index in range(shape.layers):
        name = f"block_{index}"
        h = keras.layers.LayerNormalization(epsilon=eps, name=f"{name}_ln_1")(x)
        attention = keras.layers.MultiHeadAttention(
            num_heads=shape.heads,
            key_dim=shape.head_dim,
            kernel_initializer=normal(),
            bias_initializer="zeros",
            name=f"{name}_attention",
        )
        x = keras.layers.Add(name=f"{name}_residual_1")([x, attention(h, h, use_causal_mask=True)])
        h = keras.layers.LayerNormalization(epsilon=eps, name=f"{name}_ln_2")(x)
        h = keras.layers.Dense(
            workload.mlp_ratio * d, activation="gelu", kernel_initializer=normal(),
            name=f"{name}_fc_1",
        )(h)  # fmt: skip
        h = keras.layers.Dense(d, kernel_initializer=normal(), name=f"{name}_fc_2")(h)
        x = keras.layers.Add(name=f"{name}_residual_2")([x, h])
    x = keras.layers.LayerNormalization(epsilon=eps, name="ln_f")(x)
    logits = embedding(x, reverse=True)
    probabilities = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(
        logits
    )
    return keras.Model(tokens, probabilities, name=workload.name)


def build_optimizer(spec: OptimizerSpec, accumulate: int = 1) -> keras.optimizers.Optimizer:
    """The workload's optimizer with every hyper-parameter spelled out (torch uses the same).
    `accumulate` > 1: Keras' own gradient accumulation, which applies the mean of that many
    micro-batches' gradients once per window (base_optimizer.py, Keras 3)."""
    kinds = {
        "rmsprop": keras.optimizers.RMSprop,
        "adam": keras.optimizers.Adam,
        "sgd": keras.optimizers.SGD,
    }
    if spec.name not in kinds:
        raise ValueError(f"no Keras optimizer for {spec.name!r}")
    steps = {"gradient_accumulation_steps": accumulate} if accumulate > 1 else {}
    return kinds[spec.name](learning_rate=spec.learning_rate, **spec.params, **steps)


_HYPER_PARAMETERS = ("rho", "beta_1", "beta_2", "epsilon")


def optimizer_settings(optimizer: keras.optimizers.Optimizer) -> dict:
    """The hyper-parameters read back from the optimizer Keras actually built (under a
    LossScaleOptimizer for fp16)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    settings = {
        "optimizer": type(inner).__name__.lower(),
        "learning_rate": float(keras.ops.convert_to_numpy(inner.learning_rate)),
    }
    for name in _HYPER_PARAMETERS:
        if hasattr(inner, name):
            settings[name] = float(getattr(inner, name))
    return settings


def check_optimizer(optimizer: keras.optimizers.Optimizer, spec: OptimizerSpec) -> None:
    """Fail the cell if Keras trains with other hyper-parameters than the spec (which the
    runner records): both frameworks must train the same model the same way."""
    built = optimizer_settings(optimizer)
    wanted = {"optimizer": spec.name, "learning_rate": spec.learning_rate, **spec.params}
    for key, value in wanted.items():
        got = built.get(key)
        # The learning rate lives in a float32 variable: compare to float32 precision.
        same = got == value or (
            isinstance(value, float) and got is not None and abs(got - value) <= 1e-6 * value
        )
        if not same:
            raise RuntimeError(f"Keras built {key}={got!r}, the workload asks for {value!r}")


def compiled_model(
    workload: Workload | LanguageModel,
    units: int | None,
    policy: str,
    loop: str,
    jit_compile: bool,
    loss_scale: float | None = None,
    accumulate: int = 1,
    sizes: dict[str, int] | None = None,
) -> keras.Model:
    """The compiled model, built under the global dtype policy already set for `policy`.
    `loss_scale`: a static scale for mixed_float16 (None: dynamic). `sizes`: a language
    model's heads, layers and seq_len. float8: the eligible Dense / EinsumDense layers are
    quantized to Keras float8 after the model is built and before compile() (fp8.prepare;
    fp8.setup_of(model) then says what was done)."""
    loss: Any = keras.losses.SparseCategoricalCrossentropy()
    if workload.kind == "user":
        model, optimizer, loss = build_user(workload)
        if accumulate > 1:
            optimizer.gradient_accumulation_steps = accumulate
    else:
        model = build_model(workload, units, **(sizes or {}))
        # Accumulation and any base-optimizer setting go on the inner optimizer: the
        # LossScaleOptimizer refuses them ("set it on the inner_optimizer").
        optimizer = build_optimizer(workload.optimizer, accumulate)
    if POLICIES[policy].fp8:
        from mpbench.backends.tensorflow import fp8

        fp8.prepare(model, workload, units, sizes)
        if optimizer.built:  # a user's optimizer, built over the variables quantize() changed
            raise RuntimeError(
                f"float8: workload {workload.name}'s optimizer is already built; Keras "
                "quantizes the model before compile(), so leave the optimizer unbuilt"
            )
    scaled = POLICIES[policy].loss_scaling
    if scaled and loss_scale is not None:
        # Both loops: compile() leaves an optimizer that already scales alone.
        optimizer = StaticLossScaleOptimizer(optimizer, loss_scale)
    elif loop == "custom" and scaled:
        # fit() wraps the optimizer itself (Keras 3 compile, auto_scale_loss=True);
        # a custom loop has to do it, or float16 gradients underflow.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    return model


def build_user(workload: Any) -> tuple[keras.Model, keras.optimizers.Optimizer, Any]:
    """A user workload's keras builder: (model, optimizer, loss), checked (TypeError naming
    the workload otherwise); built under the dtype policy already set."""
    built = workload.keras()
    if not isinstance(built, tuple) or len(built) != 3:
        raise TypeError(
            f"workload {workload.name}: keras() must return (model, optimizer, loss), "
            f"got {type(built).__name__}"
        )
    model, optimizer, loss = built
    if not isinstance(model, keras.Model):
        raise TypeError(f"workload {workload.name}: the model is a {type(model).__name__}, "
                        "not a keras.Model")  # fmt: skip
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"workload {workload.name}: the optimizer is a "
                        f"{type(optimizer).__name__}, not a keras optimizer")  # fmt: skip
    return model, optimizer, as_loss(loss, workload.name)


class _FunctionLoss(keras.losses.Loss):
    """A loss function (`keras.losses.sparse_categorical_crossentropy`, or a user's own) as
    a keras Loss: the custom loop calls a loss's `call` for per-sample losses, and the
    evaluation calls the compiled loss for its mean."""

    def __init__(self, function: Any) -> None:
        super().__init__(name=getattr(function, "__name__", "loss"))
        self.function = function

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return self.function(y_true, y_pred)


def as_loss(loss: Any, workload: str) -> keras.losses.Loss:
    """A user workload's loss as a keras Loss, whichever way Keras itself accepts it in
    `compile`: a Loss, a loss's name (`"sparse_categorical_crossentropy"`), or a function. A
    name used to train every cell and then fail in evaluation (`model.loss(...)` of a str),
    losing the cell's measurements; TypeError naming the workload for what is none of them."""
    if isinstance(loss, keras.losses.Loss):
        return loss
    if isinstance(loss, str):
        try:
            loss = keras.losses.get(loss)
        except ValueError:
            raise TypeError(f"workload {workload}: keras knows no loss named {loss!r}") from None
        if isinstance(loss, keras.losses.Loss):
            return loss
    if callable(loss):
        return _FunctionLoss(loss)
    raise TypeError(
        f"workload {workload}: the loss is a {type(loss).__name__}, not a keras Loss, a "
        "loss's name or a function"
    )
