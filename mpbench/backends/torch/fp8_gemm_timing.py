"""The fp8 prediction's measurements in torch (mpbench/fp8_gemms.py): bf16 torch.mm
against torch._scaled_mm at exactly a cell's GEMM shapes, and the device's copy bandwidth for
the cast overhead. Short, before training: a budget stops the timing, a refused shape is an
error in its row, and no random number is drawn from the global RNG (the cell's seeded RNG is
untouched).

The fp8 GEMM is timed the way torchao 0.18 runs it (float8/float8_ops.py,
addmm_float8_unwrapped; float8/config.py): the forward with fast accumulation
(gemm_config_output), the two backward GEMMs without; a rowwise recipe's GEMM without fast
accumulation runs the tensorwise cuBLAS kernel and multiplies its output by the (m, n)
product of the inverse row scales afterwards, as torchao does because "the rowwise
CUTLASS-based kernel is so slow without fast-accum". Both fp8 operands are e4m3 (torchao's
tensorwise recipe multiplies e5m2 gradients; the kernels cost the same).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable

import torch

from mpbench.backends.timing import StepTimer
from mpbench.errors import first_line
from mpbench.fp8_gemms import (
    EAGER_CAST_BYTES,
    FUSED_CAST_BYTES,
    Fp8Prediction,
    Gemm,
    GemmTiming,
    forward_shapes,
    predict,
    unique_shapes,
    untimed,
)
from mpbench.fp8_rules import TORCH_RECIPES

Shape = tuple[int, int, int]
FP8 = torch.float8_e4m3fn
# Each timed sample runs the GEMM back to back until it lasts about MIN_SAMPLE_S (at most
# MAX_INNER calls), so the synchronisation around it (~10 µs on CUDA) does not swamp a GEMM
# that takes 20 µs.
MIN_SAMPLE_S = 1e-3
MAX_INNER = 256
CPU_COPY_BYTES = 16 * 2**20
DEVICE_COPY_BYTES = 256 * 2**20
SEED = 0  # the private generator's: the operands are the same in every cell


def _sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def _median_s(
    fn: Callable[[], object],
    sync: Callable[[], None],
    warmup: int,
    repeats: int,
    min_sample_s: float,
) -> float:
    """Seconds per call of `fn`: the median of `repeats` samples after `warmup` calls (the
    last of which, timed alone, sets how many calls a sample runs), each timed with the one
    StepTimer."""
    for _ in range(max(warmup, 1) - 1):
        fn()
    once = StepTimer(sync)
    once.start()
    fn()
    single = once.stop()
    inner = max(1, min(MAX_INNER, math.ceil(min_sample_s / max(single, 1e-9))))
    timer = StepTimer(sync)
    for _ in range(max(repeats, 1)):
        timer.start()
        for _ in range(inner):
            fn()
        timer.stop()
    return statistics.median(timer.times_s) / inner


def _fp8_gemm(
    a: torch.Tensor, b: torch.Tensor, recipe: str, fast_accum: bool
) -> Callable[[], torch.Tensor]:
    """The fp8 GEMM of `recipe` on fp8 operands `a` (m×k, row-major) and `b` (k×n,
    column-major), as torchao's addmm_float8_unwrapped calls torch._scaled_mm."""
    m, n = a.shape[0], b.shape[1]
    if recipe == "tensorwise" or fast_accum:
        # a scalar scale per operand, or (rowwise) one per row of a and per column of b
        shape_a, shape_b = ((), ()) if recipe == "tensorwise" else ((m, 1), (1, n))
        scale_a = torch.ones(shape_a, device=a.device, dtype=torch.float32)
        scale_b = torch.ones(shape_b, device=a.device, dtype=torch.float32)

        def scaled() -> torch.Tensor:
            return torch._scaled_mm(
                a,
                b,
                scale_a=scale_a.reciprocal(),
                scale_b=scale_b.reciprocal(),
                out_dtype=torch.bfloat16,
                use_fast_accum=fast_accum,
            )

        return scaled
    scale_a = torch.ones(m, 1, device=a.device, dtype=torch.float32)
    scale_b = torch.ones(1, n, device=a.device, dtype=torch.float32)
    one = torch.ones((), device=a.device)

    def rowwise_rescaled() -> torch.Tensor:
        post = scale_a.reciprocal() * scale_b.reciprocal()
        out = torch._scaled_mm(
            a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=False
        )
        out *= post
        return out

    return rowwise_rescaled


def _operands(m: int, k: int, n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 a (m×k) and b (k×n) from a private generator, the same in every call."""
    generator = torch.Generator(device=device)
    generator.manual_seed(SEED)
    a = torch.randn(m, k, generator=generator, device=device, dtype=torch.bfloat16)
    b = torch.randn(k, n, generator=generator, device=device, dtype=torch.bfloat16)
    return a, b


def _bf16_s(shape: Shape, device: torch.device, timing: Callable[..., float]) -> float:
    a, b = _operands(*shape, device)
    return timing(lambda: torch.mm(a, b))


def _fp8_s(
    shape: Shape,
    device: torch.device,
    recipe: str,
    fast_accum: bool,
    timing: Callable[..., float],
) -> GemmTiming:
    """The fp8 times (bf16_s left None for the caller): without fast accumulation, and with
    it where asked; a refusal of the second alone keeps the first."""
    a, b = _operands(*shape, device)
    a8 = a.to(FP8)
    b8 = b.t().contiguous().to(FP8).t()  # k×n, column-major, as _scaled_mm wants it
    a = b = None  # the bf16 operands go before the fp8 GEMMs run
    result = GemmTiming(None, timing(_fp8_gemm(a8, b8, recipe, fast_accum=False)))
    if fast_accum:
        try:
            result.fp8_fast_accum_s = timing(_fp8_gemm(a8, b8, recipe, fast_accum=True))
        except Exception as exc:
            result.fast_accum_error = first_line(exc)
    return result


def _time_shape(
    shape: Shape,
    device: torch.device,
    recipe: str,
    fast_accum: bool,
    timing: Callable[..., float],
) -> GemmTiming:
    """One shape's times; its operands are allocated here and freed on return."""
    if min(shape) < 1:
        return GemmTiming(None, None, f"not a GEMM shape: {'×'.join(map(str, shape))}")
    try:
        bf16_s = _bf16_s(shape, device, timing)
    except Exception as exc:  # a refusal or out of memory: the row says so
        return GemmTiming(None, None, first_line(exc))
    try:
        result = _fp8_s(shape, device, recipe, fast_accum, timing)
    except Exception as exc:
        return GemmTiming(bf16_s, None, first_line(exc))
    result.bf16_s = bf16_s
    return result


def time_gemms(
    shapes: Iterable[Shape],
    device: torch.device,
    recipe: str = "tensorwise",
    *,
    warmup: int = 3,
    repeats: int = 10,
    budget_s: float = 5.0,
    fast_accum_shapes: Iterable[Shape] = (),
    min_sample_s: float = MIN_SAMPLE_S,
) -> dict[Shape, GemmTiming]:
    """Seconds per GEMM at each (m, k, n): bf16 torch.mm(a (m×k), b (k×n)) and the recipe's
    fp8 torch._scaled_mm without fast accumulation (and with it, as the forward runs, for the
    shapes in `fast_accum_shapes`), each the median of `repeats` samples after `warmup` calls,
    timed with StepTimer and the device's sync. Never raises for a shape: a refused one (a
    dimension cuBLASLt will not take, a recipe the build lacks, out of memory) gets the first
    line of its error, with the bf16 time where that ran (`fast_accum_error` where only the
    fast-accumulation GEMM was refused: torch 2.11's CPU build refuses rowwise scales, which
    the rowwise backward's tensorwise kernel does not use). Once `budget_s` is spent, the shapes
    left get "not timed: the probe's budget of 5 s was spent". Operands are allocated per
    shape and freed after it; they come from a private generator."""
    if recipe not in TORCH_RECIPES:
        raise ValueError(f"fp8 recipe {recipe!r} is not one of {', '.join(TORCH_RECIPES)}")
    sync = _sync(device)
    fast = set(fast_accum_shapes)

    def timing(fn: Callable[[], object]) -> float:
        return _median_s(fn, sync, warmup, repeats, min_sample_s)

    results: dict[Shape, GemmTiming] = {}
    started = time.monotonic()
    spent = f"not timed: the probe's budget of {budget_s:g} s was spent"
    with torch.no_grad():
        for shape in dict.fromkeys(tuple(s) for s in shapes):
            if time.monotonic() - started >= budget_s:
                results[shape] = GemmTiming(None, None, spent)
                continue
            results[shape] = _time_shape(shape, device, recipe, shape in fast, timing)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the probe's operands go back, not kept for training
    return results


def copy_bandwidth(device: torch.device, nbytes: int | None = None, repeats: int = 5) -> float:
    """Bytes per second of a device-to-device copy, read and write counted (2 × nbytes per
    copy): the median of `repeats` after a warm-up, with StepTimer. `nbytes` 256 MiB on an
    accelerator, 16 MiB on a CPU where not given."""
    if nbytes is None:
        nbytes = CPU_COPY_BYTES if device.type == "cpu" else DEVICE_COPY_BYTES
    seconds = _copy_s(device, nbytes, repeats)
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the buffers go back, as time_gemms's operands do
    return 2 * nbytes / seconds


def _copy_s(device: torch.device, nbytes: int, repeats: int) -> float:
    src = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return _median_s(lambda: dst.copy_(src), _sync(device), 1, repeats, MIN_SAMPLE_S)


def method(
    recipe: str,
    device: torch.device,
    bandwidth_bytes_per_s: float,
    *,
    warmup: int = 3,
    repeats: int = 10,
    cast_bytes_per_element: int,
) -> str:
    """How the prediction was measured, in words (Fp8Prediction.method)."""
    backward = "without"
    if recipe != "tensorwise":
        backward += " (the tensorwise kernel, then a rowwise rescale)"
    return (
        f"torch.mm bf16 vs torch._scaled_mm {recipe}, the forward with fast accumulation and "
        f"the backward {backward}, as torchao runs them; median of {repeats} samples "
        f"(each at least {MIN_SAMPLE_S * 1e3:g} ms of back-to-back calls) after {warmup} "
        f"warm-up{'' if warmup == 1 else 's'}, on {device}; casts {cast_bytes_per_element} "
        f"B/element at "
        f"{bandwidth_bytes_per_s / 1e9:,.0f} GB/s"
    )


def measure(
    gemms: list[Gemm],
    device: torch.device,
    recipe: str = "tensorwise",
    *,
    compiled: bool,
    warmup: int = 3,
    repeats: int = 10,
    budget_s: float = 5.0,
) -> Fp8Prediction:
    """The cell's prediction, measured here: every shape timed once, the bandwidth, and
    predict's table. The cast model follows the cell: FUSED_CAST_BYTES where it is compiled,
    EAGER_CAST_BYTES where not. Never raises: a probe that fails gives the shapes without
    times and why."""
    per_element = FUSED_CAST_BYTES if compiled else EAGER_CAST_BYTES
    try:
        timings = time_gemms(
            unique_shapes(gemms),
            device,
            recipe,
            warmup=warmup,
            repeats=repeats,
            budget_s=budget_s,
            fast_accum_shapes=forward_shapes(gemms),
        )
        bandwidth = copy_bandwidth(device)
        words = method(
            recipe,
            device,
            bandwidth,
            warmup=warmup,
            repeats=repeats,
            cast_bytes_per_element=per_element,
        )
        return predict(gemms, timings, bandwidth, words, cast_bytes_per_element=per_element)
    except Exception as exc:  # the cell trains regardless; the record says why no times
        return untimed(gemms, f"the fp8 GEMM probe failed: {first_line(exc)}")
