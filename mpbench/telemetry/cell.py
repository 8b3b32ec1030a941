"""One cell's telemetry (docs/telemetry.md): the per-step numerics and the
divergence detector, the device sampler and the energy meter, started and stopped together
by a backend around its timed steps.

Nothing here is inside a timed step: a backend calls `step()` after its timer stopped, and
computes the gradient health only when `wants_gradients()` says the step will be kept (the
numerics log keeps at most 1000 evenly spaced points). The sampler is a thread reading the
device a few times a second; the energy meter reads a counter at each end of the window.
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
from mpbench.telemetry.energy import EnergyMeter, EnergyReading
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

    def __post_init__(self) -> None:
        self.numerics = NumericsLog()
        self.detector = DivergenceDetector(self.rules)
        self._sampler: TelemetrySampler | None = None
        self._meter: EnergyMeter | None = None
        self._device: DeviceTelemetry | None = None
        self._energy: EnergyReading | None = None
        self._window: ContentionWindow | None = None
        self._contention: ContentionReading | None = None
        self._samples = 0

    # --- the timed phase -----------------------------------------------------------------

    def start_timed(self) -> None:
        if os.environ.get("MPBENCH_TELEMETRY") != "0":  # 0: no sampler (slow-process experiment)
            self._sampler = TelemetrySampler(self.device, SAMPLE_INTERVAL_S).start()
        self._meter = EnergyMeter.for_device(self.device).start()
        self._window = ContentionWindow().start()  # last: the sampler's start is not timed

    def stop_timed(self, samples: int) -> None:
        """`samples`: training samples the timed steps processed (for joules per sample)."""
        if self._window is not None and self._window.long_enough():
            self._contention = self._window.stop()
            self._window = None
        # A window too short for the CPU counters' ticks stays open: contention() reads it at
        # the end of the cell, over the end-to-end window and the evaluation too.
        if self._sampler is not None:
            self._device = self._sampler.stop()
            self._sampler = None
        if self._meter is not None:
            power = self._device.power_samples() if self._device else None
            self._energy = self._meter.stop(power)
            self._meter = None
        self._samples = samples

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
        if self._sampler is not None or self._meter is not None or self._window is not None:
            self.stop_timed(self._samples)

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
            summary["unavailable"] = dict(self._device.unavailable)
            if self._device.error:
                summary["unavailable"]["sampler"] = self._device.error
            device = {
                "interval_s": self._device.interval_s,
                "series": self._device.series,
                "unavailable": self._device.unavailable,
            }
        energy = None
        if self._energy is not None:
            reading = self._energy
            energy = {
                "joules": reading.joules,
                "joules_per_sample": reading.per_sample(self._samples),
                "source": reading.source,
                "reason": reading.reason,
                "window_s": reading.window_s,
            }
        contention = self.contention()
        return {
            "summary": summary,
            "numerics": numerics,
            "device": device,
            "energy": energy,
            "contention": contention.to_dict() if contention is not None else None,
        }
