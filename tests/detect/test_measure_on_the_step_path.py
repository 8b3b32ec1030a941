"""`detect --measure` times each dtype's matmul on the path a training step takes it: nn.Linear's
matmul with a float32 weight, fp16 and bf16 under torch.autocast as the cells run them (issue
41: on an AVX2-only CPU, torch.mm on bf16 tensors ran a slow reference kernel at 1/5.5 of what
the bf16 step reached through autocast, and that "peak" voided every bf16 MFU there). A cache
of the old method is another quantity, and is measured again. No timing is asserted (DESIGN §9).
"""

from __future__ import annotations

import json

import pytest
from frameworks import needs_torch

from mpbench.detect.measure import (
    CACHE_SCHEMA_VERSION,
    cache_key,
    cache_path,
    cached_peaks,
    read_cached,
    run_measure_child,
)
from mpbench.detect.measure_child import (
    AUTOCAST_KEYS,
    FP8_OP,
    PATH_OP,
    _multiply,
    on_step_path,
    path_op,
)

TINY = {"sizes": (32,), "budget_s": 0.05, "max_iters": 3, "min_iters": 2, "warmup": 1}
FINGERPRINT = "c0ffee00c0ffee01"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("MPBENCH_CACHE", str(root))
    return root


def test_each_dtype_says_the_path_it_was_timed_on():
    assert AUTOCAST_KEYS == ("fp16", "bf16")
    assert path_op("cpu", "bf16") == (
        "torch.nn.functional.linear(x, w) under torch.autocast('cpu', bfloat16): float32 "
        "weight (its cast cached), bfloat16 input"
    )
    assert "torch.autocast('cuda', float16)" in path_op("cuda", "fp16")
    assert path_op("cuda", "fp32") == path_op("cuda", "tf32") == PATH_OP
    assert path_op("cuda", "fp8") == FP8_OP


@needs_torch
@pytest.mark.parametrize(("key", "dtype"), [("bf16", "bfloat16"), ("fp16", "float16")])
def test_a_16_bit_multiply_runs_under_autocast_as_a_step_does(key, dtype):
    """What the timed closure runs: aten::linear on a float32 weight whose 16-bit copy
    autocast makes once for all the multiplies (no cast is timed), and no torch.mm of its own."""
    import torch
    from torch.profiler import profile

    device = torch.device("cpu")
    with on_step_path(torch, device, key):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == getattr(torch, dtype)
        assert not torch.is_grad_enabled()  # only the GEMM, no graph
        multiply = _multiply(torch, device, key, 16)
        with profile() as prof:
            for _ in range(4):
                multiply()
    counts = {e.key: e.count for e in prof.key_averages()}
    assert counts["aten::linear"] >= 4 and counts["aten::mm"] == 4  # x @ w.T, as nn.Linear
    assert counts.get("aten::_to_copy", 0) == 1  # the weight, cast once


@needs_torch
def test_float32_runs_without_autocast():
    import torch

    with on_step_path(torch, torch.device("cpu"), "fp32"):
        assert not torch.is_autocast_enabled("cpu")


@needs_torch
def test_the_child_times_bf16_through_autocast_and_says_so(no_gpu):
    result = run_measure_child("cpu", dtypes=("fp32", "bf16"), **TINY)
    assert result["ok"], result
    bf16, fp32 = result["dtypes"]["bf16"], result["dtypes"]["fp32"]
    assert bf16["op"] == path_op("cpu", "bf16") and fp32["op"] == PATH_OP
    for entry in (bf16, fp32):
        assert entry["ok"] or entry.get("skipped") or entry.get("error"), entry
    # Printed, not asserted (DESIGN §9): on an AVX2-only CPU this path ran ~12x torch.mm's.
    print(f"\nbf16 through autocast: {bf16.get('best_tflops')} TFLOP/s")


def test_a_cache_of_the_old_method_is_not_used(cache):
    """Version 2 held torch.mm on 16-bit tensors: another kernel, so another quantity."""
    assert CACHE_SCHEMA_VERSION == 3
    path = cache_path(FINGERPRINT)
    path.parent.mkdir(parents=True)
    old = {
        "ok": True,
        "device": "cpu",
        "cache_key": cache_key("cpu"),
        "dtypes": {"bf16": {"ok": True, "best_tflops": 0.0013}},
        "cache_schema_version": 2,
        "fingerprint": FINGERPRINT,
    }
    path.write_text(json.dumps(old))
    assert read_cached(FINGERPRINT) is None and cached_peaks(FINGERPRINT) == {}
    path.write_text(json.dumps({**old, "cache_schema_version": CACHE_SCHEMA_VERSION}))
    assert cached_peaks(FINGERPRINT) == {"bf16": 0.0013}
