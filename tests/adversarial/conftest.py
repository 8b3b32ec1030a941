"""Fixtures of the adversarial suite; the helpers are in adversary.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from adversary import TINY_TOML


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY_TOML)
    return path
