"""Fixtures for the compare tests: the committed result runs and runs written on the fly."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import cpu_run, write_run
from compare_helpers import FIXTURES


@pytest.fixture
def cpu_run_dir() -> Path:
    return FIXTURES / "cpu_run"


@pytest.fixture
def baseline_dir() -> Path:
    return FIXTURES / "baseline_cpu"


@pytest.fixture
def fresh_run(tmp_path: Path) -> Path:
    """A run like the committed one, written now through the real writer."""
    return write_run(tmp_path / "run", cpu_run())


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # A test run inside GitHub Actions must not write its reports into the job summary.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
