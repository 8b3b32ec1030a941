"""When has a cell stopped training? One detector for both frameworks (docs/telemetry.md).

The backends feed it one observation per optimizer step (the loss they already read, the loss
scale, whether the step was skipped) and end the cell as `diverged` with the first signal
that fires. The signals follow what peers do (research notes §8): a non-finite loss (Keras'
TerminateOnNaN, Megatron's NaN check), a loss scale below a floor (fairseq's and DeepSpeed's
"minimum loss scale reached"), too many skipped steps in a window (a static scale that
overflows every step trains nothing), and, off by default, a loss spike against a rolling
window (OLMo-core's and Levanter's z-score).

No framework is imported here; an observation costs a few microseconds of Python.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

SIGNALS = ("non_finite_loss", "loss_scale_floor", "skipped_fraction", "loss_spike")

# Points of loss history the spike signal needs before it judges anything.
MIN_SPIKE_POINTS = 10


@dataclass
class DivergenceRules:
    """The thresholds. `max_skipped_fraction` defaults to the whole-cell rule's
    (more than half of the steps skipped); `spike_z` None turns the spike signal
    off, and `min_loss_scale` 0 turns the floor off."""

    min_loss_scale: float = 1.0
    window: int = 20
    max_skipped_fraction: float = 0.5
    spike_z: float | None = None
    spike_window: int = 50

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_loss_scale) and self.min_loss_scale >= 0):
            raise ValueError(f"min_loss_scale must be >= 0, not {self.min_loss_scale}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1 step, not {self.window}")
        if not 0 <= self.max_skipped_fraction < 1:
            raise ValueError(
                f"max_skipped_fraction must be in [0, 1), not {self.max_skipped_fraction}"
            )
        if self.spike_z is not None and not (math.isfinite(self.spike_z) and self.spike_z > 0):
            raise ValueError(f"spike_z must be a positive number or None, not {self.spike_z}")
        if self.spike_window < MIN_SPIKE_POINTS:
            raise ValueError(
                f"spike_window must hold at least {MIN_SPIKE_POINTS} losses, not "
                f"{self.spike_window}"
            )


@dataclass(frozen=True)
class Divergence:
    """Why a cell stopped counting as training. `values` holds only finite numbers (strict
    JSON); a non-finite one is named in `reason` instead."""

    signal: str  # one of SIGNALS
    # The step that fired it, in the caller's numbering of its observed (timed) steps; for
    # the whole-cell rule the last step observed, so that the record, the side file's last
    # point and the plot's marker name one step whatever unit the skips are counted in.
    step: int
    values: dict[str, float] = field(default_factory=dict)
    reason: str = ""  # one sentence, for the record's `reason`

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class DivergenceDetector:
    """Watches one cell's steps. The first signal that fires is kept: `observe` returns it
    from then on (and `fired` holds it), and later observations are ignored.

    `observe(step, loss, loss_scale, skipped)`:
    - `loss`: the step's loss as a float, or None where it was not read. Any non-finite loss
      fires, skipped step or not (`check_finite` guards what runs outside the timed steps).
    - `loss_scale`: pass it only for a *dynamic* scale (GradScaler, Keras'
      LossScaleOptimizer); a static scale never moves, so pass None and the floor never fires.
    - `skipped`: whether the optimizer skipped the step for non-finite gradients; None where
      nothing can skip (no scaler) or it was not checked: such a step does not enter the
      skipped-step window. The unit is whatever the caller counts: torch skips whole
      optimizer steps, Keras single micro-batches under accumulation.
    """

    def __init__(self, rules: DivergenceRules | None = None) -> None:
        self.rules = rules or DivergenceRules()
        self.fired: Divergence | None = None
        self._skips: deque[bool] = deque(maxlen=self.rules.window)
        self._skipped_in_window = 0
        self._losses: deque[float] = deque(maxlen=self.rules.spike_window)
        self._sum = 0.0
        self._sum_sq = 0.0
        self._since_exact = 0
        self._last_step: int | None = None

    def observe(
        self, step: int, loss: float | None, loss_scale: float | None, skipped: bool | None
    ) -> Divergence | None:
        if self.fired is None:
            self._last_step = step
            self.fired = (
                self._loss(step, loss, loss_scale)
                or self._scale(step, loss_scale)
                or self._skipped(step, skipped)
                or self._spike(step, loss, skipped)
            )
        return self.fired

    def end_of_cell(
        self, skipped: int, counted: int, scale_text: str | None = None
    ) -> Divergence | None:
        """The cell's verdict once it finished: the first signal that fired, else the
        whole-cell rule (more than `max_skipped_fraction` of all `counted` steps skipped),
        which also judges cells shorter than the window. `scale_text` (e.g. "a static loss
        scale of 1024") ends the reason.

        `skipped` and `counted` are in the caller's skip unit (Keras counts micro-batches
        under accumulation); the verdict's step is the last step observed, the one the side
        file ends on, or `counted` where no step was observed."""
        if self.fired is not None:
            return self.fired
        limit = self.rules.max_skipped_fraction
        if counted > 0 and skipped / counted > limit:
            tail = f" with {scale_text}" if scale_text else ""
            self.fired = Divergence(
                "skipped_fraction",
                self._last_step if self._last_step is not None else counted,
                {"skipped": float(skipped), "counted": float(counted), "limit": limit},
                f"{skipped} of {counted} steps skipped for non-finite gradients "
                f"(more than {limit:.0%}){tail}",
            )
        return self.fired

    # --- the signals, in the order they are checked ------------------------------------

    def _loss(self, step: int, loss: float | None, scale: float | None) -> Divergence | None:
        if loss is None or math.isfinite(loss):
            return None
        return Divergence(
            "non_finite_loss",
            step,
            _finite(loss_scale=scale),
            f"non-finite loss ({float(loss)!r}) at step {step}",
        )

    def _scale(self, step: int, scale: float | None) -> Divergence | None:
        floor = self.rules.min_loss_scale
        if scale is None or scale >= floor:  # +inf passes: it is above any floor
            return None
        if math.isnan(scale):
            reason = f"loss scale is nan at step {step}"
        else:
            reason = f"loss scale {scale:g} fell below {floor:g} at step {step}"
        return Divergence("loss_scale_floor", step, _finite(loss_scale=scale, floor=floor), reason)

    def _skipped(self, step: int, skipped: bool | None) -> Divergence | None:
        if skipped is None:
            return None
        window = self._skips
        if len(window) == window.maxlen:
            self._skipped_in_window -= window[0]
        window.append(bool(skipped))
        self._skipped_in_window += bool(skipped)
        if len(window) < self.rules.window:
            return None
        count, limit = self._skipped_in_window, self.rules.max_skipped_fraction
        if count / self.rules.window <= limit:
            return None
        return Divergence(
            "skipped_fraction",
            step,
            {"skipped": float(count), "window": float(self.rules.window), "limit": limit},
            f"{count} of the last {self.rules.window} steps skipped for non-finite gradients "
            f"at step {step} (more than {limit:.0%})",
        )

    def _spike(self, step: int, loss: float | None, skipped: bool | None) -> Divergence | None:
        """z-score of this loss against the previous finite losses of applied steps (a
        skipped step's loss did not train anything and often is the outlier itself)."""
        if self.rules.spike_z is None or loss is None or skipped:
            return None
        loss = float(loss)
        history = self._losses
        fired = None
        if len(history) >= MIN_SPIKE_POINTS:
            n = len(history)
            mean = self._sum / n
            variance = max(0.0, self._sum_sq / n - mean * mean)
            std = math.sqrt(variance)
            # A flat history has no spread to measure a spike against: nothing fires.
            if std > 1e-12 * max(1.0, abs(mean)):
                z = (loss - mean) / std
                if z > self.rules.spike_z:
                    fired = Divergence(
                        "loss_spike",
                        step,
                        _finite(loss=loss, mean=mean, std=std, z=z, limit=self.rules.spike_z),
                        f"loss {loss:.4g} at step {step} is {z:.1f} standard deviations above "
                        f"the mean {mean:.4g} of the previous {n} steps "
                        f"(limit {self.rules.spike_z:g})",
                    )
        self._push(loss)
        return fired

    def _push(self, loss: float) -> None:
        history = self._losses
        if len(history) == history.maxlen:
            old = history[0]
            self._sum -= old
            self._sum_sq -= old * old
        history.append(loss)
        self._sum += loss
        self._sum_sq += loss * loss
        # Running sums drift as values come and go; recompute them exactly now and then.
        self._since_exact += 1
        if self._since_exact >= history.maxlen:
            self._since_exact = 0
            self._sum = math.fsum(history)
            self._sum_sq = math.fsum(x * x for x in history)


def _finite(**values: float | None) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in values.items()
        if value is not None and math.isfinite(value)
    }
