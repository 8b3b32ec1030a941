"""The device telemetry sampler: for real on this CPU, and with the pynvml fake for a GPU."""

from __future__ import annotations

import time

import pytest

from mpbench.results.contention import MIN_WINDOW_S
from mpbench.telemetry.energy import EnergyMeter
from mpbench.telemetry.sampler import (
    BASE_COLUMNS,
    GPU_COLUMNS,
    MIN_READINGS,
    NVML_LOOKBACK_S,
    DeviceTelemetry,
    TelemetrySampler,
)

CPU_SUMMARY_KEYS = {"samples", "interval_s", "window_s", "mean_cpu_util_pct", "peak_rss_bytes"}
GPU_SUMMARY_KEYS = {
    "mean_gpu_util_pct",
    "peak_nvml_device_used_bytes",
    "mean_power_w",
    "max_temperature_c",
    "mean_sm_clock_mhz",
}


def busy(seconds: float) -> int:
    """Keep this thread on the CPU for a while (the 'training')."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += sum(range(200))
    return n


def wait_for_samples(sampler: TelemetrySampler, count: int, limit_s: float = 5.0) -> None:
    # Waits on what the thread did, not on a clock: no timed assertion.
    end = time.monotonic() + limit_s
    while len(sampler._series["t_s"]) < count and time.monotonic() < end:
        busy(0.01)


def test_the_real_cpu_is_sampled():
    with TelemetrySampler("cpu", interval_s=0.02) as sampler:
        wait_for_samples(sampler, 3)
    telemetry = sampler.telemetry
    assert telemetry is not None and telemetry.error is None
    assert set(telemetry.series) == set(BASE_COLUMNS)
    assert telemetry.samples >= 2
    assert all(len(v) == telemetry.samples for v in telemetry.series.values())
    assert telemetry.series["t_s"] == sorted(telemetry.series["t_s"])
    assert max(telemetry.series["cpu_util_pct"]) > 0
    assert min(telemetry.series["rss_bytes"]) > 0
    summary = telemetry.summary()
    assert set(summary) == CPU_SUMMARY_KEYS
    assert summary["samples"] == telemetry.samples and summary["peak_rss_bytes"] > 0
    assert telemetry.power_samples() == [] and telemetry.unavailable == {}


def test_a_long_run_halves_the_series_and_doubles_the_interval():
    sampler = TelemetrySampler("cpu", interval_s=0.001, max_points=4).start()
    wait_for_samples(sampler, 4)  # the 5th point halves 4 to 2, then it grows again
    deadline = time.monotonic() + 5
    while sampler.interval_s == 0.001 and time.monotonic() < deadline:
        time.sleep(0.002)
    telemetry = sampler.stop()
    assert telemetry.interval_s >= 0.002 and telemetry.interval_s == sampler.interval_s
    assert 2 <= telemetry.samples <= 4
    t = telemetry.series["t_s"]
    assert t == sorted(t)


def test_halving_keeps_every_second_point_of_every_column():
    sampler = TelemetrySampler("cpu", interval_s=1.0, max_points=4)
    for i in range(5):  # no thread: the bookkeeping alone
        sampler._append({"t_s": float(i), "cpu_util_pct": 10.0 * i, "rss_bytes": 100 + i})
    assert sampler._series == {
        "t_s": [0.0, 2.0, 4.0],
        "cpu_util_pct": [0.0, 20.0, 40.0],
        "rss_bytes": [100, 102, 104],
    }
    assert sampler.interval_s == 2.0


def test_a_gpu_adds_its_columns(fake_nvml):
    fake = fake_nvml("A100")
    fake.configure_telemetry(0, power_mw=312_500, gpu_util=93, sm_clock_mhz=1395)
    with TelemetrySampler("cuda:0", interval_s=0.01) as sampler:
        wait_for_samples(sampler, 2)
    telemetry = sampler.telemetry
    assert set(telemetry.series) == set(BASE_COLUMNS) | set(GPU_COLUMNS)
    assert telemetry.unavailable == {} and telemetry.error is None
    summary = telemetry.summary()
    assert set(summary) == CPU_SUMMARY_KEYS | GPU_SUMMARY_KEYS
    # A window of a few hundredths of a second: NVML's means are withheld (the short-window
    # rule below), the instantaneous readings kept.
    assert summary["mean_power_w"] is None and summary["mean_gpu_util_pct"] is None
    assert summary["mean_sm_clock_mhz"] == 1395
    assert (
        summary["peak_nvml_device_used_bytes"] == 512 * 2**20 and summary["max_temperature_c"] == 61
    )
    assert telemetry.power_samples()[0][1] == pytest.approx(312.5)
    assert fake.calls()[-1] == "nvmlShutdown"


def test_an_unsupported_metric_is_dropped_and_the_rest_go_on(fake_nvml):
    fake = fake_nvml("T4", call_errors={(0, "nvmlDeviceGetPowerUsage"): 3})  # NOT_SUPPORTED
    with TelemetrySampler("cuda:0", interval_s=0.01) as sampler:
        wait_for_samples(sampler, 3)
    telemetry = sampler.telemetry
    assert "power_w" not in telemetry.series and "mean_power_w" not in telemetry.summary()
    assert telemetry.unavailable == {"power_w": "nvmlDeviceGetPowerUsage: Not Supported"}
    assert telemetry.samples >= 3 and telemetry.error is None
    for column in set(GPU_COLUMNS) - {"power_w"}:
        assert len(telemetry.series[column]) == telemetry.samples
    assert fake.calls().count("nvmlDeviceGetPowerUsage") == 1  # asked once, not every tick
    assert telemetry.power_samples() == []


def test_a_metric_failing_mid_run_is_removed_whole(fake_nvml):
    fake = fake_nvml("A100")
    sampler = TelemetrySampler("cuda:0", interval_s=60).start()  # the thread stays asleep
    sampler._tick()
    fake._state["call_errors"][(0, "nvmlDeviceGetTemperature")] = fake.NVML_ERROR_GPU_IS_LOST
    sampler._tick()
    telemetry = sampler.stop()
    assert "temperature_c" not in telemetry.series
    assert telemetry.unavailable["temperature_c"] == (
        "nvmlDeviceGetTemperature: GPU is lost (after 1 samples; the column was removed)"
    )
    assert all(len(v) == 3 for v in telemetry.series.values())


def test_no_nvml_leaves_the_gpu_columns_out_with_a_reason(fake_nvml):
    fake_nvml(init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    telemetry = TelemetrySampler("cuda:0", interval_s=60).start().stop()
    assert set(telemetry.series) == set(BASE_COLUMNS)
    reason = "NVML could not start (Driver Not Loaded)"
    assert telemetry.unavailable == dict.fromkeys(GPU_COLUMNS, reason)


def test_an_unexpected_error_ends_sampling_without_raising():
    sampler = TelemetrySampler("cpu", interval_s=0.001)

    def broken() -> float:
        raise RuntimeError("sensor exploded")

    sampler._reads["broken"] = broken  # any failure inside a tick that is not NVML's
    sampler.start()
    deadline = time.monotonic() + 5
    while sampler._error is None and time.monotonic() < deadline:
        time.sleep(0.001)
    telemetry = sampler.stop()
    assert telemetry.error == (
        "sampling stopped after an unexpected error: RuntimeError('sensor exploded')"
    )
    assert not sampler._thread.is_alive()


def test_stop_is_prompt_and_idempotent_and_the_thread_is_a_daemon():
    sampler = TelemetrySampler("cpu", interval_s=3600).start()
    assert sampler._thread.daemon
    first = sampler.stop()  # returns without waiting out the hour
    assert sampler.stop() is first and first.samples == 1  # the final reading at stop()


def test_power_samples_feed_the_energy_meter_on_a_gpu_without_a_counter(fake_nvml):
    fake = fake_nvml("P100")
    fake.configure_telemetry(0, power_mw=150_000)
    sampler = TelemetrySampler("cuda:0", interval_s=0.01).start()
    meter = EnergyMeter.for_device("cuda:0").start()
    wait_for_samples(sampler, 3)
    telemetry = sampler.stop()
    reading = meter.stop(telemetry.power_samples())
    t = telemetry.series["t_s"]
    assert reading.source == "integrated NVML power samples"
    assert reading.joules == pytest.approx(150.0 * (t[-1] - t[0]))


def test_an_empty_telemetry_summarises_to_none():
    telemetry = DeviceTelemetry(0.25, {c: [] for c in BASE_COLUMNS})
    assert telemetry.summary() == {
        "samples": 0,
        "interval_s": 0.25,
        "window_s": None,
        "mean_cpu_util_pct": None,
        "peak_rss_bytes": None,
    }
    assert telemetry.withheld() == {"mean_cpu_util_pct": "no CPU-time reading of the window"}


# --- the short-window rule (docs/telemetry.md) ---


def gpu_telemetry(times: list[float], window: tuple[float, float]) -> DeviceTelemetry:
    """Readings at `times`: utilisation 10, 20, 30, ... and power 100 W more, in order."""
    n = len(times)
    series = {
        "t_s": times,
        "cpu_util_pct": [100.0] * n,
        "rss_bytes": [1.0] * n,
        "gpu_util_pct": [10.0 * (i + 1) for i in range(n)],
        "power_w": [100.0 + 10.0 * (i + 1) for i in range(n)],
    }
    return DeviceTelemetry(0.25, series, device="cuda:0", window=window, cpu_time_s=0.0)


def test_the_first_h200_windows_get_no_sampled_means_and_say_why():
    """bf16 on the H200: 2 readings in a 0.3 s window read 2 % and idle power."""
    telemetry = gpu_telemetry([0.25, 0.31], (0.0, 0.31))
    summary, withheld = telemetry.summary(), telemetry.withheld()
    assert summary["mean_gpu_util_pct"] is None and summary["mean_power_w"] is None
    assert withheld["mean_gpu_util_pct"] == (
        "2 NVML readings in 0.31 s, 0 of them 1 s or more into it: too few for a mean (needs 5; "
        "NVML averages over its own sample period of up to 1 s)"
    )
    assert withheld["mean_power_w"].endswith(
        "; the energy counter's mean power is energy.mean_power_w"
    )


def test_only_readings_whose_sample_period_lies_inside_the_window_count():
    """Opened at 2 s (after warm-up): readings before 3 s look back before the window, and
    a reading after its end is not the window's."""
    times = [0.5 * i for i in range(1, 17)]  # 0.5 ... 8.0 s
    telemetry = gpu_telemetry(times, (2.0, 7.5))
    kept = [i for i, t in enumerate(times) if 2.0 + NVML_LOOKBACK_S <= t <= 7.5]
    assert len(kept) == 10 >= MIN_READINGS
    summary = telemetry.summary()
    assert summary["mean_gpu_util_pct"] == pytest.approx(sum(10.0 * (i + 1) for i in kept) / 10)
    assert summary["mean_power_w"] == pytest.approx(100 + sum(10.0 * (i + 1) for i in kept) / 10)
    assert summary["window_s"] == 5.5 and "mean_power_w" not in telemetry.withheld()


@pytest.mark.parametrize("readings", [MIN_READINGS - 1, MIN_READINGS])
def test_a_mean_needs_min_readings(readings):
    times = [NVML_LOOKBACK_S + 0.25 * i for i in range(readings)]
    summary = gpu_telemetry(times, (0.0, times[-1])).summary()
    assert (summary["mean_gpu_util_pct"] is None) == (readings < MIN_READINGS)


def test_cpu_utilisation_is_the_cpu_time_counter_over_the_window():
    series = {c: [] for c in BASE_COLUMNS}
    long = DeviceTelemetry(0.25, series, window=(1.0, 3.0), cpu_time_s=3.0)
    assert long.summary()["mean_cpu_util_pct"] == pytest.approx(150.0)  # 1.5 cores
    short = DeviceTelemetry(0.25, series, window=(1.0, 1.0 + MIN_WINDOW_S / 2), cpu_time_s=0.1)
    assert short.summary()["mean_cpu_util_pct"] is None
    assert "under 20 ticks of the CPU counters" in short.withheld()["mean_cpu_util_pct"]


def test_the_real_sampler_opens_its_window_after_warm_up():
    """This CPU for real: busy in the "warm-up", then a window busy or asleep; the window is
    what follows open_window(), and its CPU figure the process's CPU time over it."""
    utilisation = {}
    for work in (busy, time.sleep):
        sampler = TelemetrySampler("cpu", interval_s=0.02).start()
        busy(0.05)  # the warm-up: before the window, so not in its figure
        sampler.open_window()
        work(MIN_WINDOW_S + 0.05)
        telemetry = sampler.stop()
        start, end = telemetry.window
        assert start >= 0.05 and end - start >= MIN_WINDOW_S + 0.05
        assert telemetry.series["t_s"][0] < start  # the series keeps the warm-up's readings
        assert "mean_cpu_util_pct" not in telemetry.withheld()
        utilisation[work] = telemetry.summary()["mean_cpu_util_pct"]
    # Asleep, the busy warm-up would show if it leaked into the window; a busy thread gets
    # less than a core on a loaded machine, but more than a sleeping one.
    assert utilisation[time.sleep] < 30
    assert utilisation[busy] > utilisation[time.sleep] + 10


def test_a_short_gpu_window_for_real_withholds_the_means(fake_nvml):
    """The fake GPU, the real sampler and clock: a window of a few readings."""
    fake_nvml("H100")
    with TelemetrySampler("cuda:0", interval_s=0.01) as sampler:
        wait_for_samples(sampler, 2)
    telemetry = sampler.telemetry
    assert telemetry.summary()["mean_gpu_util_pct"] is None
    reason = telemetry.withheld()["mean_gpu_util_pct"]
    assert reason.startswith(f"{telemetry.samples} NVML readings in ")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        TelemetrySampler("cpu", interval_s=0)
    with pytest.raises(ValueError):
        TelemetrySampler("cpu", max_points=1)
