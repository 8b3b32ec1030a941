"""A cell whose timed steps fail stops its memory sampler: the sampler's thread reads every
5 ms, and left running it takes the GIL from whatever the process does next (a fallback's
steps; in the test suite, every later in-process test of that worker: the likely cause of
stalls of 30-95 s seen there)."""

from __future__ import annotations

import threading

import pytest
from builders import cell_spec
from frameworks import needs_tensorflow, needs_torch


def samplers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mpbench-memory" and t.is_alive()]


def _fail(*args, **kwargs):
    raise RuntimeError("the timed steps failed")


@needs_torch
def test_a_torch_cell_whose_steps_fail_leaves_no_sampler_running(monkeypatch) -> None:
    from mpbench.backends.torch import backend

    before = samplers()
    monkeypatch.setattr(backend, "_train_synced", _fail)
    with pytest.raises(RuntimeError, match="the timed steps failed"):
        backend.run_cell(cell_spec(framework="torch", max_steps=4), lambda *_: None, print)
    assert samplers() == before


@needs_tensorflow
def test_a_keras_cell_whose_steps_fail_leaves_no_sampler_running(monkeypatch) -> None:
    import keras

    from mpbench.backends.tensorflow import loops
    from mpbench.backends.tensorflow.backend import run_cell

    before = samplers()
    monkeypatch.setattr(loops, "train_with_fit", _fail)
    monkeypatch.setattr(loops, "train_with_custom_loop", _fail)
    try:
        with pytest.raises(RuntimeError, match="the timed steps failed"):
            run_cell(cell_spec(framework="tensorflow", max_steps=4), lambda *_: None, print)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert samplers() == before
