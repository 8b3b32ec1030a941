"""Fixtures of the adversarial suite; the helpers are in adversary.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import tiny_toml


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(tiny_toml())
    return path
