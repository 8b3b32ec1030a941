"""The whole-cell verdict is numbered like every other signal: by the steps it observed."""

from __future__ import annotations

from mpbench.telemetry.divergence import DivergenceDetector


def test_the_whole_cell_rule_names_the_last_observed_step_not_the_count() -> None:
    """Keras counts skips per micro-batch: 24 micro-batches of 12 steps (2 each) are
    counted, and the verdict still names step 12, the side file's last point."""
    detector = DivergenceDetector()
    for step in range(1, 13):
        assert detector.observe(step, 2.3, None, True) is None  # shorter than the window
    fired = detector.end_of_cell(24, 24)
    assert fired is not None and fired.signal == "skipped_fraction"
    assert fired.step == 12
    assert fired.values["counted"] == 24
    assert fired.reason.startswith("24 of 24 ")


def test_without_observed_steps_the_whole_cell_rule_names_the_count() -> None:
    fired = DivergenceDetector().end_of_cell(3, 3)
    assert fired is not None and fired.step == 3
