"""Predict before you run, explain after: an fp8 cell's GEMMs, their predicted gain
from bf16 and fp8 GEMM times measured at exactly those shapes, and the verdict's words.

No framework: the backend times the shapes (backends/torch/fp8_gemm_timing.py) and hands the
times in; this module lists the GEMMs, adds the cast overhead from bytes moved at the measured
bandwidth, and says what the numbers mean. torchao's own rule (docs/source/workflows/
training.md in pytorch/ao): fp8 wins where `bf16_gemm_time - fp8_gemm_time > fp8_overhead_time`,
the overhead bounded by memory bandwidth (research/gpu-anchors.md §1).

The prediction is of the fp8 layers' GEMMs only (with their casts), not of the whole step:
norms, attention, the optimizer and the layers kept in bf16 are the same in both cells, so a
measured step gain is the prediction diluted by them, and lower still where eager casts and
unfused ops cost more than the model below allows for.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from mpbench.fp8_rules import LinearLayer
from mpbench.results.schema import Fp8GemmRow, Fp8Prediction

FORWARD, GRAD_INPUT, GRAD_WEIGHT = "forward", "grad_input", "grad_weight"
ROLES = (FORWARD, GRAD_INPUT, GRAD_WEIGHT)
# torchao's rowwise_with_gw_hp recipe runs the grad_weight GEMM in high precision (bf16).
HP_GRAD_WEIGHT_RECIPES = ("rowwise_with_gw_hp",)

# Bytes moved per operand element to make it fp8 with dynamic (current) scaling.
# FUSED: an amax read of its bf16 value (2 B), a scaled cast read (2 B), the fp8 write (1 B):
# the least two passes can move, what torch.compile's fused amax and cast kernels come to.
FUSED_CAST_BYTES = 5
# EAGER: torchao 0.18's unfused path, kernel by kernel (float8_utils.tensor_to_amax,
# float8_training_tensor._ToFloat8ConstrFunc, float8_utils.to_fp8_saturated) on a bf16
# operand: abs (read 2, write 2), max (read 2), .to(float32) (read 2, write 4), * scale
# (read 4, write 4), clamp (read 4, write 4), .to(float8) (read 4, write 1) = 33 B. A float32
# master weight comes to the same 33 B (.to(float32) is then a no-op, the rest read 4 B).
EAGER_CAST_BYTES = 33
# The fused figure: what torch.compile's fused casts cost, the path an fp8 cell takes by default.
CAST_BYTES_PER_ELEMENT = FUSED_CAST_BYTES

# A predicted or measured gain within 1 ± BREAK_EVEN_BAND "breaks even": a few per cent is
# what separate runs of the same cell differ by, so a smaller difference is no verdict.
BREAK_EVEN_BAND = 0.05
# Below this in any of M, K, N, torchao's H100 tables (tensorwise and rowwise, compiled)
# show fp8 losing (research/gpu-anchors.md §1). Only words for the verdict; the prediction
# itself comes from the times.
SMALL_DIMENSION = 4096
NO_HARDWARE = "no fp8 hardware"


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a training step: an (m×k)·(k×n) product. `fp8` False for a GEMM the recipe
    keeps in bf16 (rowwise_with_gw_hp's grad_weight)."""

    layer: str  # the nn.Linear's qualified name
    role: str  # "forward" | "grad_input" | "grad_weight"
    m: int
    k: int
    n: int
    fp8: bool = True

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.m, self.k, self.n)


def training_gemms(
    layers: Iterable[LinearLayer], batch_size: int, recipe: str = "tensorwise"
) -> list[Gemm]:
    """The three GEMMs of each layer's training step, M = batch_size × rows_per_sample (the
    micro-batch one device runs; for a language model, batch × seq_len), K = in_features,
    N = out_features: forward Y = X·Wᵀ (M, K, N); grad_input dX = dY·W (M, N, K); grad_weight
    dW = dYᵀ·X (N, M, K). torchao computes grad_input for every layer, the first included
    (its autograd.Function does not ask whether the input needs a gradient)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    hp_grad_weight = recipe in HP_GRAD_WEIGHT_RECIPES
    gemms = []
    for layer in layers:
        m = round(batch_size * layer.rows_per_sample)
        k, n = layer.in_features, layer.out_features
        gemms += [
            Gemm(layer.name, FORWARD, m, k, n),
            Gemm(layer.name, GRAD_INPUT, m, n, k),
            Gemm(layer.name, GRAD_WEIGHT, n, m, k, fp8=not hp_grad_weight),
        ] * layer.calls  # a layer called twice a forward runs its three GEMMs twice
    return gemms


def unique_shapes(gemms: Iterable[Gemm]) -> list[tuple[int, int, int]]:
    """Each (m, k, n) once, in first-seen order: what the timing runs."""
    return list(dict.fromkeys(g.shape for g in gemms))


def forward_shapes(gemms: Iterable[Gemm]) -> list[tuple[int, int, int]]:
    """The forward GEMMs' shapes, once each: torchao runs those with fast accumulation
    (Float8LinearConfig.gemm_config_output), the backward ones without."""
    return unique_shapes(g for g in gemms if g.role == FORWARD and g.fp8)


def cast_bytes(gemm: Gemm, per_element: int = CAST_BYTES_PER_ELEMENT) -> int:
    """Bytes moved to cast both operands of an fp8 GEMM with dynamic (current) scaling:
    `per_element` for each element of the (m×k) and (k×n) operands; 0 for a GEMM the recipe
    keeps in bf16.

    The default, FUSED_CAST_BYTES (5 B: an amax read of the bf16 value, a scaled cast read,
    the fp8 write), is the least two passes over a bf16 operand can move: what a compiled cell
    (inductor fusing amax and cast) comes to, so for an eager cell it is a lower bound on the
    cast overhead and the prediction an upper bound on fp8's gain. An eager cell moves
    EAGER_CAST_BYTES (33 B, torchao's unfused kernels) per element, and pays a kernel launch
    per op besides. Not counted either way: a float32 master weight's wider reads when
    compiled (9 B, not 5), the fp8 transposes torchao makes so that _scaled_mm gets a
    row-major first and a column-major second operand (2 B each where needed), and the
    scales themselves (a few bytes)."""
    if not gemm.fp8:
        return 0
    return per_element * (gemm.m * gemm.k + gemm.k * gemm.n)


@dataclass
class GemmTiming:
    """One measured shape, in seconds: the bf16 GEMM, the fp8 GEMM as torchao runs its
    backward GEMMs (no fast accumulation), and where asked for the fp8 GEMM with fast
    accumulation (as torchao runs the forward); `error` why bf16_s or fp8_s is missing,
    `fast_accum_error` why the fast-accumulation time is (a forward at this shape is then
    not predicted: torchao would run it so)."""

    bf16_s: float | None
    fp8_s: float | None
    error: str | None = None
    fp8_fast_accum_s: float | None = None
    fast_accum_error: str | None = None


def _row(gemm: Gemm, **times: float | str | None) -> Fp8GemmRow:
    return Fp8GemmRow(gemm.layer, gemm.role, gemm.m, gemm.k, gemm.n, fp8=gemm.fp8, **times)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def predict(
    gemms: list[Gemm],
    timings: dict[tuple[int, int, int], GemmTiming],
    bandwidth_bytes_per_s: float,
    method: str,
    *,
    cast_bytes_per_element: int = CAST_BYTES_PER_ELEMENT,
) -> Fp8Prediction:
    """The table and the predicted gain from the measured times: each Gemm's (m, k, n) is
    looked up in `timings` (a shape missing there is a row without times); its cast overhead
    is cast_bytes at `bandwidth_bytes_per_s`. A forward GEMM uses the fast-accumulation time
    where there is one, and has no time where that GEMM was refused (fast_accum_error). Rows
    without times are left out of the gain, and the note says how many and why."""
    if not (math.isfinite(bandwidth_bytes_per_s) and bandwidth_bytes_per_s > 0):
        raise ValueError(f"the bandwidth must be a positive number, not {bandwidth_bytes_per_s}")
    rows, missing = [], []
    bf16_total = fp8_total = cast_total = 0.0
    for gemm in gemms:
        timing = timings.get(gemm.shape) or GemmTiming(None, None, "not timed")
        fp8_s, error = timing.fp8_s, timing.error
        if gemm.role == FORWARD and gemm.fp8 and timing.fast_accum_error:
            fp8_s, error = None, f"with fast accumulation: {timing.fast_accum_error}"
        elif gemm.role == FORWARD and timing.fp8_fast_accum_s is not None:
            fp8_s = timing.fp8_fast_accum_s
        if not gemm.fp8:  # kept in bf16 by the recipe: no fp8 GEMM, no cast
            fp8_s = timing.bf16_s
        if timing.bf16_s is None or fp8_s is None:
            error = error or "not timed"
            missing.append((gemm, error))
            rows.append(
                _row(
                    gemm,
                    bf16_ms=_ms(timing.bf16_s),
                    fp8_ms=_ms(fp8_s),
                    cast_ms=None,
                    predicted_gain=None,
                    error=error,
                )
            )
            continue
        cast_s = cast_bytes(gemm, cast_bytes_per_element) / bandwidth_bytes_per_s
        bf16_total, fp8_total, cast_total = (
            bf16_total + timing.bf16_s,
            fp8_total + fp8_s,
            cast_total + cast_s,
        )
        rows.append(
            _row(
                gemm,
                bf16_ms=_ms(timing.bf16_s),
                fp8_ms=_ms(fp8_s),
                cast_ms=_ms(cast_s),
                predicted_gain=_ratio(timing.bf16_s, fp8_s + cast_s),
            )
        )
    timed = len(gemms) - len(missing)
    note = None
    if missing:
        gemm, why = missing[0]
        note = (
            f"{len(missing)} of {len(gemms)} GEMMs not timed, left out of the prediction "
            f"(first: {_where(gemm)}: {why})"
        )
    return Fp8Prediction(
        rows=rows,
        predicted_gain=_ratio(bf16_total, fp8_total + cast_total) if timed else None,
        bandwidth_gb_s=bandwidth_bytes_per_s / 1e9,
        method=method,
        note=note,
        gemm_gain=_ratio(bf16_total, fp8_total) if timed else None,
    )


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def _where(gemm: Gemm | Fp8GemmRow) -> str:
    return f"{gemm.layer}'s {gemm.role} GEMM {gemm.m}×{gemm.k}×{gemm.n}"


def untimed(gemms: list[Gemm], note: str, *, hardware: bool = True) -> Fp8Prediction:
    """The table of shapes without times, and why (a probe that failed, or no hardware)."""
    rows = [_row(g, bf16_ms=None, fp8_ms=None, cast_ms=None, predicted_gain=None) for g in gemms]
    method = "not timed" if hardware else f"not timed: {NO_HARDWARE}"
    return Fp8Prediction(rows, None, None, method, note, hardware=hardware)


def no_hardware(gemms: list[Gemm], why: str) -> Fp8Prediction:
    """Shapes only, where no fp8 GEMM can run (a CPU, a GPU below sm_89): the note says why."""
    return untimed(gemms, f"{NO_HARDWARE}: {why}", hardware=False)


def smallest_dimension(rows: Iterable[Fp8GemmRow], threshold: int = SMALL_DIMENSION) -> str | None:
    """Words naming the smallest of M, K, N below `threshold` ("smallest dimension 784, in
    fc_1's forward GEMM 8192×784×4096"), among the rows that lose (predicted gain < 1) where
    any were timed, else among all fp8 rows; None where no dimension is that small. Only
    words for the verdict: the prediction comes from the times."""
    rows = [r for r in rows if r.fp8]
    losing = [r for r in rows if r.predicted_gain is not None and r.predicted_gain < 1]
    candidates = losing or rows
    if not candidates:
        return None
    row = min(candidates, key=lambda r: min(r.m, r.k, r.n))
    smallest = min(row.m, row.k, row.n)
    if smallest >= threshold:
        return None
    return f"smallest dimension {smallest}, in {_where(row)}"


def _gain(value: float) -> str:
    return f"{value:.2f}×"


def _measured(value: float | None) -> float | None:
    """A measured gain that can be compared; None for a missing, non-positive or NaN one."""
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return value


def _band(value: float) -> str:
    if value > 1 + BREAK_EVEN_BAND:
        return "gain"
    if value < 1 - BREAK_EVEN_BAND:
        return "loss"
    return "even"


def explain(prediction: Fp8Prediction | None, measured_gain: float | None) -> str | None:
    """The verdict's words: what the fp8 layers' GEMMs predicted, and the step's measured
    gain (the fp8 cell's speed over its bf16 baseline) beside it.

    A gain is a "gain" above 1 + BREAK_EVEN_BAND (1.05), a "loss" below 1 - BREAK_EVEN_BAND
    (0.95), and "breaks even" between. By the predicted band:
    - gain: "fp8 should gain 1.30× on these layers" with "(measured 1.12×)" where the step
      gained too; ", but measured 0.90×: the rest of the step (casts, unfused ops) ate it"
      where it broke even or lost.
    - even: "fp8 breaks even on these layers at best (predicted 1.02×, measured 0.70×)".
    - loss: "fp8 loses here: <why> (predicted 0.80× on its layers, measured 0.35×; <smallest
      dimension>)", <why> being "its GEMMs are too small" where a dimension is below
      SMALL_DIMENSION, else "its fp8 GEMMs are slower than bf16 at these shapes" (the GEMMs
      alone lose) or "its casts cost more than its fp8 GEMMs save". Where the step gained
      nevertheless: ", but measured 1.10×: more than its GEMMs predict".
    The measured gain is left out where it is missing, NaN or not positive. Without times:
    "no fp8 hardware: <why>" where none could run, else "no fp8 prediction: <note>" (with the
    measured gain). A note that some GEMMs were not timed is appended after "; ". None
    where there is no prediction.
    """
    if prediction is None:
        return None
    measured = _measured(measured_gain)
    if not prediction.hardware:
        return prediction.note or NO_HARDWARE
    predicted = prediction.predicted_gain
    if predicted is None:
        text = f"no fp8 prediction: {prediction.note or 'its GEMMs were not timed'}"
        return text + (f" (measured {_gain(measured)})" if measured is not None else "")
    band = _band(predicted)
    if band == "gain":
        text = f"fp8 should gain {_gain(predicted)} on these layers"
        if measured is not None and _band(measured) == "gain":
            text += f" (measured {_gain(measured)})"
        elif measured is not None:
            text += (
                f", but measured {_gain(measured)}: "
                "the rest of the step (casts, unfused ops) ate it"
            )
    elif band == "even":
        numbers = f"predicted {_gain(predicted)}"
        if measured is not None:
            numbers += f", measured {_gain(measured)}"
        text = f"fp8 breaks even on these layers at best ({numbers})"
    else:
        small = smallest_dimension(prediction.rows)
        if small:
            why = "its GEMMs are too small"
        elif prediction.gemm_gain is not None and prediction.gemm_gain < 1:
            why = "its fp8 GEMMs are slower than bf16 at these shapes"
        else:
            why = "its casts cost more than its fp8 GEMMs save"
        surprise = measured is not None and _band(measured) == "gain"
        numbers = f"predicted {_gain(predicted)} on its layers"
        if measured is not None and not surprise:
            numbers += f", measured {_gain(measured)}"
        if small:
            numbers += f"; {small}"
        text = f"fp8 loses here: {why} ({numbers})"
        if surprise:
            text += f", but measured {_gain(measured)}: more than its GEMMs predict"
    if prediction.note:
        text += f"; {prediction.note}"
    return text
