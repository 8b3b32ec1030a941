"""Energy of a window: NVML through the pynvml fake, RAPL through a fake powercap tree, and
this machine for real (it has neither). The meter's clock is energy._now: most tests give it
windows of WINDOW_S (long enough for every counter), the short-window tests the real clock or
a short window."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
from fakes import rapl_fake

from mpbench.telemetry import energy
from mpbench.telemetry.energy import (
    NO_COUNTER,
    NVML_COUNTER_SOURCE,
    NVML_POWER_SOURCE,
    POWERCAP_ROOT,
    RAPL_SOURCE,
    EnergyMeter,
    EnergyReading,
    integrate_power,
)

WINDOW_S = 2.0


def windows_of(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Every read of the meter's clock is `seconds` after the one before: a window from
    start() to stop() lasts `seconds`."""
    ticks = itertools.count()
    monkeypatch.setattr(energy, "_now", lambda: next(ticks) * seconds)


@pytest.fixture(autouse=True)
def long_windows(monkeypatch):
    windows_of(monkeypatch, WINDOW_S)


# --- NVML ---


def test_the_nvml_counter_difference_is_the_energy_in_joules(fake_nvml):
    fake = fake_nvml("V100")
    fake.configure_telemetry(0, energy_mj=1_000_000, energy_step_mj=12_345)
    meter = EnergyMeter.for_device("cuda:0").start()
    reading = meter.stop()
    assert reading.joules == pytest.approx(12.345)  # one step of the counter: 12 345 mJ
    assert (reading.source, reading.reason) == (NVML_COUNTER_SOURCE, None)
    assert reading.window_s == WINDOW_S and reading.window == "timed steps"
    assert reading.mean_power_w == pytest.approx(12.345 / WINDOW_S)  # ΔE/Δt
    assert fake.calls().count("nvmlDeviceGetTotalEnergyConsumption") == 2
    assert fake.calls()[-1] == "nvmlShutdown"  # the meter released its NVML init


def test_cuda_n_is_the_gpu_cuda_numbers_n(fake_nvml, monkeypatch):
    fake = fake_nvml("V100", "A100")
    fake.configure_telemetry(0, energy_step_mj=1_000)
    fake.configure_telemetry(1, energy_step_mj=7_000)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # cuda:0 is NVML GPU 1 in this process
    assert EnergyMeter.for_device("cuda:0").start().stop().joules == pytest.approx(7.0)


def test_a_counter_that_does_not_move_gives_a_reason_not_zero_joules(fake_nvml):
    fake = fake_nvml("A100")
    fake.configure_telemetry(0, energy_step_mj=0)
    reading = EnergyMeter.for_device("cuda:0").start().stop()
    assert reading.joules is None and reading.source is None
    assert reading.reason.startswith("energy counter did not advance over the window (")
    assert reading.reason.endswith(" s)")


def test_a_window_too_short_for_the_nvml_counter_gives_a_reason_not_joules(fake_nvml, monkeypatch):
    """The counter updates every 20-100 ms: over the first H200 run's 73 ms of bf16 steps one
    update more or less is the whole figure. The real clock, a window of microseconds."""
    fake = fake_nvml("A100")
    fake.configure_telemetry(0, energy_step_mj=25_000)  # it did move: 25 J
    monkeypatch.setattr(energy, "_now", time.monotonic)
    meter = EnergyMeter.for_device("cuda:0")
    assert meter.min_window_s == 1.0
    reading = meter.start().stop(steps=35)
    assert reading.joules is None and reading.mean_power_w is None
    assert reading.window_s < 1.0 and (reading.window, reading.steps) == ("timed steps", 35)
    assert reading.reason.endswith(
        " s of timed steps: under the 1 s the NVML total energy counter needs (one update of "
        "it is more than a tenth of a shorter window)"
    )


def test_a_kept_meter_measures_a_second_window(fake_nvml, monkeypatch):
    """What the steady window does: the timed steps too short, the same meter again."""
    fake = fake_nvml("H100")
    fake.configure_telemetry(0, energy_step_mj=400)
    windows_of(monkeypatch, 0.07)
    meter = EnergyMeter.for_device("cuda:0")
    short = meter.start().stop(steps=35, close=False)
    assert short.joules is None and "nvmlShutdown" not in fake.calls()
    fake.configure_telemetry(0, energy_step_mj=600_000)  # 600 J over the next window
    windows_of(monkeypatch, 1.5)
    steady = meter.start().stop(window="steady window", steps=700)
    assert steady.joules == pytest.approx(600.0) and steady.mean_power_w == pytest.approx(400.0)
    assert (steady.window, steady.steps, steady.window_s) == ("steady window", 700, 1.5)
    assert fake.calls()[-1] == "nvmlShutdown"


def test_without_the_counter_power_samples_are_integrated(fake_nvml):
    fake_nvml("P100")  # Pascal: the energy counter answers Not Supported (Volta and newer)
    meter = EnergyMeter.for_device("cuda:0").start()
    reading = meter.stop(power_samples=[(0.25, 200.0), (0.5, 300.0), (0.75, 300.0)])
    assert reading.joules == pytest.approx(0.25 * 250 + 0.25 * 300)
    assert (reading.source, reading.reason) == (NVML_POWER_SOURCE, None)


def test_counter_and_power_both_unsupported_give_a_reason(fake_nvml):
    fake = fake_nvml(
        "V100",
        call_errors={
            (0, "nvmlDeviceGetTotalEnergyConsumption"): 3,  # NVML_ERROR_NOT_SUPPORTED
            (0, "nvmlDeviceGetPowerUsage"): 3,
        },
    )
    # What the sampler hands over when its power column was dropped: nothing.
    reading = EnergyMeter.for_device("cuda:0").start().stop(power_samples=[])
    assert reading.joules is None
    assert reading.reason == (
        "NVML energy counter: Not Supported; no NVML power samples to integrate"
    )
    assert fake.calls()[-1] == "nvmlShutdown"


def test_a_gpu_without_nvml_has_no_energy_counter(fake_nvml):
    fake = fake_nvml(init_error=12)  # NVML_ERROR_LIBRARY_NOT_FOUND: no driver
    reading = EnergyMeter.for_device("cuda:0").start().stop()
    assert (reading.joules, reading.reason) == (None, NO_COUNTER)
    assert fake.calls() == ["nvmlInitWithFlags"]


def test_a_cuda_index_nvml_does_not_have_is_a_reason(fake_nvml):
    fake_nvml("A100")
    reading = EnergyMeter.for_device("cuda:3").start().stop()
    assert reading.joules is None and reading.reason.startswith("cuda:3: NVML lists no GPU")


def test_a_cuda_device_never_falls_back_to_cpu_energy(fake_nvml, tmp_path):
    fake_nvml(init_error=12)
    rapl_fake.two_socket_machine(tmp_path)
    reading = EnergyMeter.for_device("cuda:0", powercap_root=tmp_path).start().stop()
    assert (reading.joules, reading.reason) == (None, NO_COUNTER)


# --- RAPL ---


def test_rapl_sums_the_packages_and_nothing_else(tmp_path):
    root = rapl_fake.two_socket_machine(tmp_path)
    meter = EnergyMeter.for_device("cpu", powercap_root=root).start()
    rapl_fake.set_energy(root, "intel-rapl:0", 1_000_000 + 3_000_000)  # +3 J
    rapl_fake.set_energy(root, "intel-rapl:1", 2_000_000 + 1_500_000)  # +1.5 J
    rapl_fake.set_energy(root, "intel-rapl:0:2", 7_000_000 + 50_000_000)  # dram: not the package
    rapl_fake.set_energy(root, "intel-rapl-mmio:0", 9_000_000 + 3_000_000)  # pkg 0 again
    reading = meter.stop()
    assert reading.joules == pytest.approx(4.5)
    assert (reading.source, reading.reason) == (RAPL_SOURCE, None)


def test_a_wrapped_rapl_counter_is_corrected_with_its_range(tmp_path):
    rapl_fake.add_zone(tmp_path, "intel-rapl:0", "package-0", 999_000_000, 1_000_000_000)
    meter = EnergyMeter.for_device("cpu", powercap_root=tmp_path).start()
    rapl_fake.set_energy(tmp_path, "intel-rapl:0", 4_000_000)  # 1 J to the top, 4 J after
    assert meter.stop().joules == pytest.approx(5.0)


def test_rapl_measures_a_tenth_of_a_second_but_not_less(tmp_path, monkeypatch):
    """RAPL updates every ~1 ms: 0.1 s is a hundred updates; 50 ms is refused."""
    for seconds, joules in ((0.1, 4.5), (0.05, None)):
        root = rapl_fake.two_socket_machine(tmp_path / str(seconds))
        windows_of(monkeypatch, seconds)
        meter = EnergyMeter.for_device("cpu", powercap_root=root).start()
        assert meter.min_window_s == 0.1
        rapl_fake.set_energy(root, "intel-rapl:0", 1_000_000 + 3_000_000)  # +3 J
        rapl_fake.set_energy(root, "intel-rapl:1", 2_000_000 + 1_500_000)  # +1.5 J
        reading = meter.stop()
        if joules is None:
            assert reading.joules is None
            assert "under the 0.1 s the RAPL package zones (powercap) needs" in reading.reason
        else:
            assert reading.joules == pytest.approx(joules)
            assert reading.mean_power_w == pytest.approx(joules / seconds)


def test_an_unreadable_energy_uj_gives_the_file_and_the_cve(tmp_path, monkeypatch):
    """energy_uj is mode 0400 since CVE-2020-8694, so a normal user gets EACCES. These tests
    may run as root, where chmod 000 does not block reading, so the module's single sysfs
    reader is made to raise the PermissionError that open() raises for a non-root user, for
    energy_uj only (name and max_energy_range_uj stay world-readable, as on real systems)."""
    root = rapl_fake.two_socket_machine(tmp_path)
    real_read = energy._read_int

    def read(path: Path) -> int:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.setattr(energy, "_read_int", read)
    reading = EnergyMeter.for_device("cpu", powercap_root=root).start().stop()
    assert reading.joules is None
    assert str(root / "intel-rapl:0" / "energy_uj") in reading.reason
    assert "root" in reading.reason and "CVE-2020-8694" in reading.reason


def test_no_powercap_directory_means_no_counter(tmp_path):
    reading = EnergyMeter.for_device("cpu", powercap_root=tmp_path / "absent").start().stop()
    assert (reading.joules, reading.source, reading.reason) == (None, None, NO_COUNTER)


def test_a_powercap_tree_without_packages_means_no_counter(tmp_path):
    rapl_fake.add_zone(tmp_path, "intel-rapl:0", "psys", 5)
    assert EnergyMeter.for_device("cpu", powercap_root=tmp_path).start().stop().reason == (
        NO_COUNTER
    )


def test_a_meter_never_started_says_so(fake_nvml):
    fake = fake_nvml("A100")
    reading = EnergyMeter.for_device("cuda:0").stop()
    assert (reading.joules, reading.reason) == (None, "the energy meter was not started")
    assert fake.calls()[-1] == "nvmlShutdown"


def test_a_surprise_inside_the_counter_is_a_reason_not_an_exception(fake_nvml):
    fake = fake_nvml("A100")
    meter = EnergyMeter.for_device("cuda:0").start()
    fake.nvmlDeviceGetTotalEnergyConsumption = lambda handle: 1 / 0
    reading = meter.stop()
    assert reading.joules is None
    assert reading.reason == "energy measurement failed: ZeroDivisionError('division by zero')"


def test_mps_has_no_counter():
    assert EnergyMeter.for_device("mps").start().stop().reason == NO_COUNTER


def test_this_machine_has_no_energy_counter():
    if POWERCAP_ROOT.exists():
        pytest.skip(f"{POWERCAP_ROOT} exists here: this test is for machines without powercap")
    reading = EnergyMeter.for_device("cpu").start().stop()
    assert (reading.joules, reading.reason) == (None, "no energy counter on this machine")


# --- helpers ---


def test_per_sample_and_mean_power():
    reading = EnergyReading(joules=12.0, source="x", reason=None, window_s=4.0)
    assert reading.per_sample(3) == 4.0 and reading.mean_power_w == 3.0
    assert reading.per_sample(0) is None
    assert EnergyReading(None, None, NO_COUNTER).per_sample(10) is None


def test_trapezoid_needs_two_points_and_sorts_them():
    assert integrate_power([(1.0, 100.0)]) is None
    assert integrate_power([(2.0, 100.0), (0.0, 100.0)]) == pytest.approx(200.0)
