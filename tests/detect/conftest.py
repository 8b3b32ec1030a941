"""Fixtures for the `mpbench detect` tests: other machines' cpuinfo, a fake NVML, the CLI."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
CPUINFO = TESTS / "fixtures" / "cpuinfo"
FAKE_PYNVML = TESTS / "fakes" / "pynvml_fake.py"


def load_fake_pynvml():
    """A fresh copy of the fake (its own state), named like the real module."""
    spec = importlib.util.spec_from_file_location("pynvml", FAKE_PYNVML)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_pynvml():
    """The fake module itself (unconfigured, not installed), and where its source lives."""
    module = load_fake_pynvml()
    module.SOURCE = FAKE_PYNVML
    return module


@pytest.fixture
def cpuinfo():
    """Path of a cpuinfo fixture by file stem."""
    return lambda stem: CPUINFO / f"{stem}.txt"


@pytest.fixture
def fake_nvml(monkeypatch):
    """Install a configured fake pynvml: fake_nvml("A100", "T4", driver_version=...)."""

    def install(*gpus, **config):
        fake = load_fake_pynvml()
        fake.configure(gpus=gpus, **config)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


@pytest.fixture
def no_gpu(fake_nvml):
    """A machine without the NVIDIA driver, whatever machine runs the tests."""
    fake = load_fake_pynvml()
    return fake_nvml(init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND)


@pytest.fixture
def run_mpbench():
    """Run the real CLI in a subprocess: run_mpbench("detect", "--json", env={...})."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mpbench", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **(env or {})},
            check=False,
        )

    return run
