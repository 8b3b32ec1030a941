"""A static loss scale for Keras 3 that skips overflowing steps, as torch's does.

Keras' own static scale, `loss_scale_factor` on the inner optimizer, has two traps (research
notes §1, verified on TF 2.21 / Keras 3.15): `compile(auto_scale_loss=True)` wraps the
optimizer in a LossScaleOptimizer whose constructor sets `loss_scale_factor = None`, dropping
the scale without a word; and with `loss_scale_factor` alone, non-finite gradients are
applied, so one overflow turns every weight into NaN while `iterations` keeps counting.

This keeps the LossScaleOptimizer's machinery (scale_loss, the finite check, `ops.cond`
between applying and skipping, the per-replica path under tf.distribute) and removes only the
dynamics: the scale is never doubled nor halved. A skipped step leaves the weights and the
inner optimizer's `_iterations` untouched, so skips are counted as for the dynamic scale.
`compile()` does not wrap an optimizer that already is a LossScaleOptimizer, so the same
object serves `fit` and the custom loop.
"""

from __future__ import annotations

import keras

from mpbench.backends.base import Unsupported


class StaticLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    def __init__(self, inner_optimizer: keras.optimizers.Optimizer, scale: float) -> None:
        # Only the stateful (TensorFlow) path below keeps the scale fixed; Keras' stateless
        # path (the JAX backend) would still halve it, so other backends are refused here.
        backend = keras.backend.backend()
        if backend != "tensorflow":
            raise Unsupported(f"a static loss scale needs Keras' TensorFlow backend, not {backend}")
        super().__init__(inner_optimizer, initial_scale=scale, dynamic_growth_steps=2**31 - 1)

    def _stateful_handle_finite_grads(self, grads, trainable_variables):  # type: ignore[override]
        scale = self.dynamic_scale
        variables = trainable_variables or self._trainable_variables
        unscaled = [
            g if g is None or self._overwrite_variable_with_gradient(v) else g / scale
            for g, v in zip(grads, variables, strict=True)
        ]
        self.inner_optimizer.apply(unscaled, trainable_variables=trainable_variables)

    def _stateful_handle_non_finite_grads(self):  # type: ignore[override]
        # Skip the step and keep the scale: the parent would halve it here.
        self.step_counter.assign(0)
