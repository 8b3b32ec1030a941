"""A Keras user workload may give its loss as Keras' `compile` takes it: a Loss, a loss's name
or a function (issue 55: a name trained every TensorFlow cell, then failed in evaluation,
and the cell's measurements were lost)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli import run_mpbench
from frameworks import needs_tensorflow

pytestmark = [pytest.mark.tensorflow, needs_tensorflow]

WORKLOAD = '''"""Keras only: an MLP 8->16->2 whose loss is given by its name."""
import numpy as np

from mpbench.workloads import UserWorkload


def data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((640, 8)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64)


def keras_build():
    import keras

    model = keras.Sequential([
        keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(2), keras.layers.Activation("softmax", dtype="float32"),
    ])
    return model, keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy"


WORKLOAD = UserWorkload(name="named_loss", data=data, keras=keras_build, batch_size=64)
'''


def test_a_loss_given_by_its_name_trains_and_evaluates(tmp_path: Path) -> None:
    (tmp_path / "named_loss.py").write_text(WORKLOAD, encoding="utf-8")
    out = tmp_path / "run"
    done = run_mpbench(
        "run", "-w", "named_loss:WORKLOAD", "-f", "tensorflow", "-p", "fp32", "--repeat", "1",
        "--device", "cpu", "--max-steps", "6", "--warmup-steps", "2", "--threads", "1",
        "--out", out, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok", record["reason"]
    assert record["accuracy"]["test_loss"] > 0 and record["accuracy"]["test_accuracy"] >= 0


def test_every_way_keras_takes_a_loss_becomes_one_loss_with_the_same_mean() -> None:
    import keras

    from mpbench.backends.tensorflow.models import as_loss

    y = np.array([0, 1, 1])
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]], dtype="float32")
    expected = float(np.mean(-np.log([0.9, 0.8, 0.4])))
    given = (
        "sparse_categorical_crossentropy",
        keras.losses.sparse_categorical_crossentropy,
        keras.losses.SparseCategoricalCrossentropy(),
    )
    for loss in given:
        made = as_loss(loss, "w")
        assert isinstance(made, keras.losses.Loss)
        assert float(made(y, p)) == pytest.approx(expected, rel=1e-5)  # evaluate's mean
        assert tuple(made.call(y, p).shape) == (3,)  # the custom loop's per-sample losses
    with pytest.raises(TypeError, match="workload w: keras knows no loss named 'crossentropyy'"):
        as_loss("crossentropyy", "w")
    with pytest.raises(TypeError, match="workload w: the loss is a int"):
        as_loss(3, "w")
