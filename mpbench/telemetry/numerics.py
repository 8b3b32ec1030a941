"""Per-step numerics of a training cell (docs/telemetry.md): loss, loss scale, skipped steps,
and the health of the gradients, kept in bounded memory and written to the cell's side file
(its format: mpbench.results.sidefile).

`NumericsLog` stores evenly spaced points however long the run (stride doubling) and counts
the things that must be exact (steps, skipped steps, non-finite steps) on every step.
`torch_grad_health` and `tf_grad_health` read the global gradient norm and the number of
non-finite gradient elements with one host synchronisation. Neither framework is imported at
module level; each helper imports its own when called.

JSON has no NaN or Infinity, and the side file is strict JSON: a non-finite value is stored
as null. Null therefore means "unknown or non-finite"; what it was is told by the flags beside
it (`nonfinite_grads` > 0 for a null `grad_norm`) and by the exact totals
(`first_nonfinite_step`, `nonfinite_loss_steps`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from mpbench.results.sidefile import NUMERICS_COLUMNS, NUMERICS_TOTALS


class NumericsLog:
    """Keeps at most `max_points` evenly spaced steps of a run of any length.

    Every `stride`-th call of `record` (counting calls, from the first) is stored; the stride
    starts at `every`. When a point is due and `max_points` are stored, every second stored
    point is dropped and the stride doubles, so the points stay evenly spaced over the whole
    run and between max_points/2 and max_points of them remain. The totals count every call.

    `due()` says whether the next `record` will be stored: a caller may compute a costly value
    (the gradient health) only then. `grad_checked_steps` then says how many steps the
    gradient totals cover; with a loss scaler, `skipped_steps` counts the overflowing steps
    exactly anyway.
    """

    def __init__(self, max_points: int = 1000, every: int = 1) -> None:
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, not {max_points}")
        if every < 1:
            raise ValueError(f"every must be >= 1, not {every}")
        self.max_points = max_points
        self.stride = every
        self._calls = 0
        self._columns: dict[str, list[Any]] = {name: [] for name in NUMERICS_COLUMNS}
        self.total_steps = 0
        self.skipped_steps = 0
        self.nonfinite_steps = 0
        self.nonfinite_loss_steps = 0
        self.nonfinite_grad_steps = 0
        self.grad_checked_steps = 0
        self.first_nonfinite_step: int | None = None
        self.last_step: int | None = None
        self.min_loss_scale: float | None = None

    def due(self) -> bool:
        return self._calls % self.stride == 0

    def record(
        self,
        step: int,
        loss: float | None = None,
        loss_scale: float | None = None,
        skipped: bool | None = None,
        grad_norm: float | None = None,
        nonfinite_grads: int | None = None,
    ) -> None:
        """One optimizer step. None: not known (no scaler, gradients not checked)."""
        self.total_steps += 1
        self.last_step = step
        self.skipped_steps += bool(skipped)
        bad_loss = loss is not None and not math.isfinite(loss)
        bad_grads = bool(nonfinite_grads) or (
            grad_norm is not None and not math.isfinite(grad_norm)
        )
        if nonfinite_grads is not None or grad_norm is not None:
            self.grad_checked_steps += 1
        self.nonfinite_loss_steps += bad_loss
        self.nonfinite_grad_steps += bad_grads
        if bad_loss or bad_grads:
            self.nonfinite_steps += 1
            if self.first_nonfinite_step is None:
                self.first_nonfinite_step = step
        if (
            loss_scale is not None
            and math.isfinite(loss_scale)
            and (self.min_loss_scale is None or loss_scale < self.min_loss_scale)
        ):
            self.min_loss_scale = float(loss_scale)

        calls = self._calls
        self._calls += 1
        if calls % self.stride:
            return
        columns = self._columns
        if len(columns["step"]) >= self.max_points:
            for name, values in columns.items():
                columns[name] = values[::2]
            self.stride *= 2
            if calls % self.stride:
                return
        columns["step"].append(int(step))
        columns["loss"].append(_finite_or_none(loss))
        columns["loss_scale"].append(_finite_or_none(loss_scale))
        columns["skipped"].append(None if skipped is None else bool(skipped))
        columns["grad_norm"].append(_finite_or_none(grad_norm))
        columns["nonfinite_grads"].append(None if nonfinite_grads is None else int(nonfinite_grads))

    def columns(self) -> dict[str, list[Any]]:
        """The stored points, one list per column (copies), all of one length."""
        return {name: list(values) for name, values in self._columns.items()}

    def totals(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in NUMERICS_TOTALS}

    def to_dict(self) -> dict[str, Any]:
        """The side file's `numerics` object."""
        return {"stride": self.stride, "columns": self.columns(), "totals": self.totals()}


def _finite_or_none(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _unscale(norm: float, scale: float | None) -> float | None:
    if scale is not None:
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"a loss scale must be a positive finite number, not {scale}")
        norm /= scale
    return norm if math.isfinite(norm) else None


# --- PyTorch -------------------------------------------------------------------------------


def torch_grad_health(
    parameters: Iterable[Any], scale: float | None = None
) -> tuple[float | None, int]:
    """(global L2 norm of the gradients, number of non-finite gradient elements).

    The norm is None when it is not finite. `scale`: the loss scale the gradients still carry
    (before `scaler.step`/`unscale_`); the norm is divided by it. After `scaler.step` with a
    non-fused optimizer the gradients are already unscaled in place: pass None. Parameters
    without a gradient are left out; none at all gives (0.0, 0).

    A healthy step costs one multi-tensor kernel (`_foreach_norm`, accumulating in float32 so
    float16 gradients cannot overflow it), one stack and one host read of the per-tensor
    norms; the global norm is summed on the host in float64. A finite norm means every
    element is finite, so the count is 0 without touching the elements. Only when a tensor's
    norm is not finite (a step that overflowed, which the scaler already waited for) are that
    tensor's elements counted: a second kernel pass and a second host read. Counting on every
    step instead (isfinite + sum per tensor) cost 7x more on the CPU (benchmarks/
    telemetry_cost.py). A tensor of finite elements whose float32 norm overflows (elements
    beyond ~1e19) gives norm None with a count of 0.
    """
    import torch

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return 0.0, 0
    grads = [g.coalesce()._values() if g.is_sparse else g for g in grads]
    device = grads[0].device
    norms = torch.stack(_torch_norms(torch, grads, device)).tolist()  # the host read
    total = math.sqrt(math.fsum(n * n for n in norms))
    if math.isfinite(total):
        return _unscale(total, scale), 0
    bad = [g for g, n in zip(grads, norms, strict=True) if not math.isfinite(n)]
    counts = [torch.isfinite(g).logical_not_().sum().to(device) for g in bad]
    count = int(torch.stack(counts).sum().item()) if counts else 0
    return None, count


def _torch_norms(torch: Any, grads: list[Any], device: Any) -> list[Any]:
    """Per-tensor L2 norms accumulated in float32, on `device`."""
    if hasattr(torch, "_foreach_norm") and all(g.device == device for g in grads):
        try:
            return list(torch._foreach_norm(grads, 2, dtype=torch.float32))
        except (TypeError, RuntimeError):  # an older torch without the dtype argument
            pass
    # Several devices (model parallel) or no _foreach_norm: one norm per tensor.
    return [torch.linalg.vector_norm(g, 2, dtype=torch.float32).to(device) for g in grads]


# --- TensorFlow ----------------------------------------------------------------------------


def tf_grad_health_tensors(grads: Iterable[Any]) -> tuple[Any, Any]:
    """(global L2 norm as a float32 scalar tensor, non-finite elements as an int64 scalar
    tensor), built from TensorFlow ops only, so it runs inside a `tf.function` (and under
    XLA) and nothing is read back to the host. The norm is of the gradients as given: divide
    by the loss scale in the graph, or pass it to `tf_grad_health`. `None` gradients (unused
    variables) are left out; IndexedSlices count their values."""
    import tensorflow as tf

    tensors = []
    for grad in grads:
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            grad = grad.values
        tensors.append(tf.cast(grad, tf.float32) if grad.dtype != tf.float32 else grad)
    if not tensors:
        return tf.constant(0.0, tf.float32), tf.constant(0, tf.int64)
    norm = tf.linalg.global_norm(tensors)
    count = tf.add_n(
        [
            tf.math.count_nonzero(tf.logical_not(tf.math.is_finite(t)), dtype=tf.int64)
            for t in tensors
        ]
    )
    return norm, count


def tf_grad_health(grads: Iterable[Any], scale: float | None = None) -> tuple[float | None, int]:
    """`tf_grad_health_tensors` read back to the host in one transfer; the norm divided by
    `scale` (the loss scale the gradients carry) and None when not finite."""
    import tensorflow as tf

    norm, count = tf_grad_health_tensors(grads)
    norm_value, count_value = tf.stack(
        [tf.cast(norm, tf.float64), tf.cast(count, tf.float64)]
    ).numpy()
    return _unscale(float(norm_value), scale), int(count_value)
