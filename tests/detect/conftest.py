"""Fixtures for the `mpbench detect` tests: other machines' cpuinfo, a machine without the
NVIDIA driver (the NVML fakes are tests/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest

CPUINFO = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"


@pytest.fixture
def cpuinfo():
    """Path of a cpuinfo fixture by file stem."""
    return lambda stem: CPUINFO / f"{stem}.txt"


@pytest.fixture
def no_gpu(fake_nvml, fake_pynvml):
    """A machine without the NVIDIA driver, whatever machine runs the tests."""
    return fake_nvml(init_error=fake_pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
