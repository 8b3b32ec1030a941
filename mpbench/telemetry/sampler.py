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
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

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


# summary key -> (column, statistic); present in summary() only where the column is.
_GPU_SUMMARY: dict[str, tuple[str, Callable[[list[float]], float | int | None]]] = {
    "mean_gpu_util_pct": ("gpu_util_pct", _mean),
    # NVML's device-wide `used` (module doc), under the record's v4 field name.
    "peak_nvml_device_used_bytes": ("nvml_device_used_bytes", _peak),
    "mean_power_w": ("power_w", _mean),
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

    @property
    def samples(self) -> int:
        return len(self.series.get("t_s", []))

    def summary(self) -> dict[str, float | int | None]:
        """cpu_util_pct is psutil's: 100 is one core busy, so it can exceed 100."""
        series = self.series
        out: dict[str, float | int | None] = {
            "samples": self.samples,
            "interval_s": self.interval_s,
            "mean_cpu_util_pct": _mean(series.get("cpu_util_pct", [])),
            "peak_rss_bytes": _peak(series.get("rss_bytes", [])),
        }
        for key, (column, statistic) in _GPU_SUMMARY.items():
            if column in series:
                out[key] = statistic(series[column])
        return out

    def power_samples(self) -> list[tuple[float, float]]:
        """(t_s, watts) pairs for EnergyMeter.stop(); [] without a power column."""
        if "power_w" not in self.series:
            return []
        return list(zip(self.series["t_s"], self.series["power_w"], strict=True))


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
        self._thread = threading.Thread(target=self._loop, name="mpbench-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> DeviceTelemetry:
        if self.telemetry is not None:
            return self.telemetry
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if self._error is None:
                self._safe_tick()  # the end of the window counts too
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
        )
        return self.telemetry

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
