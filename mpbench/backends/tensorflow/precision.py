"""Apply a precision policy in Keras 3 and read back what is actually in effect (DESIGN.md §2).

TensorFlow enables TF32 by default on Ampere and later, which silently turns a "float32"
baseline into TF32: the flag is therefore set explicitly for every policy, then read back.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from mpbench.backends.base import Unsupported
from mpbench.backends.tensorflow.device import Placement
from mpbench.policies import POLICIES

# Keras global dtype policy per mpbench policy; tf32 is a float32 model with TF32 math.
KERAS_POLICY = {
    "float32": "float32",
    "tf32": "float32",
    "mixed_float16": "mixed_float16",
    "mixed_bfloat16": "mixed_bfloat16",
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
    hidden = model.layers[0](sample)
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
