"""The measured window of a cell (docs/telemetry.md, "The measured window"): the timed steps
after warm-up, or a steady window of the same step where they were too short for the energy
counter; with the pynvml fake, a fake RAPL tree and a real tiny torch cell on this CPU."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from builders import cell_spec
from fakes import rapl_fake

from mpbench.backends.base import CellSpec
from mpbench.results.schema import EnergyStats
from mpbench.telemetry import energy
from mpbench.telemetry.cell import CellTelemetry

BATCH = 32


def train(telemetry: CellTelemetry, steps: int) -> None:
    """What a backend does around its timed steps (the steps' own work is not needed)."""
    telemetry.start_timed()
    for step in range(1, steps + 1):
        telemetry.step(step, loss=1.0 / step)
    telemetry.stop_timed(steps * BATCH)


def test_the_energy_window_opens_after_warm_up(fake_nvml, monkeypatch):
    fake = fake_nvml("H100")
    fake.configure_telemetry(0, energy_step_mj=3_000_000)  # 3 kJ between two reads
    ticks = itertools.count()
    monkeypatch.setattr(energy, "_now", lambda: next(ticks) * 2.0)  # a 2 s window
    telemetry = CellTelemetry("cuda:0", dynamic_scale=False, warmup_steps=5)
    train(telemetry, 25)
    assert telemetry.steady_seconds() is None
    report = telemetry.report()["energy"]
    # 20 measured steps of 32 samples: the warm-up's 5 are neither in the joules nor divided.
    assert (report["window"], report["steps"], report["window_s"]) == ("timed steps", 20, 2.0)
    assert report["joules"] == pytest.approx(3000.0)
    assert report["joules_per_sample"] == pytest.approx(3000.0 / (20 * BATCH))
    assert report["mean_power_w"] == pytest.approx(1500.0)
    assert fake.calls()[-1] == "nvmlShutdown"
    stats = EnergyStats(**report)  # what runner/records.py builds from it
    assert stats.mean_power_w == pytest.approx(1500.0) and stats.window == "timed steps"


def test_timed_steps_too_short_ask_for_a_steady_window(fake_nvml, monkeypatch):
    """The first H200 run's bf16 MNIST: 35 steps in 73 ms. The counter cannot measure that;
    the cell asks for a steady window, and what it measures replaces the reason."""
    fake = fake_nvml("H100")
    telemetry = CellTelemetry("cuda:0", dynamic_scale=False, warmup_steps=3)
    train(telemetry, 38)  # the real clock: a window of microseconds
    assert telemetry.steady_seconds() == 1.0
    calls = fake.calls()  # the meter keeps its NVML for the steady window
    assert calls.count("nvmlInitWithFlags") == calls.count("nvmlShutdown") + 1
    fake.configure_telemetry(0, energy_step_mj=800_000)
    ticks = itertools.count()
    monkeypatch.setattr(energy, "_now", lambda: next(ticks) * 1.6)
    telemetry.start_steady()
    telemetry.stop_steady(steps=760)
    report = telemetry.report()
    figures = report["energy"]
    assert (figures["window"], figures["steps"], figures["reason"]) == ("steady window", 760, None)
    assert figures["joules"] == pytest.approx(800.0)
    assert figures["mean_power_w"] == pytest.approx(500.0)
    assert figures["joules_per_sample"] == pytest.approx(800.0 / (760 * BATCH))
    assert fake.calls()[-1] == "nvmlShutdown"
    # NVML's sampled means of that window: withheld, with the reason in the record.
    summary = report["summary"]
    assert summary["mean_gpu_util_pct"] is None and summary["mean_power_w"] is None
    assert "too few for a mean" in summary["unavailable"]["mean_power_w"]


def test_a_steady_window_not_run_leaves_the_reason_and_releases_nvml(fake_nvml):
    """TensorFlow and data-parallel ranks run none: the record says why it has no joules."""
    fake = fake_nvml("A100")
    telemetry = CellTelemetry("cuda:0", dynamic_scale=False, warmup_steps=2)
    train(telemetry, 10)
    figures = telemetry.report()["energy"]
    assert figures["joules"] is None and figures["window"] == "timed steps"
    assert "under the 1 s the NVML total energy counter needs" in figures["reason"]
    assert fake.calls()[-1] == "nvmlShutdown"


def test_a_cell_that_ends_in_its_warm_up_has_no_window(fake_nvml):
    fake_nvml("A100")
    telemetry = CellTelemetry("cuda:0", dynamic_scale=False, warmup_steps=5)
    train(telemetry, 3)
    figures = telemetry.report()["energy"]
    assert (figures["joules"], figures["reason"]) == (None, "the cell ended in its warm-up steps")


# --- a real torch cell on this CPU, with RAPL that counts ---

torch = pytest.importorskip("torch")


def _spec(**changes: Any) -> CellSpec:
    # One measured step of a few milliseconds: far under RAPL's 0.1 s.
    values = dict(batch_size=BATCH, max_steps=4, warmup_steps=3, synthetic_train_size=512)
    return cell_spec(framework="torch", policy="float32", **{**values, **changes})


def _run(spec: CellSpec):
    from mpbench.backends.torch import backend

    return backend.run_cell(spec, lambda *a: None, lambda message: None)


def test_a_real_torch_cell_measures_a_steady_window_and_undoes_it(tmp_path, monkeypatch):
    """A package drawing 40 W under a tiny cell whose timed steps take milliseconds: the
    energy is a steady window's of at least 0.1 s, its power the package's, and the cell
    trains what it trains without one (same test loss, same loss curve)."""
    plain = _run(_spec())
    assert plain.telemetry["energy"]["reason"] == energy.NO_COUNTER  # this machine
    root = rapl_fake.two_socket_machine(tmp_path)
    monkeypatch.setattr(energy, "POWERCAP_ROOT", root)
    monkeypatch.setattr(energy, "_read_int", rapl_fake.live_counter(root, watts=40.0))
    measured = _run(_spec())
    figures = measured.telemetry["energy"]
    assert figures["window"] == "steady window" and figures["steps"] > 0, figures
    assert figures["window_s"] >= 0.1 and figures["source"] == energy.RAPL_SOURCE
    # Two packages at 40 W each, read between two clock reads the window lies inside.
    assert figures["mean_power_w"] == pytest.approx(80.0, rel=0.2)
    assert figures["joules_per_sample"] == pytest.approx(
        figures["joules"] / (figures["steps"] * BATCH)
    )
    assert measured.test_loss == plain.test_loss
    assert measured.epoch_losses == plain.epoch_losses
