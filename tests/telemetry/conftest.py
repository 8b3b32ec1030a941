"""Fixtures for the telemetry tests: the pynvml fake (tests/fakes/pynvml_fake.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

FAKE_PYNVML = Path(__file__).resolve().parents[1] / "fakes" / "pynvml_fake.py"


@pytest.fixture
def fake_nvml(monkeypatch):
    """Install a fresh, configured pynvml fake: fake_nvml("V100", call_errors=...)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)

    def install(*gpus, **config):
        spec = importlib.util.spec_from_file_location("pynvml", FAKE_PYNVML)
        fake = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fake)
        fake.configure(gpus=gpus, **config)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install
