"""Energy of a window (the timed training phase) on the cell's device, measured, never guessed.

Device energy only: on cuda:N the GPU's own NVML figures, on the CPU the RAPL package zones.
CPU energy is not added to GPU energy (the host's share of a GPU run is a different question,
and RAPL is rarely readable anyway). Where no counter can be read the reading is None with a
reason; a TDP-based estimate (codecarbon's "constant mode") is never recorded as measured.

Sources, in order of preference:
- NVML `nvmlDeviceGetTotalEnergyConsumption`: mJ since the driver was loaded, Volta and newer.
  It moves in updates 20-100 ms apart on recent GPUs (PETSc's PetscLogGpuEnergyMeter notes),
  so a window under `min_window_s` (1 s) is no measurement: one update more or less is more
  than a tenth of it (a window shorter than one update reads 0). Such a window gets a reason,
  never joules; the torch backend then measures a steady window of the same steps
  (docs/telemetry.md).
- The trapezoid over (t_s, watts) power samples the device sampler collected (pre-Volta GPUs).
  On Ampere and newer (but GA100) nvmlDeviceGetPowerUsage is a 1 s average, and the samples
  start one interval after the sampler does, so this is the coarser figure.
- Linux powercap RAPL zones `intel-rapl:N` named "package-N" (µJ, one wrap per zone corrected
  with max_energy_range_uj). MSR_PKG_ENERGY_STATUS "is updated every ~1msec" (Intel SDM vol.
  3B, RAPL interfaces), so 0.1 s holds a hundred updates. Since CVE-2020-8694 `energy_uj` is
  readable by root only on most distributions. A window longer than a whole wrap period
  (max_energy_range_uj over package power: tens of minutes at full load) would undercount;
  nothing here polls the counter.

A MIG slice gets no energy figure. NVML documents energy and power per GPU; on a MIG device
handle it is expected to answer Not Supported (as it does for utilisation), which could not be
checked without such a GPU, and a number it did return could not be told apart from the whole
board's, other MIG tenants' work included. The parent GPU's figures are not used for the same
reason. So a slice's reading is always a reason (MIG_NO_ENERGY), never joules, whatever NVML
answers; the device sampler leaves its power column out for the same reason.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpbench.telemetry.nvml import NvmlDevice, NvmlUnavailable, cuda_index, open_nvml_device

POWERCAP_ROOT = Path("/sys/class/powercap")
NO_COUNTER = "no energy counter on this machine"
NVML_COUNTER_SOURCE = "NVML total energy counter"
NVML_POWER_SOURCE = "integrated NVML power samples"
RAPL_SOURCE = "RAPL package zones (powercap)"
TIMED_STEPS = "timed steps"  # the steps the step-time statistics count (warm-up excluded)
STEADY_WINDOW = "steady window"  # more of the same step, measured alone, then undone
MIG_NO_ENERGY = (
    "a MIG slice: NVML's energy and power are per GPU (expected Not Supported on a MIG "
    "handle), and the GPU's figures include other MIG tenants' work"
)

# Top-level zones only: "intel-rapl:0", not its sub-zones "intel-rapl:0:N" (core and uncore are
# parts of the package; dram is the memory's energy, not the processor's) nor
# "intel-rapl-mmio:0" (a second view of package-0 on some Intel laptops: summing it would count
# the package twice).
_PACKAGE_ZONE = re.compile(r"intel-rapl:\d+")


@dataclass
class EnergyReading:
    """One window's energy: exactly one of `joules` and `reason` is set."""

    joules: float | None
    source: str | None  # where the joules came from; None when there are none
    reason: str | None  # why there are no joules
    window_s: float | None = None  # the window's wall-clock length (time.monotonic)
    window: str | None = None  # TIMED_STEPS or STEADY_WINDOW: which steps the window held
    steps: int | None = None  # optimizer steps in the window

    def per_sample(self, samples: int) -> float | None:
        """Joules per training sample, or None when there is no figure (or no sample)."""
        if self.joules is None or samples <= 0:
            return None
        return self.joules / samples

    @property
    def mean_power_w(self) -> float | None:
        """ΔE/Δt over the window: from the counter, so true over any window it measures,
        unlike a mean of sampled power readings (docs/telemetry.md)."""
        if self.joules is None or not self.window_s:
            return None
        return self.joules / self.window_s


# --- counters ---


class _Unreadable(Exception):
    """A counter could not be read; the message is the reason recorded."""


class _NvmlCounter:
    source = NVML_COUNTER_SOURCE
    # Updates 20-100 ms apart (module doc): over 1 s one update is at most a tenth.
    min_window_s = 1.0

    def __init__(self, nvml: NvmlDevice) -> None:
        self.nvml = nvml

    def read(self) -> tuple[int, ...]:
        try:
            return (int(self.nvml.pynvml.nvmlDeviceGetTotalEnergyConsumption(self.nvml.handle)),)
        except self.nvml.pynvml.NVMLError as error:
            raise _Unreadable(f"NVML energy counter: {error}") from error

    def joules(self, start: tuple[int, ...], end: tuple[int, ...]) -> float:
        if end[0] < start[0]:  # a 64-bit mJ counter does not wrap: the driver was reloaded
            raise _Unreadable("NVML energy counter went backwards (driver reloaded?)")
        return (end[0] - start[0]) / 1000.0


def _now() -> float:
    """The meter's clock (the one place it is read, so tests can stand in for it)."""
    return time.monotonic()


def _read_int(path: Path) -> int:
    """One integer sysfs file (the one place RAPL files are read, so tests can stand in)."""
    return int(path.read_text().strip())


@dataclass(frozen=True)
class RaplZone:
    path: Path  # the zone directory, e.g. /sys/class/powercap/intel-rapl:0
    name: str  # "package-0"
    max_energy_range_uj: int | None  # where energy_uj wraps; None if unreadable


def rapl_packages(root: Path = POWERCAP_ROOT) -> list[RaplZone]:
    """The package zones under a powercap root, in zone order; [] when there are none."""
    try:
        entries = sorted(
            (p for p in root.iterdir() if _PACKAGE_ZONE.fullmatch(p.name)),
            key=lambda p: int(p.name.partition(":")[2]),
        )
    except OSError:
        return []
    zones = []
    for entry in entries:
        try:
            name = (entry / "name").read_text().strip()
        except OSError:
            continue
        if not name.startswith("package"):
            continue  # psys and other platform zones are not a package's energy
        try:
            max_range: int | None = _read_int(entry / "max_energy_range_uj")
        except (OSError, ValueError):
            max_range = None
        zones.append(RaplZone(entry, name, max_range))
    return zones


class _RaplCounter:
    source = RAPL_SOURCE
    # Updated every ~1 ms (Intel SDM): a hundred updates, 1 %.
    min_window_s = 0.1

    def __init__(self, zones: Sequence[RaplZone]) -> None:
        self.zones = list(zones)

    def read(self) -> tuple[int, ...]:
        values = []
        for zone in self.zones:
            path = zone.path / "energy_uj"
            try:
                values.append(_read_int(path))
            except PermissionError as error:
                raise _Unreadable(
                    f"cannot read {path}: permission denied (energy_uj is readable by root "
                    "only since CVE-2020-8694; run as root or make it 0444)"
                ) from error
            except (OSError, ValueError) as error:
                raise _Unreadable(f"cannot read {path}: {error}") from error
        return tuple(values)

    def joules(self, start: tuple[int, ...], end: tuple[int, ...]) -> float:
        total = 0
        for zone, first, last in zip(self.zones, start, end, strict=True):
            delta = last - first
            if delta < 0:  # wrapped once: it counted up to max_energy_range_uj, then from 0
                if zone.max_energy_range_uj is None:
                    raise _Unreadable(f"{zone.path / 'energy_uj'} wrapped and its range is unknown")
                delta += zone.max_energy_range_uj
            total += delta
        return total / 1e6


def integrate_power(samples: Sequence[tuple[float, float]]) -> float | None:
    """Joules from (t_s, watts) samples by the trapezoid rule; None with fewer than two."""
    points = sorted(samples)
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(points))


# --- the meter ---


class EnergyMeter:
    """start() at a window's start, stop() at its end; start() again for another window (the
    steady window after the timed steps). Neither raises: a failure is a reason.

    `for_device` chooses the counter; stop() falls back to power samples on a GPU whose energy
    counter cannot be read. A meter holding NVML releases it in close() (stop() calls it unless
    told to keep the meter open)."""

    def __init__(
        self,
        device: str,
        counter: _NvmlCounter | _RaplCounter | None,
        reason: str | None,
        nvml: NvmlDevice | None = None,
    ) -> None:
        self.device = device
        self._counter = counter
        self._reason = reason  # why the counter is missing or failed
        self._nvml = nvml
        self._start: tuple[int, ...] | None = None
        self._t0: float | None = None

    @classmethod
    def for_device(
        cls, device: str, *, nvml: Any = None, powercap_root: Path | None = None
    ) -> EnergyMeter:
        """device: "cpu", "cuda:N" or "mps"; nvml: a pynvml module to use (tests);
        powercap_root: POWERCAP_ROOT unless given (read when called, so tests can move it)."""
        if cuda_index(device) is not None:
            opened = open_nvml_device(device, nvml)
            if isinstance(opened, NvmlUnavailable):
                return cls(device, None, NO_COUNTER if opened.absent else opened.reason)
            if opened.gpu.is_mig_slice:
                opened.close()
                return cls(device, None, MIG_NO_ENERGY)
            return cls(device, _NvmlCounter(opened), None, opened)
        if device == "cpu":
            zones = rapl_packages(POWERCAP_ROOT if powercap_root is None else powercap_root)
            return (
                cls(device, _RaplCounter(zones), None) if zones else cls(device, None, NO_COUNTER)
            )
        return cls(device, None, NO_COUNTER)  # mps: Apple's power figures need root powermetrics

    @property
    def min_window_s(self) -> float | None:
        """The shortest window the counter measures; None where there is no counter."""
        return None if self._counter is None else self._counter.min_window_s

    def start(self) -> EnergyMeter:
        self._t0 = _now()
        if self._counter is not None:
            try:
                self._start = self._counter.read()
            except _Unreadable as error:
                self._reason, self._start = str(error), None
            except Exception as error:  # never into the training process
                self._reason, self._start = f"energy counter failed: {error!r}", None
        return self

    def stop(
        self,
        power_samples: list[tuple[float, float]] | None = None,
        *,
        window: str = TIMED_STEPS,
        steps: int | None = None,
        close: bool = True,
    ) -> EnergyReading:
        """The window's energy; `power_samples` are the device sampler's (t_s, watts) pairs
        inside the window, used only when the GPU energy counter gave nothing. `window` and
        `steps` say what the window held; `close=False` keeps NVML for another window."""
        if self._t0 is None:
            self.close()
            return EnergyReading(None, None, "the energy meter was not started")
        seconds = _now() - self._t0
        self._t0 = None
        try:
            reading = self._measure(seconds, power_samples, window)
        except Exception as error:  # a measurement must never end the cell's training
            reading = EnergyReading(None, None, f"energy measurement failed: {error!r}", seconds)
        finally:
            if close:
                self.close()
        reading.window, reading.steps = window, steps
        return reading

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.close()

    def _measure(
        self, seconds: float, power_samples: list[tuple[float, float]] | None, window: str
    ) -> EnergyReading:
        if self._counter is not None and self._start is not None:
            try:
                joules = self._counter.joules(self._start, self._counter.read())
            except _Unreadable as error:
                self._reason = str(error)
            else:
                if seconds < self._counter.min_window_s:
                    reason = (
                        f"{seconds:.3f} s of {window}: under the {self._counter.min_window_s:g} s "
                        f"the {self._counter.source} needs (one update of it is more than a "
                        "tenth of a shorter window)"
                    )
                    return EnergyReading(None, None, reason, seconds)
                if joules > 0:
                    return EnergyReading(joules, self._counter.source, None, seconds)
                # Zeus: a window shorter than the counter's update period reads 0.
                reason = f"energy counter did not advance over the window ({seconds:.3f} s)"
                return EnergyReading(None, None, reason, seconds)
        if self._nvml is not None:  # a GPU without a usable counter: integrate its power
            joules = integrate_power(power_samples or [])
            if joules is not None and joules > 0:
                return EnergyReading(joules, NVML_POWER_SOURCE, None, seconds)
            missing = "no NVML power samples to integrate" if joules is None else "power read 0 W"
            reason = f"{self._reason}; {missing}"
            return EnergyReading(None, None, reason, seconds)
        return EnergyReading(None, None, self._reason or NO_COUNTER, seconds)
