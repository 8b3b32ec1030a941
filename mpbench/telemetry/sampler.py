"""Device telemetry while a cell trains: a few readings a second on a daemon thread.

Every tick reads the process's CPU utilisation and RSS (psutil); on cuda:N it also reads the
GPU's utilisation, memory in use, power, SM clock and temperature through NVML. The thread
sleeps between ticks and runs beside the timed steps, never inside them. A CPU tick measured
0.12-0.16 ms on a 2-core AMD EPYC VM (psutil's cpu_percent is about 90 µs of it, memory_info
about 30 µs): at 4 Hz that is well under 0.1 % of one core.

Nothing here may disturb training: NVML that cannot be opened leaves the GPU columns out with
a reason; a metric whose NVML call fails (Not Supported on old or virtual GPUs, MIG slices) is
dropped from then on, its column removed so that every column stays one value per `t_s`, and
its reason kept; any other exception ends sampling and is kept as `DeviceTelemetry.error`.

A long run stays bounded: when the series would exceed `max_points` it keeps every second
point and the interval doubles, so the series covers the whole run at a coarser step.

Memory: `nvml_device_used_bytes` is NVML's `used` for the whole device (nvmlDeviceGetMemoryInfo,
the v1 struct: "Sum of Reserved and Allocated device memory", NVML API reference, nvmlMemory_t),
so every process on the GPU, CUDA contexts, the frameworks' caching reserves and what the
driver sets aside. It is not the framework allocator's peak that the record's `memory` fields
hold, and is named so, in the side file and in the record's
`telemetry.peak_nvml_device_used_bytes` (schema v7; older records' `peak_gpu_memory_bytes`
is read under that name). The v2 struct (version=pynvml.nvmlMemory_v2) needs a driver with
nvmlDeviceGetMemoryInfo_v2, and NVML's reference has described its `used` both with and
without the reserve across releases: v1 keeps one meaning on every driver.

A MIG slice has no power column (energy.MIG_NO_ENERGY): NVML's power is the board's.

The window: `open_window()` marks where the measured steps begin (after warm-up), `stop()`
where they end. The record's means are over that window, and only where it holds enough:
- NVML's utilisation and power are averages over NVML's own sample period, so a reading
  taken within NVML_LOOKBACK_S of the window's start also averages time before it; a mean
  needs MIN_READINGS readings that look back inside the window, else it is None with the
  reason (the energy counter's ΔE/Δt is the power of such a window);
- the CPU utilisation is the process's CPU-time counter (psutil cpu_times) over the window,
  ΔCPU/Δt, not a mean of readings: over any window of at least contention.MIN_WINDOW_S (20
  clock ticks) it is exact to a tick or two.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from mpbench.results.contention import MIN_WINDOW_S, MIN_WINDOW_TICKS
from mpbench.telemetry.energy import MIG_NO_ENERGY
from mpbench.telemetry.nvml import NvmlDevice, NvmlUnavailable, cuda_index, open_nvml_device

BASE_COLUMNS = ("t_s", "cpu_util_pct", "rss_bytes")
GPU_COLUMNS = (
    "gpu_util_pct",
    "nvml_device_used_bytes",
    "power_w",
    "sm_clock_mhz",
    "temperature_c",
)

# NVML's utilisation is "over the past sample period", which "may be between 1 second and 1/6
# second, depending on the product being queried" (NVML API reference, nvmlUtilization_t), and
# nvmlDeviceGetPowerUsage on Ampere (but GA100) and newer returns "power averaged over 1 sec
# interval". So a reading taken sooner than this after the window opened averages time before
# the window (idle, or warm-up), whatever the product.
NVML_LOOKBACK_S = 1.0
# A sampled mean needs at least this many readings that look back inside the window. The first
# H200 run's means of 2 readings over 0.3 s windows read 2 % utilisation and near-idle power
# for a busy GPU: they were the edges of the window, not its middle.
MIN_READINGS = 5
# Summary key -> the column whose readings are NVML's averages over its sample period.
_SAMPLED_MEANS = {"mean_gpu_util_pct": "gpu_util_pct", "mean_power_w": "power_w"}

# column -> (NVML function, how to read it off a pynvml module and a handle).
_NVML_READS: dict[str, tuple[str, Callable[[Any, Any], float]]] = {
    "gpu_util_pct": (
        "nvmlDeviceGetUtilizationRates",
        lambda nv, h: float(nv.nvmlDeviceGetUtilizationRates(h).gpu),
    ),
    "nvml_device_used_bytes": (
        "nvmlDeviceGetMemoryInfo",
        lambda nv, h: int(nv.nvmlDeviceGetMemoryInfo(h).used),  # v1: device-wide (module doc)
    ),
    "power_w": ("nvmlDeviceGetPowerUsage", lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
    "sm_clock_mhz": (
        "nvmlDeviceGetClockInfo",
        lambda nv, h: float(nv.nvmlDeviceGetClockInfo(h, getattr(nv, "NVML_CLOCK_SM", 1))),
    ),
    "temperature_c": (
        "nvmlDeviceGetTemperature",
        lambda nv, h: float(nv.nvmlDeviceGetTemperature(h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))),
    ),
}


def clock_event_reader(nv: Any) -> Callable[[Any], int] | None:
    """nvmlDeviceGetCurrentClocksEventReasons (R535+), else the older, deprecated
    nvmlDeviceGetCurrentClocksThrottleReasons (same bit values; NVML API reference,
    "Deprecation and/or Removal Notices"): a driver older than 535 answers FunctionNotFound
    to the new name, and an older nvidia-ml-py lacks it."""
    new = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    old = getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    if new is None:
        return old
    if old is None:
        return new
    not_found = getattr(nv, "NVMLError_FunctionNotFound", ())

    def read(handle: Any) -> int:
        try:
            return new(handle)
        except not_found:
            return old(handle)

    return read


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _peak(values: list[float]) -> int | None:
    return int(max(values)) if values else None


def _max(values: list[float]) -> float | None:
    return max(values) if values else None


# summary key -> (column, statistic) over the whole series (instantaneous readings: peaks,
# clocks); present in summary() only where the column is. The means NVML averages over its
# sample period (_SAMPLED_MEANS) follow the window's rule instead.
_GPU_SUMMARY: dict[str, tuple[str, Callable[[list[float]], float | int | None]]] = {
    # NVML's device-wide `used` (module doc), under the record's v4 field name.
    "peak_nvml_device_used_bytes": ("nvml_device_used_bytes", _peak),
    "max_temperature_c": ("temperature_c", _max),
    "mean_sm_clock_mhz": ("sm_clock_mhz", _mean),
}


@dataclass
class DeviceTelemetry:
    """What a TelemetrySampler read: one value per column per tick."""

    interval_s: float  # the final interval (it doubles each time the series is halved)
    series: dict[str, list[float]]  # column -> values; t_s is seconds since start()
    unavailable: dict[str, str] = field(default_factory=dict)  # column -> why it is missing
    error: str | None = None  # why sampling ended early, if it did
    device: str = "cpu"
    # Contention on the GPU (results/contention.py): the OR of the NVML clock-event reasons
    # over every tick, and the most compute processes seen on the GPU; None on CPUs or where
    # NVML cannot tell (then `unavailable` says why).
    clock_event_mask: int | None = None
    gpu_processes_max: int | None = None
    # The measured window, seconds since start() (module doc): (0, end) when no window was
    # opened; None where sampling never ran. `cpu_time_s`: the process's CPU seconds in it.
    window: tuple[float, float] | None = None
    cpu_time_s: float | None = None

    @property
    def samples(self) -> int:
        return len(self.series.get("t_s", []))

    @property
    def window_s(self) -> float | None:
        return None if self.window is None else self.window[1] - self.window[0]

    def summary(self) -> dict[str, float | int | None]:
        """The record's figures; a mean the window cannot give is None, and `withheld()` says
        why. CPU utilisation is psutil's: 100 is one core busy, so it can exceed 100."""
        series = self.series
        out: dict[str, float | int | None] = {
            "samples": self.samples,
            "interval_s": self.interval_s,
            "window_s": self.window_s,
            "mean_cpu_util_pct": self._cpu_util()[0],
            "peak_rss_bytes": _peak(series.get("rss_bytes", [])),
        }
        for key, column in _SAMPLED_MEANS.items():
            if column in series:
                out[key] = self._sampled_mean(column)[0]
        for key, (column, statistic) in _GPU_SUMMARY.items():
            if column in series:
                out[key] = statistic(series[column])
        return out

    def withheld(self) -> dict[str, str]:
        """summary key -> why the window gives no figure for it (a measured column only)."""
        reasons = {"mean_cpu_util_pct": self._cpu_util()[1]}
        for key, column in _SAMPLED_MEANS.items():
            if column in self.series:
                reasons[key] = self._sampled_mean(column)[1]
        return {key: reason for key, reason in reasons.items() if reason is not None}

    def _cpu_util(self) -> tuple[float | None, str | None]:
        """ΔCPU/Δt of the process over the window, in percent of one core."""
        seconds = self.window_s
        if seconds is None or self.cpu_time_s is None:
            return None, "no CPU-time reading of the window"
        if seconds < MIN_WINDOW_S:
            return None, (
                f"a {seconds * 1000:.0f} ms window is under {MIN_WINDOW_TICKS} ticks of the CPU "
                f"counters ({MIN_WINDOW_S * 1000:.0f} ms), where their rounding alone reads "
                "tenths of a core"
            )
        return 100 * self.cpu_time_s / seconds, None

    def _sampled_mean(self, column: str) -> tuple[float | None, str | None]:
        """The mean of the readings whose NVML sample period lies inside the window, when
        there are MIN_READINGS of them (NVML_LOOKBACK_S)."""
        if self.window is None:
            return None, "no readings"
        start, end = self.window
        times, values = self.series["t_s"], self.series[column]
        inside = [t for t in times if start <= t <= end]
        kept = [
            v for t, v in zip(times, values, strict=True) if start + NVML_LOOKBACK_S <= t <= end
        ]
        if len(kept) >= MIN_READINGS:
            return sum(kept) / len(kept), None
        reason = (
            f"{len(inside)} NVML readings in {end - start:.2f} s, {len(kept)} of them "
            f"{NVML_LOOKBACK_S:g} s or more into it: too few for a mean (needs {MIN_READINGS}; "
            f"NVML averages over its own sample period of up to {NVML_LOOKBACK_S:g} s)"
        )
        if column == "power_w":
            reason += "; the energy counter's mean power is energy.mean_power_w"
        return None, reason

    def power_samples(self) -> list[tuple[float, float]]:
        """(t_s, watts) pairs inside the window for EnergyMeter.stop(); [] without a power
        column."""
        if "power_w" not in self.series or self.window is None:
            return []
        start, end = self.window
        pairs = zip(self.series["t_s"], self.series["power_w"], strict=True)
        return [(t, w) for t, w in pairs if start <= t <= end]


class TelemetrySampler:
    """start() before training, stop() after (or `with TelemetrySampler(...) as s:` and read
    `s.telemetry`). Neither raises into the caller; the thread is a daemon."""

    def __init__(
        self, device: str, interval_s: float = 0.25, max_points: int = 2000, nvml: Any = None
    ) -> None:
        if interval_s <= 0 or max_points < 2:
            raise ValueError("interval_s must be > 0 and max_points >= 2")
        self.device = device
        self.interval_s = interval_s
        self.max_points = max_points
        self.telemetry: DeviceTelemetry | None = None
        self._nvml_module = nvml
        self._nvml: NvmlDevice | None = None
        self._reads: dict[str, Callable[[], float]] = {}
        self._series: dict[str, list[float]] = {column: [] for column in BASE_COLUMNS}
        self._unavailable: dict[str, str] = {}
        self._error: str | None = None
        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._contention_reads: dict[str, Callable[[], int]] = {}
        self._clock_event_mask: int | None = None
        self._gpu_processes_max: int | None = None
        self._window_start = 0.0  # seconds since start(); open_window() moves it
        self._cpu_start: float | None = None

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> TelemetrySampler:
        if cuda_index(self.device) is not None:
            try:
                self._open_gpu()
            except Exception as error:  # a broken NVML costs the GPU columns, not the run
                reason = f"NVML failed: {error!r}"
                self._unavailable.update(dict.fromkeys(GPU_COLUMNS, reason))
        # psutil's first cpu_percent() has nothing to compare with and answers 0.0: prime it,
        # so the first tick measures the first interval. No row is taken here for that reason.
        self._process.cpu_percent(None)
        self._t0 = time.monotonic()
        self._cpu_start = self._cpu_seconds()
        self._thread = threading.Thread(target=self._loop, name="mpbench-telemetry", daemon=True)
        self._thread.start()
        return self

    def open_window(self) -> None:
        """The measured steps begin now (the warm-up is over): the record's means are over
        what follows (module doc). Called from the training thread, between steps."""
        if self._thread is not None and self.telemetry is None:
            self._window_start = time.monotonic() - self._t0
            self._cpu_start = self._cpu_seconds()

    def stop(self) -> DeviceTelemetry:
        if self.telemetry is not None:
            return self.telemetry
        self._stop.set()
        window = cpu_time = None
        if self._thread is not None:
            self._thread.join()
            if self._error is None:
                self._safe_tick()  # the end of the window counts too
            cpu_end = self._cpu_seconds()
            window = (self._window_start, time.monotonic() - self._t0)
            if cpu_end is not None and self._cpu_start is not None:
                cpu_time = cpu_end - self._cpu_start
        if self._nvml is not None:
            self._nvml.close()
        self.telemetry = DeviceTelemetry(
            interval_s=self.interval_s,
            series={column: list(values) for column, values in self._series.items()},
            unavailable=dict(self._unavailable),
            error=self._error,
            device=self.device,
            clock_event_mask=self._clock_event_mask,
            gpu_processes_max=self._gpu_processes_max,
            window=window,
            cpu_time_s=cpu_time,
        )
        return self.telemetry

    def _cpu_seconds(self) -> float | None:
        """The process's user + system CPU seconds (its threads, not its children)."""
        try:
            times = self._process.cpu_times()
        except psutil.Error:
            return None
        return times.user + times.system

    def _open_gpu(self) -> None:
        opened = open_nvml_device(self.device, self._nvml_module)
        if isinstance(opened, NvmlUnavailable):
            self._unavailable.update(dict.fromkeys(GPU_COLUMNS, opened.reason))
            return
        self._nvml = opened
        nv, handle = opened.pynvml, opened.handle
        for column, (_name, read) in _NVML_READS.items():
            if column == "power_w" and opened.gpu.is_mig_slice:
                self._unavailable[column] = MIG_NO_ENERGY
                continue
            self._series[column] = []
            self._reads[column] = lambda read=read: read(nv, handle)
        reasons = clock_event_reader(nv)
        if reasons is None:
            self._unavailable["clock_event_reasons"] = (
                "this nvidia-ml-py has neither nvmlDeviceGetCurrentClocksEventReasons nor "
                "nvmlDeviceGetCurrentClocksThrottleReasons"
            )
        else:
            self._contention_reads["clock_event_reasons"] = lambda: reasons(handle)
        self._contention_reads["gpu_processes"] = lambda: len(
            nv.nvmlDeviceGetComputeRunningProcesses(handle)
        )
        self._read_contention()  # the processes already there when the window opens

    def _loop(self) -> None:
        # Event.wait, not sleep: stop() ends the wait at once. interval_s is read every time
        # round because halving the series doubles it.
        while not self._stop.wait(self.interval_s):
            if not self._safe_tick():
                return

    def _safe_tick(self) -> bool:
        try:
            self._tick()
        except Exception as error:  # never into the training process: keep it and stop
            self._error = f"sampling stopped after an unexpected error: {error!r}"
            return False
        return True

    def _tick(self) -> None:
        # The row is complete before anything is appended, so the columns stay aligned.
        row: dict[str, float] = {
            "t_s": time.monotonic() - self._t0,
            "cpu_util_pct": self._process.cpu_percent(None),
            "rss_bytes": self._process.memory_info().rss,
        }
        for column, read in list(self._reads.items()):
            try:
                row[column] = read()
            except self._nvml_error as error:
                self._drop(column, error)
        self._append(row)
        self._read_contention()

    def _read_contention(self) -> None:
        """OR the clock-event reasons, keep the most GPU compute processes seen. A call that
        fails (Not Supported on vGPU, MIG) is dropped with its reason, like a column."""
        for name, read in list(self._contention_reads.items()):
            try:
                value = int(read())
            except self._nvml_error as error:
                del self._contention_reads[name]
                self._unavailable[name] = f"NVML: {error}"
                continue
            if name == "clock_event_reasons":
                self._clock_event_mask = (self._clock_event_mask or 0) | value
            else:
                self._gpu_processes_max = max(self._gpu_processes_max or 0, value)

    @property
    def _nvml_error(self) -> type[Exception] | tuple[()]:
        return () if self._nvml is None else self._nvml.pynvml.NVMLError

    def _drop(self, column: str, error: Exception) -> None:
        # Asked once and failed: asking again every tick would only repeat the failure.
        del self._reads[column]
        had = len(self._series.pop(column, []))
        after = f" (after {had} samples; the column was removed)" if had else ""
        self._unavailable[column] = f"{_NVML_READS[column][0]}: {error}{after}"

    def _append(self, row: dict[str, float]) -> None:
        if len(self._series["t_s"]) >= self.max_points:
            for column, values in self._series.items():
                self._series[column] = values[::2]
            self.interval_s *= 2
        for column, values in self._series.items():
            values.append(row[column])
