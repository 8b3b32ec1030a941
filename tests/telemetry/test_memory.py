"""Training memory on a CPU: the cell process's RSS sampled on a thread, for real."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from mpbench.results.schema import MemoryStats
from mpbench.telemetry.memory import (
    INTERVAL_ENV,
    MemorySampler,
    fill,
    interval_from_env,
    rss_sampler,
)


def test_a_transient_allocation_during_training_is_caught_and_freed_memory_still_counts():
    sampler = rss_sampler(interval_s=0.002).start()
    block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched, so it is resident
    time.sleep(0.1)  # many sampling periods
    del block  # freed before training ends: only a sampler sees this peak
    measured = sampler.stop()
    assert measured.training_bytes >= 48 * 2**20
    assert measured.samples >= 10
    assert measured.source == "process anonymous RSS sampled"
    assert measured.sample_interval_s == 0.002


def test_the_peak_is_relative_to_the_start_and_never_negative():
    readings = iter([500, 450, 450])  # memory shrank while "training"
    sampler = MemorySampler(lambda: next(readings, 450), "fake", interval_s=60)
    sampler.start()
    measured = sampler.stop()
    assert (measured.start_bytes, measured.peak_bytes, measured.training_bytes) == (500, 500, 0)


def test_fill_copies_a_measurement_into_the_record():
    sampler = MemorySampler(lambda: 1_000, "fake", interval_s=60).start()
    stats = fill(MemoryStats(host_peak_rss_bytes=9), sampler.stop(), dataset_bytes=123)
    assert stats.training_bytes == 0 and stats.training_start_bytes == 1_000
    assert stats.training_source == "fake" and stats.dataset_device_bytes == 123
    assert stats.host_peak_rss_bytes == 9  # the process-lifetime figure stays beside it


def test_the_experiment_knob_sets_the_interval_and_zero_runs_no_thread(monkeypatch):
    """MPBENCH_MEMORY_SAMPLE_INTERVAL_S (benchmarks/slow_processes.py) is read when the module
    is imported; 0 reads the two ends only, and the record then states no interval."""
    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert interval_from_env() == 0.02
    for text, expected in (("0", 0.0), (" 0.02 ", 0.02)):
        monkeypatch.setenv(INTERVAL_ENV, text)
        assert interval_from_env() == expected
    for text in ("-1", "fast", "nan", "inf"):
        monkeypatch.setenv(INTERVAL_ENV, text)
        with pytest.raises(ValueError, match=INTERVAL_ENV):
            interval_from_env()

    monkeypatch.setenv(INTERVAL_ENV, "0")
    code = "import mpbench.telemetry.memory as m; print(m.DEFAULT_INTERVAL_S)"
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert imported.stdout.strip() == "0.0", imported.stderr

    sampler = MemorySampler(lambda: 1_000, "fake", interval_s=0).start()
    assert sampler._thread is None
    measured = sampler.stop()
    assert measured.samples == 2 and measured.sample_interval_s is None
