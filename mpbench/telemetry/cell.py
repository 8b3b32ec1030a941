"""One cell's telemetry (docs/telemetry.md): the per-step numerics and the
divergence detector, the device sampler and the energy meter, started and stopped together
by a backend around its timed steps.

Nothing here is inside a timed step: a backend calls `step()` after its timer stopped, and
computes the gradient health only when `wants_gradients()` says the step will be kept (the
numerics log keeps at most 1000 evenly spaced points). The sampler is a thread reading the
device a few times a second; the energy meter reads a counter at each end of the window.

The measured window is the timed steps the step-time statistics count: it opens after the
warm-up steps (at `step(warmup_steps)`) and closes at `stop_timed()`, so energy per sample
and the record's means carry neither the warm-up nor idle time before and after. Where it
was too short for the energy counter (energy.py, `min_window_s`), a backend may measure a
steady window of the same step instead: `steady_seconds()`, `start_steady()`,
`stop_steady()` (docs/telemetry.md).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Any

from mpbench.results.contention import (
    ContentionReading,
    ContentionWindow,
    judge,
    slowing_reasons,
)
from mpbench.telemetry.divergence import Divergence, DivergenceDetector, DivergenceRules
from mpbench.telemetry.energy import STEADY_WINDOW, EnergyMeter, EnergyReading
from mpbench.telemetry.numerics import NumericsLog
from mpbench.telemetry.sampler import DeviceTelemetry, TelemetrySampler

SAMPLE_INTERVAL_S = 0.25  # a few Hz: enough for utilisation and power, cheap (~0.15 ms/tick)


class CellDiverged(Exception):
    """A divergence signal fired: the cell ends `diverged` and keeps its telemetry."""

    def __init__(self, divergence: Divergence, telemetry: dict[str, Any]) -> None:
        super().__init__(divergence.reason)
        self.divergence = divergence
        self.telemetry = telemetry


@dataclass
class CellTelemetry:
    device: str  # "cpu", "cuda:0", "mps"
    dynamic_scale: bool  # a loss scale that moves: its floor is a signal
    rules: DivergenceRules = field(default_factory=DivergenceRules)
    warmup_steps: int = 0  # the measured window opens after these (the step statistics' own)

    def __post_init__(self) -> None:
        self.numerics = NumericsLog()
        self.detector = DivergenceDetector(self.rules)
        self._sampler: TelemetrySampler | None = None
        self._meter: EnergyMeter | None = None
        self._device: DeviceTelemetry | None = None
        self._energy: EnergyReading | None = None
        self._window: ContentionWindow | None = None
        self._contention: ContentionReading | None = None
        self._samples = 0  # training samples the energy reading's window held
        self._samples_per_step = 0.0
        self._opened_after: int | None = None  # steps done when the measured window opened

    # --- the timed phase -----------------------------------------------------------------

    def start_timed(self) -> None:
        if os.environ.get("MPBENCH_TELEMETRY") != "0":  # 0: no sampler (slow-process experiment)
            self._sampler = TelemetrySampler(self.device, SAMPLE_INTERVAL_S).start()
        self._meter = EnergyMeter.for_device(self.device)
        if self.warmup_steps == 0:
            self._open_window(0)
        self._window = ContentionWindow().start()  # last: the sampler's start is not timed

    def _open_window(self, done: int) -> None:
        """The measured steps begin: the energy meter and the sampler's means start here."""
        self._opened_after = done
        if self._sampler is not None:
            self._sampler.open_window()
        if self._meter is not None:
            self._meter.start()

    def stop_timed(self, samples: int) -> None:
        """`samples`: training samples the timed steps processed, warm-up included (joules
        per sample divides the window's share of them)."""
        # The measured window closes first (the sampler's, then the energy counter's), so
        # reading the contention counters is not in it.
        if self._sampler is not None:
            self._device = self._sampler.stop()
            self._sampler = None
        self._stop_energy(samples)
        if self._window is not None and self._window.long_enough():
            self._contention = self._window.stop()
            self._window = None
        # A window too short for the CPU counters' ticks stays open: contention() reads it at
        # the end of the cell, over the end-to-end window and the evaluation too.

    def _stop_energy(self, samples: int) -> None:
        if self._meter is None or self._energy is not None:
            return
        steps = self.numerics.total_steps
        self._samples_per_step = samples / steps if steps else 0.0
        if self._opened_after is None:  # it ended (diverged) inside its warm-up
            self._energy = EnergyReading(None, None, "the cell ended in its warm-up steps")
            self._release_meter()
            return
        window_steps = steps - self._opened_after
        self._samples = round(self._samples_per_step * window_steps) if steps else samples
        power = self._device.power_samples() if self._device else None
        self._energy = self._meter.stop(power, steps=window_steps, close=False)
        if self.steady_seconds() is None:
            self._release_meter()

    # --- the steady window (energy of timed steps too short for the counter) --------------

    def steady_seconds(self) -> float | None:
        """How long a steady window must last for the energy counter, where the timed steps
        were too short for it; None where they were not, or nothing counts energy."""
        reading, meter = self._energy, self._meter
        if reading is None or meter is None or meter.min_window_s is None:
            return None
        if reading.joules is not None or reading.window_s is None:
            return None
        return meter.min_window_s if reading.window_s < meter.min_window_s else None

    def start_steady(self) -> None:
        """The steady window begins: after the timed steps, the same step and nothing else."""
        if self._meter is not None:
            self._meter.start()

    def stop_steady(self, steps: int) -> None:
        """The steady window ends, `steps` optimizer steps after start_steady(): its energy
        replaces the timed steps' reason (the record names the window)."""
        if self._meter is None:
            return
        self._energy = self._meter.stop(window=STEADY_WINDOW, steps=steps)
        self._samples = round(self._samples_per_step * steps)
        self._meter = None

    def _release_meter(self) -> None:
        if self._meter is not None:
            self._meter.close()
            self._meter = None

    # --- every optimizer step ------------------------------------------------------------

    def wants_gradients(self) -> bool:
        """Whether the next step is kept in the side file: only then is the (host-syncing)
        gradient health worth computing."""
        return self.numerics.due()

    def step(
        self,
        step: int,
        loss: float | None,
        loss_scale: float | None = None,
        skipped: bool | None = None,
        grad_norm: float | None = None,
        nonfinite_grads: int | None = None,
    ) -> None:
        """Record one optimizer step; CellDiverged when a signal fires (the sampler and the
        meter are stopped first, so the diverged cell keeps what they read)."""
        self.numerics.record(step, loss, loss_scale, skipped, grad_norm, nonfinite_grads)
        if step == self.warmup_steps and self._opened_after is None:
            self._open_window(step)
        watched_scale = loss_scale if self.dynamic_scale else None
        fired = self.detector.observe(step, loss, watched_scale, skipped)
        if fired is not None:
            self.stop_timed(self._samples)
            raise CellDiverged(fired, self.report())

    def end_of_cell(self, skipped: int, counted: int, scale_text: str) -> Divergence | None:
        """The whole-cell skipped-step rule, for cells shorter than the detector's window."""
        return self.detector.end_of_cell(skipped, counted, scale_text)

    def close(self) -> None:
        """Stop whatever still runs (an exception left the timed phase open)."""
        if self._sampler is not None or self._window is not None:
            self.stop_timed(self._samples)
        self._release_meter()

    def contention(self) -> ContentionReading | None:
        """The window's CPU reading with the GPU's part from the sampler, judged. The window
        is the timed steps', or, where they were too short for the CPU counters, the rest of
        the cell's from their start (docs/measurement.md, "Contention")."""
        if self._window is not None:
            self._contention = self._window.stop()
            self._window = None
        reading = self._contention
        if reading is None:
            return None
        device = self._device
        if device is not None and device.device.startswith("cuda"):
            if device.gpu_processes_max is not None:
                # NVML lists host PIDs, which a container cannot match against its own
                # (NVML ignores PID namespaces): count processes, this one being one of them.
                reading.gpu_other_processes = max(0, device.gpu_processes_max - 1)
            if device.clock_event_mask is not None:
                reading.gpu_clock_event_reasons = slowing_reasons(device.clock_event_mask)
            for name in ("gpu_processes", "clock_event_reasons"):
                if name in device.unavailable:
                    reading.unavailable[f"gpu_{name}"] = device.unavailable[name]
        return judge(reading)

    # --- what the cell reports -----------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """JSON-safe: the side file's parts and the record's summaries (runner/records.py)."""
        numerics = self.numerics.to_dict()
        norms = [n for n in numerics["columns"]["grad_norm"] if n is not None]
        summary: dict[str, Any] = {
            "numerics_points": len(numerics["columns"]["step"]),
            "numerics_stride": numerics["stride"],
            "steps": self.numerics.total_steps,
            "skipped_steps": self.numerics.skipped_steps,
            "nonfinite_steps": self.numerics.nonfinite_steps,
            "grad_norm_median": statistics.median(norms) if norms else None,
        }
        device = None
        if self._device is not None:
            summary.update(self._device.summary())
            summary["unavailable"] = dict(self._device.unavailable) | self._device.withheld()
            if self._device.error:
                summary["unavailable"]["sampler"] = self._device.error
            device = {
                "interval_s": self._device.interval_s,
                "series": self._device.series,
                "unavailable": self._device.unavailable,
            }
        self._release_meter()  # a steady window the backend did not run
        energy = None
        if self._energy is not None:
            reading = self._energy
            energy = {
                "joules": reading.joules,
                "joules_per_sample": reading.per_sample(self._samples),
                "source": reading.source,
                "reason": reading.reason,
                "window_s": reading.window_s,
                "window": reading.window,
                "steps": reading.steps,
                "mean_power_w": reading.mean_power_w,
            }
        contention = self.contention()
        return {
            "summary": summary,
            "numerics": numerics,
            "device": device,
            "energy": energy,
            "contention": contention.to_dict() if contention is not None else None,
        }
