"""The fp8 prediction's measurements in torch (backends/torch/fp8_gemm_timing.py), on a CPU: the
real torch._scaled_mm path at tiny shapes, refusals as errors, the budget, the untouched
global RNG, and the probe's whole prediction."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from mpbench.backends.torch import fp8_gemm_timing as timing  # noqa: E402
from mpbench.fp8_gemms import training_gemms  # noqa: E402
from mpbench.fp8_rules import LinearLayer  # noqa: E402

CPU = torch.device("cpu")
SHAPES = [(32, 64, 48), (48, 32, 64), (32, 64, 48)]  # the repeat is timed once
QUICK = {"warmup": 1, "repeats": 3}
REAL_SCALED_MM = torch._scaled_mm


def _build_refusal(recipe: str) -> str | None:
    """This torch build's own answer to a CPU fp8 GEMM with the recipe's scales and fast
    accumulation (torch 2.11 refuses rowwise scales on a CPU, 2.13 takes them)."""
    a = torch.ones(32, 64).to(torch.float8_e4m3fn)
    b = torch.ones(48, 64).to(torch.float8_e4m3fn).t()
    scales = {"tensorwise": ((), ()), "rowwise": ((32, 1), (1, 48))}[recipe]
    sa, sb = (torch.ones(shape) for shape in scales)
    try:
        REAL_SCALED_MM(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    except Exception as exc:
        return str(exc).strip().splitlines()[0]
    return None


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_every_shape_is_timed_once_in_bf16_and_fp8(recipe):
    got = timing.time_gemms(SHAPES, CPU, recipe, fast_accum_shapes=[(32, 64, 48)], **QUICK)
    assert list(got) == [(32, 64, 48), (48, 32, 64)]
    refusal = _build_refusal(recipe)
    if recipe == "tensorwise":  # every torch mpbench supports runs it on a CPU
        assert refusal is None
    for shape, result in got.items():
        # Without fast accumulation every recipe runs the tensorwise kernel.
        assert result.bf16_s > 0 and result.fp8_s > 0 and result.error is None
        if shape != (32, 64, 48):  # the fast-accumulation GEMM only for a forward's shape
            assert (result.fp8_fast_accum_s, result.fast_accum_error) == (None, None)
        elif refusal is None:
            assert result.fp8_fast_accum_s > 0 and result.fast_accum_error is None
        else:
            assert (result.fp8_fast_accum_s, result.fast_accum_error) == (None, refusal)


def _spy(monkeypatch, refuse=None):
    """torch._scaled_mm, recording each call's operand shapes, scale shapes and fast-accum
    flag, and refusing (as cuBLASLt does) where `refuse(a, b)` says why."""
    calls = []

    def scaled_mm(a, b, *, scale_a, scale_b, out_dtype, use_fast_accum=False, **kw):
        why = refuse(a, b) if refuse else None
        if why:
            raise RuntimeError(f"{why}\nException raised from scaled_mm at Blas.cpp:1234")
        calls.append((tuple(a.shape), tuple(scale_a.shape), tuple(scale_b.shape), use_fast_accum))
        assert b.stride() == (1, b.shape[0]), "the second operand must be column-major"
        return REAL_SCALED_MM(
            a,
            b,
            scale_a=scale_a,
            scale_b=scale_b,
            out_dtype=out_dtype,
            use_fast_accum=use_fast_accum,
        )

    monkeypatch.setattr(torch, "_scaled_mm", scaled_mm)
    return calls


def _not_16(a, b):
    bad = [d for d in (*a.shape, b.shape[1]) if d % 16]
    return f"Expected dimensions to be multiples of 16, got {bad}" if bad else None


def test_a_refused_shape_gets_its_error_and_its_bf16_time(monkeypatch):
    _spy(monkeypatch, refuse=_not_16)
    got = timing.time_gemms([(30, 64, 48), (32, 64, 48)], CPU, **QUICK)
    refused, fine = got[(30, 64, 48)], got[(32, 64, 48)]
    assert refused.bf16_s > 0
    assert refused.fp8_s is None
    assert refused.error == "Expected dimensions to be multiples of 16, got [30]"
    assert fine.error is None and fine.fp8_s > 0


def test_a_refused_fast_accumulation_gemm_keeps_the_time_without_it(monkeypatch):
    real = torch._scaled_mm

    def no_fast(a, b, *, use_fast_accum=False, **kw):
        if use_fast_accum:
            raise RuntimeError("fast accumulation is not supported here\ndetails")
        return real(a, b, use_fast_accum=use_fast_accum, **kw)

    monkeypatch.setattr(torch, "_scaled_mm", no_fast)
    got = timing.time_gemms([(32, 64, 48)], CPU, fast_accum_shapes=[(32, 64, 48)], **QUICK)
    result = got[(32, 64, 48)]
    assert result.fp8_s > 0 and result.error is None
    assert result.fp8_fast_accum_s is None
    assert result.fast_accum_error == "fast accumulation is not supported here"


def test_a_bf16_gemm_that_fails_and_a_shape_that_is_no_gemm_are_errors(monkeypatch):
    def mm(a, b):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore")

    monkeypatch.setattr(torch, "mm", mm)
    got = timing.time_gemms([(16, 16, 16), (0, 16, 16)], CPU, **QUICK)
    assert got[(16, 16, 16)] == timing.GemmTiming(
        None, None, "CUDA out of memory. Tried to allocate 2 GiB"
    )
    assert got[(0, 16, 16)].error == "not a GEMM shape: 0×16×16"


def test_the_fp8_gemms_are_called_as_torchao_runs_them(monkeypatch):
    calls = _spy(monkeypatch)
    timing.time_gemms([(32, 64, 48)], CPU, "rowwise", fast_accum_shapes=[(32, 64, 48)], **QUICK)
    kinds = set(calls)
    # Without fast accumulation: the tensorwise kernel (scalar scales), rescaled after;
    # with it: the rowwise kernel.
    assert kinds == {((32, 64), (), (), False), ((32, 64), (32, 1), (1, 48), True)}
    calls.clear()
    timing.time_gemms([(32, 64, 48)], CPU, "tensorwise", **QUICK)
    assert set(calls) == {((32, 64), (), (), False)}


def test_the_global_rng_is_untouched():
    before = torch.random.get_rng_state()
    timing.time_gemms([(32, 64, 48)], CPU, "tensorwise", **QUICK)
    timing.copy_bandwidth(CPU, nbytes=2**20, repeats=2)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_budget_stops_timing_new_shapes(monkeypatch):
    clock = iter([0.0, 0.0, 6.0, 7.0])  # the start, then one reading before each shape
    monkeypatch.setattr(timing, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    got = timing.time_gemms([(16, 16, 16), (32, 16, 16), (48, 16, 16)], CPU, **QUICK)
    assert got[(16, 16, 16)].fp8_s > 0
    spent = "not timed: the probe's budget of 5 s was spent"
    assert got[(32, 16, 16)] == timing.GemmTiming(None, None, spent)
    assert got[(48, 16, 16)] == timing.GemmTiming(None, None, spent)


def test_a_sample_runs_a_cheap_call_many_times_and_reports_one_call():
    calls = []
    seconds = timing._median_s(lambda: calls.append(1), lambda: None, 3, 10, 1e-3)
    inner = (len(calls) - 3) // 10
    assert len(calls) == 3 + 10 * inner
    assert inner == timing.MAX_INNER  # a no-op call is far under 1 ms / 256
    assert 0 < seconds < 1e-3 / timing.MAX_INNER


def test_a_slow_call_is_one_call_a_sample():
    seconds = timing._median_s(lambda: time.sleep(0.002), lambda: None, 1, 3, 1e-3)
    assert 0.002 <= seconds < 0.05


def test_the_copy_bandwidth_is_in_bytes_per_second():
    bandwidth = timing.copy_bandwidth(CPU, nbytes=4 * 2**20, repeats=3)
    assert math.isfinite(bandwidth)
    assert bandwidth > 1e8  # any CPU copies more than 100 MB/s; GB/s would read ~10


def test_an_unknown_recipe_is_refused():
    with pytest.raises(ValueError, match="recipe 'delayed'"):
        timing.time_gemms([(16, 16, 16)], CPU, "delayed")


LAYERS = [LinearLayer("fc_1", 64, 128, rows_per_sample=4), LinearLayer("fc_2", 128, 64, 4)]


@pytest.mark.parametrize(("compiled", "per_element"), [(False, 33), (True, 5)])
def test_the_probe_predicts_every_gemm_of_the_cell(compiled, per_element):
    gemms = training_gemms(LAYERS, batch_size=8)
    got = timing.measure(gemms, CPU, "tensorwise", compiled=compiled, **QUICK)
    assert [(r.layer, r.role, r.m, r.k, r.n) for r in got.rows] == [
        (g.layer, g.role, g.m, g.k, g.n) for g in gemms
    ]
    assert all(r.bf16_ms > 0 and r.fp8_ms > 0 and r.cast_ms > 0 for r in got.rows)
    bf16 = sum(r.bf16_ms for r in got.rows)
    assert got.predicted_gain == pytest.approx(bf16 / sum(r.fp8_ms + r.cast_ms for r in got.rows))
    # The cast overhead is the bytes at the measured bandwidth.
    first = got.rows[0]
    cast_s = per_element * (32 * 64 + 64 * 128) / (got.bandwidth_gb_s * 1e9)
    assert first.cast_ms == pytest.approx(cast_s * 1e3)
    assert f"casts {per_element} B/element at " in got.method
    assert got.method.startswith("torch.mm bf16 vs torch._scaled_mm tensorwise")
    assert (
        "median of 3 samples (each at least 1 ms of back-to-back calls) after 1 warm-up, on cpu; "
        in got.method
    )


def test_a_probe_that_fails_gives_the_shapes_without_times(monkeypatch):
    def broken(device, nbytes=None, repeats=5):
        raise RuntimeError("no bandwidth today\nsecond line")

    monkeypatch.setattr(timing, "copy_bandwidth", broken)
    gemms = training_gemms(LAYERS, batch_size=8)
    got = timing.measure(gemms, CPU, compiled=False, **QUICK)
    assert got.predicted_gain is None
    assert len(got.rows) == 6 and all(r.bf16_ms is None for r in got.rows)
    assert got.note == "the fp8 GEMM probe failed: no bandwidth today"


def test_a_copy_counts_its_read_and_its_write(monkeypatch):
    copies = []

    def one_ms_a_copy(fn, sync, warmup, repeats, min_sample_s):
        fn()
        copies.append(repeats)
        return 1e-3

    monkeypatch.setattr(timing, "_median_s", one_ms_a_copy)
    assert timing.copy_bandwidth(CPU, nbytes=2**20, repeats=4) == 2 * 2**20 / 1e-3
    assert copies == [4]
    # Not told how much, a CPU copies 16 MiB.
    assert timing.copy_bandwidth(CPU) == 2 * 16 * 2**20 / 1e-3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_a_dimension_cublaslt_refuses_is_an_error_and_the_rng_is_untouched():
    cuda = torch.device("cuda")
    before = torch.cuda.get_rng_state()
    got = timing.time_gemms([(64, 100, 64), (64, 128, 64)], cuda, **QUICK)
    refused, fine = got[(64, 100, 64)], got[(64, 128, 64)]
    assert refused.bf16_s > 0 and refused.fp8_s is None
    assert "divisible by 16" in refused.error
    if torch.cuda.get_device_capability() >= (8, 9):
        assert fine.error is None and fine.fp8_s > 0
    assert torch.equal(torch.cuda.get_rng_state(), before)
    assert timing.copy_bandwidth(cuda, nbytes=64 * 2**20) > 1e11  # any CUDA GPU copies > 100 GB/s
