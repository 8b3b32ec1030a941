"""Your own model in Keras, measured as in torch (issue 41, "the rest"): one model with
BatchNorm and a frozen layer, given in both frameworks, counts the same trainable and
non-trainable parameters in both; its images, given NCHW, reach Keras NHWC, and the record
says so; the Keras record says which dtype each op ran in (BatchNorm's arithmetic in float32
under mixed_bfloat16); a model whose ops cannot be traced says why and trains on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import needs_tensorflow, needs_torch

pytestmark = [pytest.mark.tensorflow, needs_tensorflow]

# Conv 3->4 (3x3, frozen) -> BatchNorm(4) -> ReLU -> Flatten -> Dense 3, on 6x5 images with
# 3 channels given NCHW. Trainable: BatchNorm's gamma and beta (8), the Dense layer (4*3*4
# = 48 inputs, 48*3 + 3). Non-trainable: the frozen conv (3*3*3*4 + 4) and BatchNorm's
# running mean and variance (2*4; torch's integer batch counter is no parameter).
TRAINABLE = 2 * 4 + 48 * 3 + 3
NON_TRAINABLE = 3 * 3 * 3 * 4 + 4 + 2 * 4

WORKLOAD = '''"""BatchNorm and a frozen first layer, in both frameworks, on NCHW images."""
import numpy as np

from mpbench.workloads import UserWorkload


def data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((320, 3, 6, 5)).astype(np.float32)  # N, C, H, W
    y = np.argmax(x.mean(axis=(2, 3)), axis=1)  # the brightest channel
    return x[:256], y[:256], x[256:], y[256:]


def torch_build(device):
    import torch
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(48, 3)
    ).to(device)
    model[0].requires_grad_(False)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy


def keras_build():
    import keras

    model = keras.Sequential(
        [
            keras.Input((6, 5, 3)),  # NHWC: a wrong transpose would not fit
            keras.layers.Conv2D(4, 3, trainable=False),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Flatten(),
            keras.layers.Dense(3),
            keras.layers.Activation("softmax", dtype="float32"),
        ]
    )
    return model, keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy()


IMAGES = UserWorkload(
    name="bn_images", data=data, torch=torch_build, keras=keras_build, batch_size=32,
    layout="NCHW",
)
'''


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One run of the workload in both frameworks under mixed_bfloat16: record by framework."""
    root = tmp_path_factory.mktemp("keras_user")
    (root / "bn_images.py").write_text(WORKLOAD, encoding="utf-8")
    out = root / "run"
    done = run_mpbench(
        "run", "-w", "bn_images:IMAGES", "-f", "all", "-p", "bf16", "--repeat", "1",
        "--device", "cpu", "--max-steps", "6", "--warmup-steps", "2", "--threads", "1",
        "--out", out, cwd=root, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {record["framework"]: record for record in found}


@needs_torch
def test_both_frameworks_count_one_model_alike(records: dict[str, dict]) -> None:
    for record in records.values():
        assert record["status"] == "ok", record["reason"]
    counted = {f: (r["params"], r["params_non_trainable"]) for f, r in records.items()}
    assert counted == {
        "torch": (TRAINABLE, NON_TRAINABLE),
        "tensorflow": (TRAINABLE, NON_TRAINABLE),
    }


@needs_torch
def test_keras_trains_the_declared_nchw_images_transposed_and_says_so(
    records: dict[str, dict],
) -> None:
    keras_record = records["tensorflow"]
    assert keras_record["status"] == "ok", keras_record["reason"]
    assert keras_record["config"]["data_layout"] == "NHWC (given NCHW, transposed)"
    assert keras_record["accuracy"]["test_accuracy"] is not None
    # A user workload's data is its own, whatever --data would say.
    assert {r["config"]["data"] for r in records.values()} == {"user"}
    assert keras_record["data"]["source"] == "user"


@needs_torch
def test_the_keras_record_says_which_dtype_batchnorm_ran_in(records: dict[str, dict]) -> None:
    precision = records["tensorflow"]["precision"]
    assert precision["op_dtypes_source"].startswith("TensorFlow graph")
    ops = precision["op_dtypes"]
    assert ops["Conv2D/Conv2D"] == "bfloat16" and ops["Dense/MatMul"] == "bfloat16"
    assert precision["convolution_dtype"] == "bfloat16"
    # Keras runs BatchNormalization's arithmetic in float32 under a 16-bit policy.
    assert precision["batch_norm_dtype"] == "float32"
    assert precision["loss_dtype"] == "float32"
    assert "op_dtypes_unavailable" not in precision


# Keras in a process of its own (the test process imports no framework): the trace of models
# mpbench cannot read, and the count of an integer weight.
UNREADABLE = r"""
import json

import keras
import numpy as np

from mpbench.backends.tensorflow import fp8, precision


class EagerOnly(keras.Model):
    # Reads a tensor's value in Python: fine eagerly, impossible in a traced graph.
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)

    def call(self, x):
        if float(keras.ops.sum(x)) > 1e9:
            x = x * 0
        return self.dense(x)


class NoLayers(keras.Model):
    # Its own weights and arithmetic: no op is in a layer's name scope.
    def build(self, shape):
        self.kernel = self.add_weight(shape=(shape[-1], 3))
        self.steps = self.add_weight(shape=(), dtype="int64", trainable=False,
                                     initializer="zeros")

    def call(self, x):
        return keras.ops.matmul(x, self.kernel)


x, y = np.zeros((2, 5), "float32"), np.array([0, 1])
found = {}
for name, model in (("eager_only", EagerOnly()), ("no_layers", NoLayers())):
    model.compile(optimizer="sgd", loss=lambda t, p: keras.ops.mean(p))
    model(x[:1])
    found[name] = precision.user_op_dtypes(model, x, y)
model = NoLayers()
model(x[:1])
counts = fp8.param_counts(model)
found["counts"] = [counts.trainable, counts.non_trainable]
print(json.dumps(found))
"""


def test_a_model_whose_ops_cannot_be_read_says_why_instead_of_failing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", UNREADABLE],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parent,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["eager_only"] == {
        "op_dtypes_unavailable": "the model and its loss could not be traced into one "
        "TensorFlow graph (TypeError: float() argument must be a string or a real number, "
        "not 'SymbolicTensor')"
    }
    assert found["no_layers"] == {
        "op_dtypes_unavailable": "no floating-point op of the traced graph is in the name "
        "scope of one of the model's layers",
    }
    # The integer counter is state, not a parameter (torch's num_batches_tracked alike).
    assert found["counts"] == [5 * 3, 0]
