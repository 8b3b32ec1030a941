"""Apply a precision policy in Keras 3 and read back what is actually in effect
(docs/architecture.md, "The precision contract").

TensorFlow enables TF32 by default on Ampere and later, which silently turns a "float32"
baseline into TF32: the flag is therefore set explicitly for every policy, then read back.
"""

from __future__ import annotations

import re
from typing import Any

import keras
import tensorflow as tf

from mpbench.backends.base import Unsupported
from mpbench.backends.tensorflow.device import Placement
from mpbench.policies import POLICIES

# Keras global dtype policy per mpbench policy; tf32 is a float32 model with TF32 math.
# float8 builds its model under its base policy, mixed_bfloat16, and then quantizes the eligible
# Dense / EinsumDense layers to Keras float8 before compile() (fp8.py): a global
# "float8_from_mixed_bfloat16" policy is no option, a Sequential has no float8 call.
KERAS_POLICY = {
    "float32": "float32",
    "tf32": "float32",
    "mixed_float16": "mixed_float16",
    "mixed_bfloat16": "mixed_bfloat16",
    "float8": "mixed_bfloat16",
}


def apply_policy(policy: str, placement: Placement) -> None:
    """Set the process-global Keras dtype policy and the TF32 flag before the model is built."""
    if policy not in KERAS_POLICY:
        raise Unsupported(f"the TensorFlow backend has no policy {policy!r}")
    wants_tf32 = POLICIES[policy].tf32
    if wants_tf32:
        capability = placement.compute_capability
        if capability is None or capability < (8, 0):
            here = f"compute capability {capability[0]}.{capability[1]}" if capability else None
            raise Unsupported(
                "TF32 needs an NVIDIA GPU of compute capability >= 8.0; "
                + (here or f"{placement.info.name} has none")
            )
    # Mixed policies run their matmuls in 16 bits, so TF32 stays off there too: only the
    # variables' float32 updates could use it, and a policy must not mix in a third precision.
    tf.config.experimental.enable_tensor_float_32_execution(wants_tf32)
    keras.mixed_precision.set_global_policy(KERAS_POLICY[policy])


def _dtype_name(dtype: Any) -> str:
    return keras.backend.standardize_dtype(dtype)


def read_back(model: keras.Model, sample: Any, loop: str, jit_compile: bool) -> dict[str, Any]:
    """The effective state: dtypes observed on a real forward pass, flags as TF reports them."""
    optimizer = model.optimizer
    # The first layer that computes (a functional model lists its InputLayer first).
    first = next(x for x in model.layers if not isinstance(x, keras.layers.InputLayer))
    hidden = first(sample)
    output = model(sample, training=False)
    variable_dtypes = sorted({_dtype_name(v.dtype) for v in model.trainable_variables})
    loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    state: dict[str, Any] = {
        "dtype_policy": keras.mixed_precision.global_policy().name,
        "compute_dtype": _dtype_name(hidden.dtype),
        "variable_dtype": variable_dtypes[0] if len(variable_dtypes) == 1 else variable_dtypes,
        "output_dtype": _dtype_name(output.dtype),
        "tf32_enabled": bool(tf.config.experimental.tensor_float_32_execution_enabled()),
        "loss_scaling": loss_scaling,
        "jit_compile": bool(jit_compile),
        "loop": loop,
        "tensorflow_version": tf.__version__,
        "keras_version": keras.__version__,
    }
    if loss_scaling:
        from mpbench.backends.tensorflow.loss_scale import StaticLossScaleOptimizer

        static = isinstance(optimizer, StaticLossScaleOptimizer)
        state["loss_scale_mode"] = "static" if static else "dynamic"
        state["loss_scale_initial"] = float(optimizer.initial_scale)
        if not static:
            state["loss_scale_growth_steps"] = int(optimizer.dynamic_growth_steps)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    state["gradient_accumulation_steps"] = inner.gradient_accumulation_steps
    return state


_SUFFIX = re.compile(r"_\d+$")
# The Keras layers whose ops make the "convolution" role (a 1-d one is a Conv2D op in TF).
_CONVOLUTIONS = (
    "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D", "SeparableConv1D",
    "SeparableConv2D",
)  # fmt: skip
# Ops that move or cast values rather than compute with them.
# IdentityN: what tf.custom_gradient wraps its outputs in (Keras float8 layers' q/dq).
_MOVES = {
    "Cast", "Identity", "IdentityN", "ReadVariableOp", "Const", "Reshape", "Shape",
    "StridedSlice",
}  # fmt: skip


def traced_op_dtypes(model: keras.Model, tokens: Any, targets: Any) -> dict[str, Any]:
    """Which dtype each op of one forward pass and its loss computes in, as TensorFlow's
    graph says: the forward and the compiled loss traced into one tf.function graph, each
    op's `T` attribute read, and the op attributed to the Keras layer whose name scope it
    is in (or to the loss). {"op_dtypes": {"<layer class>/<op type>": dtype(s)},
    "<role>_dtype": ...}: layer_norm (its arithmetic, before the layer casts its output to
    the compute dtype), softmax (the float32 output layer's), attention_softmax (inside
    MultiHeadAttention's dot_product_attention), attention (its einsums: projections,
    scores and the weighted sum), linear (the MLP's Dense layers), head (the tied output
    projection), loss; for a user's model also convolution and batch_norm (its arithmetic).
    Only floating-point ops count (not indices, shapes or masks)."""
    loss_fn = model.loss

    @tf.function
    def forward(x: Any, y: Any) -> Any:
        return loss_fn(y, model(x, training=False))

    graph = forward.get_concrete_function(tf.constant(tokens), tf.constant(targets)).graph
    classes = {layer.name: type(layer).__name__ for layer in model.layers}
    loss_scope = getattr(loss_fn, "name", None)
    seen: dict[str, set[str]] = {}
    for op in graph.get_operations():
        if op.type in _MOVES or "T" not in op.node_def.attr:
            continue
        attr = op.get_attr("T")
        if isinstance(attr, list):  # a list of types is an op that passes tensors along
            continue
        dtype = tf.as_dtype(attr)
        if not dtype.is_floating:  # indices, shapes and masks
            continue
        # A layer's ops are in its name scope, which TensorFlow may suffix: "ln_f_1".
        scopes = op.name.split("/")
        owners = (classes.get(s) or classes.get(_SUFFIX.sub("", s)) for s in scopes)
        owner = next((found for found in owners if found), None)
        if owner is None and loss_scope and any(s.startswith(loss_scope) for s in scopes):
            owner = "loss"
        if owner is None:
            continue
        seen.setdefault(f"{owner}/{op.type}", set()).add(_dtype_name(dtype))
    state: dict[str, Any] = {"op_dtypes": {key: _one(seen[key]) for key in sorted(seen)}}

    def role(owners: tuple[str, ...], op_types: tuple[str, ...] | None = None) -> set[str]:
        found: set[str] = set()
        for key, dtypes in seen.items():
            owner, op_type = key.split("/", 1)
            if owner in owners and (op_types is None or op_type in op_types):
                found |= dtypes
        return found

    roles = {
        "layer_norm": role(("LayerNormalization",)),
        "softmax": role(("Activation",), ("Softmax",)),
        "attention_softmax": role(("MultiHeadAttention",), ("Softmax",)),
        "attention": role(("MultiHeadAttention",), ("Einsum", "BatchMatMulV2", "MatMul")),
        "linear": role(("Dense",), ("MatMul", "BatchMatMulV2", "Einsum")),
        "head": role(("ReversibleEmbedding",), ("MatMul", "BatchMatMulV2", "Einsum")),
        "loss": role(("loss",)),
        "convolution": role(_CONVOLUTIONS, ("Conv2D", "Conv3D", "DepthwiseConv2dNative")),
        "batch_norm": role(("BatchNormalization",)),
    }
    for name, dtypes in roles.items():
        if dtypes:
            state[f"{name}_dtype"] = _one(dtypes)
    state["op_dtypes_source"] = "TensorFlow graph (each op's T attribute), one forward + loss"
    return state


def user_op_dtypes(model: keras.Model, x: Any, y: Any) -> dict[str, Any]:
    """traced_op_dtypes for a user's model, which mpbench did not build: one it cannot trace
    with its loss (several outputs, a loss that is no callable, an op no graph takes) or
    whose ops sit in no layer's name scope has no op_dtypes, and the record says why; the
    cell trains on (a built-in's failure is mpbench's bug, and fails its cell)."""
    try:
        state = traced_op_dtypes(model, x, y)
    except Exception as exc:  # whatever a model of any shape raises: said, not raised
        return {
            "op_dtypes_unavailable": "the model and its loss could not be traced into one "
            f"TensorFlow graph ({type(exc).__name__}: {_cause(exc)})",
        }
    if not state["op_dtypes"]:
        return {
            "op_dtypes_unavailable": "no floating-point op of the traced graph is in the name "
            "scope of one of the model's layers",
        }
    return state


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Lines of a traced call's error around its cause: TensorFlow's "in user code:" and the
# frames, Keras' "Arguments received by Layer.call():" and one "•" line per argument.
_AROUND_THE_CAUSE = ("Arguments received", "•")


def _cause(exc: Exception) -> str:
    """The line of a tracing error that says what went wrong, at most 200 characters."""
    lines = [_ANSI.sub("", line).strip() for line in str(exc).splitlines()]
    said = [line for line in lines if line and not line.startswith(_AROUND_THE_CAUSE)]
    return (said[-1] if said else "no message")[:200]


def _one(dtypes: set[str]) -> str | list[str]:
    ordered = sorted(dtypes)
    return ordered[0] if len(ordered) == 1 else ordered
