"""Skip markers for tests that need a framework, found without importing it
(importlib.util.find_spec): a module whose tests start `mpbench run` processes need not
import torch or TensorFlow itself, and collecting it then costs nothing."""

from __future__ import annotations

import importlib.util

import pytest


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


needs_torch = pytest.mark.skipif(not installed("torch"), reason="torch is not installed")
needs_tensorflow = pytest.mark.skipif(
    not installed("tensorflow"), reason="TensorFlow is not installed"
)
# What a machine without TensorFlow does instead (CI runs the fast tier without it too).
without_tensorflow = pytest.mark.skipif(
    installed("tensorflow"), reason="about a machine without TensorFlow"
)
# The reason a TensorFlow cell is skipped with where TensorFlow is not installed.
TENSORFLOW_MISSING = "tensorflow is not installed: pip install 'mpbench[tensorflow]'"
