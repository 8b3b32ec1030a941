"""`detect --measure`'s memory bandwidth on this CPU: a real STREAM triad in the measuring
child (small arrays), cached with the peaks and read back under the same cache rules."""

from __future__ import annotations

import pytest
from frameworks import needs_torch

from mpbench.detect.measure import (
    cache_key,
    cached_bandwidth,
    measure_and_cache,
    run_measure_child,
    write_cache,
)

TINY = {"sizes": (32,), "dtypes": ("fp32",), "budget_s": 0.05, "max_iters": 5, "min_iters": 2}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MPBENCH_CACHE", str(tmp_path / "cache"))


@needs_torch
def test_the_triad_is_measured_and_its_figures_agree():
    result = run_measure_child("cpu", bandwidth_mb=8, **TINY)
    assert result["ok"], result
    bandwidth = result["bandwidth"]
    assert bandwidth["ok"] and bandwidth["op"].startswith("STREAM triad")
    assert bandwidth["array_bytes"] == 8_000_000 and bandwidth["bytes_per_pass"] == 24e6
    assert 2 <= bandwidth["iterations"] <= 5
    assert 0 < bandwidth["best_s"] <= bandwidth["median_s"]
    assert bandwidth["best_gbps"] == pytest.approx(24e6 / bandwidth["best_s"] / 1e9)
    assert bandwidth["best_gbps"] >= bandwidth["median_gbps"] > 0
    assert bandwidth["copy_best_gbps"] > 0


@needs_torch
def test_no_bandwidth_is_measured_when_asked_for_none():
    assert "bandwidth" not in run_measure_child("cpu", bandwidth_mb=0, **TINY)


def test_a_cached_bandwidth_is_read_under_the_cache_rules():
    figures = {"ok": True, "device": "cpu", "dtypes": {}, "cache_key": cache_key("cpu")}
    write_cache("abc", {**figures, "bandwidth": {"ok": True, "best_gbps": 12.5}})
    assert cached_bandwidth("abc") == 12.5
    assert cached_bandwidth("abc", threads=999) is None  # measured with other threads
    write_cache("abc", {**figures, "bandwidth": {"ok": False, "error": "out of memory"}})
    assert cached_bandwidth("abc") is None
    assert cached_bandwidth("nothing") is None


@needs_torch
def test_a_measurement_of_the_bandwidth_alone_is_cached(monkeypatch):
    import mpbench.detect.measure as measure

    # No peak timed (fp8 is skipped on a CPU), the machine taken as quiet: the bandwidth
    # alone is worth a cache file.
    monkeypatch.setattr(
        measure, "run_measure_child", lambda device, **o: {**run_measure_child(device, **o),
                                                           "contention": {"contended": False}}
    )  # fmt: skip
    result = measure_and_cache(
        "cpu", "abc", sizes=(32,), dtypes=("fp8",), bandwidth_mb=4, budget_s=0.05
    )
    assert result["cache_file"] and not result["dtypes"]["fp8"]["ok"], result
    assert cached_bandwidth("abc") == pytest.approx(result["bandwidth"]["best_gbps"])
