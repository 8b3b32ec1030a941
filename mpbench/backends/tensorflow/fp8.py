"""The float8 policy in Keras 3: Keras' float8 training (`layer.quantize("float8")`) on the Dense
and EinsumDense layers that mpbench.fp8_rules's rules allow, labelled by what ran (hardware or
emulated), and the record's `fp8` field.

What this relies on in Keras 3.15 (keras/src/layers/core/dense.py and einsum_dense.py):

- `Dense.quantize("float8")` / `EinsumDense.quantize("float8")` on a built layer add the
  float8 variables (`_float8_build`: a scale and an amax history for the inputs, the kernel and
  the output gradient, float32, `overwrite_with_gradient=True`) and switch the layer's policy
  to `f"float8_from_{policy}"`: under mixed_bfloat16 "float8_from_mixed_bfloat16", a
  QuantizedFloat8DTypePolicy whose compute dtype stays bfloat16 and whose
  `amax_history_length` is 1024. The layer's `quantization_mode` is then "float8" and its
  call is `_float8_call`. Both refuse subclasses (`type(self) is not Dense`) and LoRA.
- `_float8_call` quantises and dequantises the inputs and the kernel to float8_e4m3fn, runs an
  ordinary matmul (einsum) in the compute dtype, and quantises and dequantises the output
  gradient to float8_e5m2 in the backward pass: delayed scaling, each step's scale from the
  max of the amax history (the first step uses the initial scale 1.0). The optimizer
  overwrites the scales and histories with what the custom gradients return, so fit() and
  a custom loop (apply_gradients) both update them.
- Only without XLA is that the whole story. Under XLA (`jit_compile=True`) on an NVIDIA GPU
  of compute capability >= 8.9 the q/dq pattern is placed "for the sake of pattern matching in
  gemm_rewrite": XLA's GEMM rewriter turns it into a cuBLASLt fp8 GEMM, the custom call
  `__cublas$lt$matmul$f8` (keras-team/keras#19488). A cell is labelled hardware only where
  the optimized HLO of its training step is seen to contain that call.
- quantize() must come before compile(): compile() builds the training functions from the
  layers as they are. A global "float8_from_..." policy cannot be used instead (a Sequential
  has no `_float8_call`), so the model is built under mixed_bfloat16 and its eligible layers
  quantized one by one.

Convolutions, norms, the embedding (and the tied head it reverses into), the attention's
score and weighted-sum matmuls, the softmax and the loss stay in mixed_bfloat16.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import keras

from mpbench import fp8_rules as rules
from mpbench.backends.base import Unsupported
from mpbench.errors import first_line
from mpbench.fp8_rules import (
    HARDWARE,
    Execution,
    Fp8Refused,
    LayerPlan,
    LinearLayer,
    device_refusal,
    execution,
    plan_layers,
)

RECIPE = "delayed"  # Keras has one float8 recipe: delayed scaling
# The operands' float8 formats, as _float8_call casts them (dense.py, einsum_dense.py).
FORMATS = {"input": "float8_e4m3fn", "kernel": "float8_e4m3fn", "grad_output": "float8_e5m2"}
CONV_REASON = "convolution: Keras implements float8 in Dense and EinsumDense only"
EMBEDDING_REASON = (
    "embedding (and, where it is called reversed, the tied output head's matmul): "
    "Keras implements float8 in Dense and EinsumDense only"
)
SUBCLASS_REASON = "a subclass of {base}: Keras quantizes Dense and EinsumDense themselves only"
LORA_REASON = "LoRA enabled: Keras' float8 call does not support LoRA"
XLA_REASON = (
    "without XLA (jit_compile off) Keras float8 is quantise-dequantise around an ordinary "
    "matmul, no fp8 GEMM: --jit on lets XLA rewrite it to a cuBLASLt fp8 GEMM "
    "(keras-team/keras#19488)"
)
# fp8.gemm of an emulated cell: the path, with the dtype its matmul ran in (rules.emulated_gemm).
EMULATED_PATH = "Keras float8 quantise-dequantise"
F8_GEMM_CALL = "__cublas$lt$matmul$f8"  # XLA's kCublasLtMatmulF8CallTarget
NO_FLOP_COUNTER = (
    "the workload gives no flops_per_step and its training graph was not counted (flops.py)"
)
COUNTED_NOTE = (
    "forward FLOPs per sample counted from the TensorFlow graph of one training step (flops.py)"
)
_CONVOLUTIONS = tuple(
    getattr(keras.layers, name)
    for name in (
        "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose",
        "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D", "SeparableConv2D",
    )
    if hasattr(keras.layers, name)
)  # fmt: skip
_EMBEDDINGS = (keras.layers.Embedding,)
_LINEAR = (keras.layers.Dense, keras.layers.EinsumDense)


@dataclass
class Fp8Setup:
    """What a float8 model was given before compile(): its plan, the layers quantized and the
    forward FLOPs per sample the share is taken of."""

    plan: LayerPlan
    layers_fp8: list[str]
    forward_flops: float | None
    flop_note: str | None = None
    unknown_rows: list[str] = field(default_factory=list)  # planned layers of unknown rows
    amax_history: int | None = None  # as the quantized layers' variables have it
    # Of the quantized layers: the dtype _float8_call dequantises to and multiplies in.
    compute_dtypes: list[str] = field(default_factory=list)
    scale_values: int = 0  # in the quantized layers' scales and amax histories (not params)


# The setup of each float8 model compiled_model built, for the backend to label and record.
_SETUPS: weakref.WeakKeyDictionary[Any, Fp8Setup] = weakref.WeakKeyDictionary()


def setup_of(model: keras.Model) -> Fp8Setup:
    return _SETUPS[model]


def is_fp8_state(variable: Any) -> bool:
    """A float8 layer's scale or amax history: a variable whose "gradient" is its next value
    (`overwrite_with_gradient`), no model weight (loops.model_gradients leaves it out too)."""
    return bool(getattr(variable, "overwrite_with_gradient", False))


@dataclass(frozen=True)
class ParamCounts:
    """The record's `params` (trainable) and `params_non_trainable`, counted as torch counts
    them (parameters that take a gradient; frozen parameters and floating-point running
    state apart), so that one model counts the same in both frameworks."""

    trainable: int
    non_trainable: int


def param_counts(model: keras.Model) -> ParamCounts:
    """The scalars in the model's trainable weights, and in its non-trainable floating-point
    weights (BatchNormalization's moving mean and variance, a frozen layer's weights: torch's
    running-statistics buffers and frozen parameters); an integer counter is state, not a
    parameter, in either framework. Neither counts the float8 layers' scales and amax
    histories (is_fp8_state), so a float8 cell counts the weights of its float32 twin."""

    def scalars(variables: list[Any], floating_only: bool = False) -> int:
        return sum(
            math.prod(v.shape)
            for v in variables
            if not is_fp8_state(v) and (not floating_only or keras.backend.is_float_dtype(v.dtype))
        )

    return ParamCounts(
        trainable=scalars(model.trainable_weights),
        non_trainable=scalars(model.non_trainable_weights, floating_only=True),
    )


def weight_count(model: keras.Model) -> int:
    """Every weight param_counts counts, trainable or not: count_params() less the float8
    scales and amax histories."""
    counts = param_counts(model)
    return counts.trainable + counts.non_trainable


def _children(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    # Model.quantize() walks the same private list (keras/src/models/model.py).
    return list(layer._flatten_layers(include_self=False, recursive=False))


def _walk(model: keras.Model) -> list[tuple[keras.layers.Layer, keras.layers.Layer]]:
    """(parent, layer) for every layer of the model, nested ones included, each once."""
    seen: set[int] = set()
    out = []

    def visit(parent: keras.layers.Layer) -> None:
        for child in _children(parent):
            if id(child) in seen:
                continue
            seen.add(id(child))
            out.append((parent, child))
            visit(child)

    visit(model)
    return out


def _name(model: keras.Model, layer: keras.layers.Layer) -> str:
    """The layer's path in the model (a nested layer under its parent's name), without the
    model's own name in front (a Sequential puts it there, a functional model does not)."""
    path = layer.path or layer.name
    return path.removeprefix(f"{model.name}/")


def _product(dims: Any) -> int | None:
    """The product of `dims`; None if one is unknown."""
    if any(d is None for d in dims):
        return None
    return math.prod(int(d) for d in dims)


def _input_shape(layer: keras.layers.Layer) -> tuple | None:
    """The input shape the layer was built for (its build config, which Keras keeps for
    serialization); None where it has none."""
    config = layer.get_build_config() or {}
    shape = config.get("input_shape")
    return tuple(shape) if shape is not None else None


def einsum_gemm(
    equation: str, input_shape: tuple, kernel_shape: tuple
) -> tuple[int, int, int | None]:
    """An EinsumDense as one GEMM: (in_features, out_features, rows_per_sample).

    In "abc,cde->abde" (the attention's query/key/value: kernel (d, heads, head_dim)) the
    letters of the input and the kernel that the output lacks are contracted: in_features is
    the product of their kernel dims (c = d); the kernel's letters in the output, not in the
    input, are the output features (d·e = heads·head_dim); the input's letters that go to the
    output without touching the kernel are rows, all but the first (the batch): b, the
    sequence. In "abcd,cde->abe" (the output projection, kernel (heads, head_dim, d)) c·d is
    contracted and e out. Letters in all three (a batched GEMM, one per value) count as rows,
    so the FLOPs stay 2·rows·in·out per sample. An ellipsis stands for the input's leading
    dims, batch first. rows_per_sample is None where the build shape left one of them None."""
    lhs, output = equation.replace(" ", "").split("->")
    inputs, kernel = lhs.split(",")
    if "..." in inputs:
        known = len(inputs) - 3
        extra = "".join(chr(0x2460 + i) for i in range(len(input_shape) - known))  # ①②…
        inputs = inputs.replace("...", extra)
        output = output.replace("...", extra)
    if len(inputs) != len(input_shape) or len(kernel) != len(kernel_shape):
        raise ValueError(
            f"einsum {equation!r} does not fit input {input_shape} and kernel {kernel_shape}"
        )
    kernel_dims = dict(zip(kernel, kernel_shape, strict=True))
    input_dims = dict(zip(inputs, input_shape, strict=True))
    in_features = math.prod(int(kernel_dims[c]) for c in kernel if c in inputs and c not in output)
    out_features = math.prod(int(kernel_dims[c]) for c in kernel if c in output and c not in inputs)
    rows = [input_dims[c] for c in inputs[1:] if c in output and c not in kernel]
    rows += [kernel_dims[c] for c in kernel if c in inputs and c in output]
    return in_features, out_features, _product(rows)


def _mha_rows(parent: keras.layers.Layer, layer: keras.layers.Layer) -> int | None:
    """A MultiHeadAttention's projection's rows per sample, from the shapes the attention was
    built for: it builds its output projection for (batch, None, heads, head_dim), leaving the
    sequence None, though it projects every query position."""
    if not isinstance(parent, keras.layers.MultiHeadAttention):
        return None
    shapes = (parent.get_build_config() or {}).get("shapes_dict", {})
    key = {
        "query": "query_shape",
        "attention_output": "query_shape",
        "key": "key_shape" if "key_shape" in shapes else "value_shape",
        "value": "value_shape",
    }.get(layer.name)
    shape = shapes.get(key) if key else None
    return _product(tuple(shape)[1:-1]) if shape else None


def _as_linear(
    model: keras.Model, parent: keras.layers.Layer, layer: keras.layers.Layer
) -> tuple[LinearLayer, bool]:
    """The layer as a GEMM, and whether its rows per sample are known (1 stands in if not).

    Dense multiplies its input's last dim by its kernel (in, units): in_features = the input's
    last dim, out_features = units, rows = the product of the input's dims between the batch
    and the last (the sequence length for a language model's MLP). EinsumDense: einsum_gemm."""
    kernel_shape = tuple(layer._kernel.shape)  # the float kernel, before quantize()
    input_shape = _input_shape(layer)
    if isinstance(layer, keras.layers.EinsumDense):
        if input_shape is None:
            raise ValueError(f"layer {layer.name} has no build shape")
        in_features, out_features, rows = einsum_gemm(layer.equation, input_shape, kernel_shape)
    else:
        in_features, out_features = int(kernel_shape[0]), int(kernel_shape[1])
        rows = _product(input_shape[1:-1]) if input_shape is not None else None
    if rows is None:
        rows = _mha_rows(parent, layer)
    name = _name(model, layer)
    return LinearLayer(name, in_features, out_features, rows or 1), rows is not None


def layer_plan(model: keras.Model) -> tuple[LayerPlan, dict[str, keras.layers.Layer], list[str]]:
    """Every Dense and EinsumDense of the model (nested ones included: a MultiHeadAttention's
    query, key, value and attention_output) as a LinearLayer, planned by mpbench.fp8_rules's rules;
    convolutions and embeddings listed as staying in the base policy. Also the layers by
    name, and the planned names whose rows per sample are unknown."""
    linears, other, by_name, unknown = [], {}, {}, []
    for parent, layer in _walk(model):
        name = _name(model, layer)
        if isinstance(layer, _LINEAR):
            base = next(cls for cls in _LINEAR if isinstance(layer, cls))
            if type(layer) is not base:
                other[name] = SUBCLASS_REASON.format(base=base.__name__)
            elif getattr(layer, "lora_enabled", False):
                other[name] = LORA_REASON
            elif layer.quantization_mode is not None:
                other[name] = f"already quantized ({layer.dtype_policy.name})"
            else:
                linear, known = _as_linear(model, parent, layer)
                linears.append(linear)
                by_name[name] = layer
                if not known:
                    unknown.append(name)
        elif isinstance(layer, _CONVOLUTIONS):
            other[name] = CONV_REASON
        elif isinstance(layer, _EMBEDDINGS):
            other[name] = EMBEDDING_REASON
    plan = plan_layers(linears, other)
    planned = set(plan.fp8_names)
    return plan, by_name, [name for name in unknown if name in planned]


def _forward_flops(
    workload: Any, units: int | None, sizes: dict[str, int]
) -> tuple[float | None, str | None]:
    """The model's forward FLOPs per sample, and a note on where they come from (or why they
    are unknown)."""
    if workload.kind == "language_model":
        return workload.forward_flops(1, units, **sizes), None
    if workload.kind != "user":
        return workload.forward_flops(1, units), None
    # A user workload's flops_per_step is the training FLOPs of one step (forward, input
    # and weight gradients of every GEMM: 3 x forward), at its own batch size. Without it,
    # the forward is counted from the graph once the cell has a batch (finish).
    given = workload.flops(workload.batch_size)
    if given is None:
        return None, NO_FLOP_COUNTER
    return given / (3.0 * workload.batch_size), (
        "forward FLOPs taken as a third of the workload's training FLOPs per step"
    )


def prepare(
    model: keras.Model, workload: Any, units: int | None, sizes: dict[str, int] | None
) -> Fp8Setup:
    """Plan the built model's fp8 layers and quantize them to Keras float8, before compile()
    (compiled_model calls this): returns the setup, also kept for setup_of(model)."""
    if not model.built:
        raise Unsupported(
            "float8: the Keras model is not built, and Keras quantizes only built layers "
            "(give it a keras.Input or build it)"
        )
    plan, layers, unknown = layer_plan(model)
    for name in plan.fp8_names:
        layers[name].quantize("float8")
    quantized = [layers[name] for name in plan.fp8_names]
    ran = [_name(model, layer) for layer in quantized if layer.quantization_mode == "float8"]
    histories = {int(layer.inputs_amax_history.shape[0]) for layer in quantized}
    flops, note = _forward_flops(workload, units, sizes or {})
    setup = Fp8Setup(
        plan,
        ran,
        flops,
        note,
        unknown,
        histories.pop() if len(histories) == 1 else None,
        sorted({keras.backend.standardize_dtype(layer.compute_dtype) for layer in quantized}),
        sum(math.prod(v.shape) for layer in quantized for v in layer.weights if is_fp8_state(v)),
    )
    _SETUPS[model] = setup
    return setup


def xla_fp8_gemm_refusal(model: keras.Model, x: Any, y: Any) -> str | None:
    """Why XLA is not seen running an fp8 GEMM for this model here; None where the optimized
    HLO of its training step (forward, loss and gradients, as Keras' jit-compiled train step
    has them, under the current device) contains `__cublas$lt$matmul$f8`. Compiles, runs
    nothing (experimental_get_compiler_ir): no variable moves."""
    import tensorflow as tf

    variables = model.trainable_variables

    @tf.function(jit_compile=True)
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x=x, y=y, y_pred=y_pred)
        return loss, tape.gradient(loss, variables)

    try:
        hlo = step.experimental_get_compiler_ir(tf.constant(x), tf.constant(y))(
            stage="optimized_hlo"
        )
    except Exception as exc:  # no compiler IR: nothing confirms an fp8 GEMM
        return f"could not read XLA's optimized HLO to confirm an fp8 GEMM ({first_line(exc)})"
    if F8_GEMM_CALL in hlo:
        return None
    return (
        f"XLA's optimized HLO of the training step has no {F8_GEMM_CALL} call: its GEMM "
        "rewriter made no fp8 GEMM of the float8 layers here"
    )


def label(
    placement: Any, requested: str, jit_compile: bool, model: keras.Model, x: Any, y: Any
) -> Execution:
    """hardware or emulated, from the device, XLA and (on sm_89+ with XLA) the compiled
    program; Unsupported where hardware was asked for and cannot be had."""
    kind = "cuda" if placement.is_gpu else "cpu"
    refusal = device_refusal(kind, placement.compute_capability)
    path = None
    if refusal is None:
        path = XLA_REASON if not jit_compile else xla_fp8_gemm_refusal(model, x, y)
    try:
        return execution(requested, refusal, path)
    except Fp8Refused as exc:
        raise Unsupported(str(exc)) from exc


def _scaling(setup: Fp8Setup) -> str:
    history = setup.amax_history if setup.amax_history is not None else "unknown"
    text = f"delayed, amax history {history} (max); the first step at scale 1.0"
    if setup.scale_values:
        text += f"; {setup.scale_values:,} scale and amax-history values, not counted in params"
    return text


def record(setup: Fp8Setup, run: Execution, requested: str) -> dict[str, Any]:
    """The record's `fp8` (results.Fp8Stats' fields), from what ran."""
    if run.mode == HARDWARE:
        gemm = "XLA cuBLASLt fp8 GEMM"
    else:
        gemm = rules.emulated_gemm(EMULATED_PATH, setup.compute_dtypes)
    flops, note = setup.forward_flops, setup.flop_note
    unknown = [name for name in setup.unknown_rows if name in set(setup.layers_fp8)]
    if unknown and flops is not None:
        flops = None
        note = f"the rows per sample of {', '.join(unknown)} are unknown (a dim Keras left None)"
    return rules.record(
        run,
        requested,
        setup.plan,
        setup.layers_fp8,
        flops,
        note,
        backend=f"keras {keras.__version__} float8 layers",
        gemm=gemm,
        recipe=RECIPE,
        scaling=_scaling(setup),
        formats=FORMATS,
    )


def finish(
    model: keras.Model,
    placement: Any,
    requested: str,
    jit_compile: bool,
    x: Any,
    y: Any,
    counted: Any = None,
) -> dict[str, Any]:
    """The backend's one call after compile(), before training: label the cell (Unsupported
    where it is refused) and return the record's `fp8`. `x`, `y`: one micro-batch, for the
    compiled program's check. `counted`: the flops.Count of a training step on that
    micro-batch, for a user workload that gives no FLOPs (its forward is the share's
    denominator)."""
    setup = setup_of(model)
    if setup.forward_flops is None and setup.flop_note == NO_FLOP_COUNTER and counted is not None:
        if counted.forward is not None:
            setup = replace(setup, forward_flops=counted.forward / len(x), flop_note=COUNTED_NOTE)
        else:
            setup = replace(setup, flop_note=f"the model's FLOPs are {counted.source}")
    run = label(placement, requested, jit_compile, model, x, y)
    return record(setup, run, requested)
