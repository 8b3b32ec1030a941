"""The GPU's busy time from torch.profiler (backends/torch/profiled.py), on this CPU: the
profiler's result objects are torch's own FunctionEvents, as `profile.events()` gives them on
CUDA (device kernels with DeviceType.CUDA and device timestamps), built by hand; the context
manager that would need CUPTI is the only fake."""

from __future__ import annotations

from typing import ClassVar

import pytest

torch = pytest.importorskip("torch")

from torch.autograd import DeviceType  # noqa: E402
from torch.autograd.profiler_util import EventList, FunctionEvent  # noqa: E402

from mpbench.backends.base import BusyEvidence  # noqa: E402
from mpbench.backends.torch import profiled  # noqa: E402


def event(name: str, start_us: float, end_us: float, device=DeviceType.CUDA) -> FunctionEvent:
    return FunctionEvent(
        id=0, name=name, thread=0, start_us=start_us, end_us=end_us, device_type=device
    )


def test_busy_time_is_the_union_of_the_device_intervals():
    events = EventList(
        [
            event("aten::mm", 0, 500, DeviceType.CPU),  # the host's op: not device time
            event("ampere_sgemm_128x64", 100, 200),
            event("vectorized_elementwise_kernel", 150, 260),  # overlaps, another stream
            event("Memcpy HtoD", 300, 310),
            event("Memset", 305, 306),  # inside the copy
        ]
    )
    assert profiled.busy_us(events) == pytest.approx(160 + 10)
    assert profiled.busy_us(EventList([event("aten::add", 0, 9, DeviceType.CPU)])) is None


class FakeProfile:
    """torch.profiler.profile as a CUDA machine runs it: records what the steps launch."""

    events_given: ClassVar[list[FunctionEvent]] = []

    def __init__(self, activities):
        assert activities == [torch.profiler.ProfilerActivity.CUDA]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def events(self):
        return EventList(self.events_given)


def test_profiled_steps_give_the_device_busy_fraction(monkeypatch):
    # Three steps whose kernels run 0.25 ms each.
    FakeProfile.events_given = [event("k", 1000 * i, 1000 * i + 250) for i in range(3)]
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    steps = []
    host = BusyEvidence(source="process CPU time", host_cpu_s=0.5, host_wall_s=1.0, threads=1)
    busy = profiled.profile_steps(lambda: steps.append(1), 3, lambda: None, host)
    assert steps == [1, 1, 1]
    assert busy.source == "torch.profiler CUDA kernel time over 3 steps"
    assert busy.busy_steps == 3 and busy.device_busy_s == pytest.approx(0.25e-3)
    assert busy.busy_step_s > 0
    assert busy.device_busy_fraction == pytest.approx(0.25e-3 / busy.busy_step_s)
    assert busy.host_busy_fraction == 0.5  # the timed steps' figures are kept


def test_a_trace_without_device_activity_leaves_the_fraction_unavailable(monkeypatch):
    FakeProfile.events_given = []  # CUPTI recorded nothing (no permission to profile)
    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    busy = profiled.profile_steps(lambda: None, 2, lambda: None, BusyEvidence(source="x"))
    assert busy.device_busy_fraction is None and busy.device_busy_s is None
    assert "CUPTI" in busy.unavailable["device_busy_fraction"]
