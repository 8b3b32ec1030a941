"""NVML figures that are easy to misread, on the pynvml fake (no GPU here):

- the sampler's memory column is NVML's device-wide `used` (every process, contexts, caching
  reserves, the driver's reserve), named so, not like a framework allocator's peak;
- a MIG slice gets no energy and no power figure, whatever NVML answers on its handle (the
  fake answers the board's counter: the case mpbench must not record as the slice's);
- the fake stays faithful to nvidia-ml-py where these tests lean on it.
"""

from __future__ import annotations

import inspect

import pytest

from mpbench.telemetry import energy
from mpbench.telemetry.energy import MIG_NO_ENERGY, EnergyMeter
from mpbench.telemetry.sampler import GPU_COLUMNS, TelemetrySampler

MIB = 2**20


def test_the_memory_column_says_it_is_nvml_device_wide_used(fake_nvml):
    fake = fake_nvml("A100")
    assert "nvml_device_used_bytes" in GPU_COLUMNS and "gpu_memory_bytes" not in GPU_COLUMNS
    sampler = TelemetrySampler("cuda:0", interval_s=60).start()  # the thread stays asleep
    telemetry = sampler.stop()  # one tick, at the end of the window
    fake.nvmlInit()
    memory = fake.nvmlDeviceGetMemoryInfo(fake.nvmlDeviceGetHandleByIndex(0))
    fake.nvmlShutdown()
    assert telemetry.series["nvml_device_used_bytes"] == [memory.used]
    # v1 `used`: allocated plus the driver's reserve, the whole device's.
    assert telemetry.summary()["peak_nvml_device_used_bytes"] == memory.used == 512 * MIB


def test_a_mig_slice_gets_no_energy_even_when_nvml_answers(fake_nvml, monkeypatch):
    fake = fake_nvml("A100-MIG")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", fake.gpu(0).mig_devices[0].uuid)
    meter = EnergyMeter.for_device("cuda:0", nvml=fake).start()
    reading = meter.stop([(0.0, 300.0), (1.0, 300.0)])  # power samples are not used either
    assert reading.joules is None and reading.source is None
    assert reading.reason == MIG_NO_ENERGY
    assert fake.calls().count("nvmlInitWithFlags") == fake.calls().count("nvmlShutdown")
    assert "nvmlDeviceGetTotalEnergyConsumption" not in fake.calls()


def test_a_mig_slice_has_no_power_column(fake_nvml, monkeypatch):
    fake = fake_nvml("A100-MIG")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", fake.gpu(0).mig_devices[2].uuid)
    with TelemetrySampler("cuda:0", interval_s=60) as sampler:
        pass
    telemetry = sampler.telemetry
    assert "power_w" not in telemetry.series and telemetry.power_samples() == []
    assert telemetry.unavailable["power_w"] == MIG_NO_ENERGY
    # The slice's own memory is still read through its handle.
    assert telemetry.series["nvml_device_used_bytes"] == [512 * MIB]


def test_a_whole_gpu_still_gets_its_energy(fake_nvml, monkeypatch):
    fake_nvml("A100")
    ticks = iter((0.0, 2.0))  # a 2 s window: long enough for the counter
    monkeypatch.setattr(energy, "_now", lambda: next(ticks))
    reading = EnergyMeter.for_device("cuda:0").start().stop()
    assert reading.joules == pytest.approx(2.5) and reading.reason is None


def test_the_memory_structs_behave_as_nvidia_ml_py_and_nvml_say(fake_nvml):
    fake = fake_nvml("H100")
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    v1 = fake.nvmlDeviceGetMemoryInfo(handle)
    v2 = fake.nvmlDeviceGetMemoryInfo(handle, version=fake.nvmlMemory_v2)
    assert v1.used == v2.used + v2.reserved and v1.free == v2.free
    assert v1.total == v1.used + v1.free
    with pytest.raises(fake.NVMLError_ArgumentVersionMismatch):
        fake.nvmlDeviceGetMemoryInfo(handle, version=2)  # the struct version, not the number
    fake.nvmlShutdown()


def test_the_fake_has_the_real_modules_names_signatures_and_codes(fake_nvml):
    real = pytest.importorskip("pynvml")  # before the fake: importing does not load libnvml
    assert "fakes" not in real.__file__
    fake = fake_nvml()
    for name, value in vars(fake).items():
        if not name.startswith(("nvml", "NVML")) or isinstance(value, type):
            continue
        assert hasattr(real, name), name
        if callable(value):
            ours, theirs = inspect.signature(value), inspect.signature(getattr(real, name))
            assert list(ours.parameters) == list(theirs.parameters), name
        else:
            assert getattr(real, name) == value, name
    errors = [name for name in vars(fake) if name.startswith("NVMLError_")]
    assert errors and all(hasattr(real, name) for name in errors)
