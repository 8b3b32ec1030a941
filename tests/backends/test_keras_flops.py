"""Keras models' FLOPs, counted from the TensorFlow graph of one training step
(mpbench/backends/tensorflow/flops.py; issue 56, item 5), against truth: the same small models
built in torch count what torch's FlopCounterMode counts (mpbench/backends/torch/flops.py
`counted`, in a child process), a Keras EfficientNetB0 counts what its layers' shapes give
analytically, a model whose matmuls run in a loop says why it has no count; the parameters as
the record counts them, against Keras' own; and a real run's records."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli import run_mpbench
from frameworks import needs_torch

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from mpbench.backends.tensorflow import flops, fp8  # noqa: E402
from mpbench.backends.tensorflow.device import Placement  # noqa: E402
from mpbench.results.schema import DeviceInfo  # noqa: E402

pytestmark = pytest.mark.tensorflow

ROOT = Path(__file__).resolve().parents[2]
B = 4  # rows (images, sequences) per micro-batch
CLASSES = 3
T, E, HEADS = 6, 8, 2  # the attention block: tokens, width, heads


def _loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _count(model: keras.Model, x: np.ndarray) -> flops.Count:
    model.compile(optimizer="sgd", loss=_loss())
    return flops.counted(model, x, np.arange(len(x)) % CLASSES)


# The same three models in torch, counted as a torch cell counts them, in a child process (this
# one imports TensorFlow; torch and TensorFlow are not mixed in one test process).
TORCH_CHILD = r"""
import json

import torch
from torch import nn

from mpbench.backends.torch.flops import counted

B, CLASSES, T, E, HEADS = 4, 3, 6, 8, 2


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(E, HEADS, batch_first=True)
        self.head = nn.Linear(T * E, CLASSES)

    def forward(self, x):
        mixed, _ = self.mha(x, x, x, need_weights=False)
        return self.head(mixed.flatten(1))


torch.manual_seed(0)
models = {
    "mlp": (nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, CLASSES)), (B, 8)),
    "cnn": (nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8),
                          nn.Conv2d(8, 16, 1, groups=2), nn.ConvTranspose2d(16, 4, 2, stride=2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, CLASSES)),
            (B, 3, 8, 8)),
    "attention": (Attention(), (B, T, E)),
}
found = {}
for name, (model, shape) in models.items():
    x, y = torch.randn(shape), torch.arange(B) % CLASSES
    found[name] = counted(model, lambda: nn.functional.cross_entropy(model(x), y).backward()).total
print("RESULT " + json.dumps(found))
"""


@pytest.fixture(scope="module")
def torch_counts() -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", TORCH_CHILD],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, done.stderr[-3000:]
    return json.loads(line.removeprefix("RESULT "))


def _mlp() -> keras.Model:
    return keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
         keras.layers.Dense(16, activation="relu"), keras.layers.Dense(CLASSES)]
    )  # fmt: skip


@needs_torch
def test_a_dense_mlp_counts_what_torch_counts(torch_counts: dict[str, float]) -> None:
    count = _count(_mlp(), np.zeros((B, 8), np.float32))
    # Forward 2·B·(8·16 + 16·16 + 16·3), the weight gradients as much again, the input
    # gradients of all but the first layer (its input takes none): FlopCounterMode's rule.
    forward = 2 * B * (8 * 16 + 16 * 16 + 16 * CLASSES)
    assert count.forward == forward
    assert count.total == 3 * forward - 2 * B * 8 * 16 == torch_counts["mlp"]
    assert count.by_op == {"MatMul": count.total}
    assert count.record() == {"flops_per_micro_batch": count.total, "flops_source": flops.SOURCE}


@needs_torch
def test_a_cnn_with_a_depthwise_and_a_transposed_conv_counts_their_real_work(
    torch_counts: dict[str, float],
) -> None:
    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
            keras.layers.DepthwiseConv2D(3, strides=2, padding="same"),
            keras.layers.Conv2D(16, 1, groups=2),  # a nested, jit-compiled tf.function
            keras.layers.Conv2DTranspose(4, 2, strides=2),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(CLASSES),
        ]
    )
    count = _count(model, np.zeros((B, 8, 8, 3), np.float32))
    conv = 2 * B * 8 * 8 * (3 * 3 * 3) * 8  # each output element: a 3x3x3 window
    depthwise = 2 * B * 4 * 4 * 8 * (3 * 3)  # one input channel per output channel
    pointwise = 2 * B * 4 * 4 * (8 // 2) * 16  # 2 groups: 4 input channels per output
    transposed = 2 * B * 4 * 4 * (2 * 2) * 16 * 4  # each input element: a 2x2x4 window
    dense = 2 * B * 4 * CLASSES
    assert count.forward == conv + depthwise + pointwise + transposed + dense
    # The first conv: its weight gradient only; every other layer's input gradient too.
    assert count.total == 2 * conv + 3 * (depthwise + pointwise + transposed + dense)
    assert {"DepthwiseConv2dNativeBackpropFilter", "Conv2DBackpropInput"} <= set(count.by_op)
    # torch's count of the same model (its grouped weight gradients as mpbench counts them:
    # torch 2.13 alone scores them `groups` times their work, mpbench/backends/torch/flops.py)
    assert torch_counts["cnn"] == count.total


@needs_torch
def test_an_attention_block_counts_what_torch_counts(torch_counts: dict[str, float]) -> None:
    tokens = keras.Input((T, E))
    mixed = keras.layers.MultiHeadAttention(HEADS, E // HEADS)(tokens, tokens)
    logits = keras.layers.Dense(CLASSES)(keras.layers.Flatten()(mixed))
    count = _count(keras.Model(tokens, logits), np.zeros((B, T, E), np.float32))
    projections = 3 * 2 * B * T * E * E  # query, key and value: the first layer
    attention = 2 * (2 * B * HEADS * T * T * (E // HEADS))  # scores, weighted sum
    output = 2 * B * T * E * E + 2 * B * T * E * CLASSES
    assert count.forward == projections + attention + output
    assert count.total == 2 * projections + 3 * (attention + output) == torch_counts["attention"]


@pytest.fixture(scope="module")
def efficientnet() -> keras.Model:
    """keras.applications.EfficientNetB0, random weights, on 32x32 images, 10 classes."""
    keras.utils.set_random_seed(0)
    model = keras.applications.EfficientNetB0(
        weights=None, input_shape=(32, 32, 3), classes=10, classifier_activation=None
    )
    model.compile(optimizer="sgd", loss=_loss())
    return model


def test_efficientnet_b0_counts_what_its_layers_shapes_give(efficientnet: keras.Model) -> None:
    """Every Conv2D (stem, expansions, squeeze-and-excite, projections, head), depthwise conv
    and the classifier, from the layer's kernel and output shape: forward 2 × output
    elements × each output's window; training 3 × that, less the stem's input gradient."""
    by_layer = {}
    for layer in efficientnet.layers:
        if isinstance(layer, keras.layers.DepthwiseConv2D):  # one input channel per output
            window = math.prod(layer.kernel.shape[:2])
        elif isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            window = math.prod(layer.kernel.shape[:-1])
        else:
            continue
        by_layer[layer.name] = 2 * math.prod(layer.output.shape[1:]) * window
    assert len(by_layer) == 81 + 1 and next(iter(by_layer)) == "stem_conv"
    forward, first = sum(by_layer.values()), by_layer["stem_conv"]
    count = flops.counted(efficientnet, np.zeros((2, 32, 32, 3), np.float32), np.arange(2))
    assert count.forward == 2 * forward
    assert count.total == 2 * (3 * forward - first)
    assert count.total == 100_813_440  # per micro-batch of 2 images


def test_efficientnet_b0_parameters_are_keras_counts_less_its_integer_counter(
    efficientnet: keras.Model,
) -> None:
    """Keras' summary says 42,023 non-trainable parameters; the record says 42,022: the one
    left out is Normalization's `count`, an int64 scalar (samples seen by adapt()), state as
    torch's integer buffers are, which torch does not count either."""
    trainable = sum(math.prod(w.shape) for w in efficientnet.trainable_weights)
    non_trainable = sum(math.prod(w.shape) for w in efficientnet.non_trainable_weights)
    assert efficientnet.count_params() - trainable == non_trainable == 42_023
    integers = [w for w in efficientnet.weights if not keras.backend.is_float_dtype(w.dtype)]
    assert [(w.path, w.dtype, tuple(w.shape)) for w in integers] == [
        ("normalization/count", "int64", ())
    ]
    counts = fp8.param_counts(efficientnet)
    assert (counts.trainable, counts.non_trainable) == (trainable, non_trainable - 1)
    assert counts.non_trainable == 42_022


def test_a_model_whose_matmuls_run_in_a_loop_has_no_count_and_says_why() -> None:
    # Keras' LSTM runs its cell in a While loop: its trip count is not in the graph.
    model = keras.Sequential([keras.Input((5, 4)), keras.layers.LSTM(6), keras.layers.Dense(3)])
    count = _count(model, np.zeros((B, 5, 4), np.float32))
    assert (count.total, count.forward) == (None, None)
    record = count.record()
    assert record["flops_per_micro_batch"] is None
    assert record["flops_source"].startswith("unknown: matmul-class work not countable: ")
    # The forward's loop and its gradient's, each named.
    loops = re.findall(r"(\w*While) \S*lstm\S*/while\S* runs MatMul in a loop \(its trip "
                       r"count is not in the graph\)", record["flops_source"])  # fmt: skip
    assert sorted(loops) == ["StatelessWhile", "While"]


def test_a_model_that_cannot_be_traced_has_no_count_and_says_why() -> None:
    class EagerOnly(keras.Model):
        def __init__(self) -> None:
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):  # a tensor's value read in Python: no graph takes it
            return self.dense(x * 0 if float(keras.ops.sum(x)) > 1e9 else x)

    model = EagerOnly()
    model(np.zeros((1, 5), np.float32))
    count = _count(model, np.zeros((B, 5), np.float32))
    assert count.total is None
    assert count.source.startswith(
        "unknown: the model, its loss and gradients could not be traced into one TensorFlow "
        "graph (TypeError: "
    )


@pytest.mark.parametrize(
    ("equation", "shapes", "expected"),
    [
        ("ab,bc->ac", [[2, 3], [3, 4]], 2 * 2 * 3 * 4),
        ("abc,cde->abde", [[2, 5, 3], [3, 4, 6]], 2 * 2 * 5 * 3 * 4 * 6),  # EinsumDense
        ("aecd,abcd->acbe", [[2, 7, 3, 4], [2, 5, 3, 4]], 2 * 2 * 7 * 3 * 4 * 5),  # scores
        ("...b,bc->...c", [[5, 7, 3], [3, 4]], 2 * 5 * 7 * 3 * 4),
        ("...ij,...jk->...ik", [[6, 1, 2, 3], [5, 3, 4]], 2 * 6 * 5 * 2 * 3 * 4),  # broadcast
        ("ab,cd->ac", [[2, 3], [4, 5]], 2 * 2 * 4),  # b, d summed away first, as torch does
        ("ab->ba", [[2, 3]], 0),  # one operand: a transpose, no matmul
    ],
)
def test_einsum_is_counted_as_torch_runs_it(equation, shapes, expected) -> None:
    assert flops.einsum_flops(equation, shapes) == expected


def test_a_float8_cell_takes_its_share_of_the_counted_forward() -> None:
    """A user workload that gives no FLOPs: its fp8 share is of the forward counted from the
    graph (Keras' float8 layers count as the matmuls they run)."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((32,)), keras.layers.Dense(64, activation="relu", name="hidden"),
             keras.layers.Dense(CLASSES, name="head"),
             keras.layers.Activation("softmax", dtype="float32")]
        )  # fmt: skip
        workload = type("Workload", (), {"kind": "user", "batch_size": B})()
        workload.flops = lambda batch: None
        setup = fp8.prepare(model, workload, None, None)
        assert (setup.forward_flops, setup.flop_note) == (None, fp8.NO_FLOP_COUNTER)
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy())
        x, y = np.zeros((B, 32), np.float32), np.arange(B) % CLASSES
        count = flops.counted(model, x, y)
        cpu = Placement("/CPU:0", DeviceInfo(kind="cpu", name="test cpu"))
        fields = fp8.finish(model, cpu, "auto", False, x, y, count)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert setup.layers_fp8 == ["hidden"]  # the head (3 outputs) stays in bfloat16
    forward = 2 * B * (32 * 64 + 64 * CLASSES)
    assert count.forward == forward and count.total == 3 * forward - 2 * B * 32 * 64
    assert fields["flop_share_fp8"] == pytest.approx(32 * 64 / (32 * 64 + 64 * CLASSES))
    assert fields["flop_share_note"] == fp8.COUNTED_NOTE


def test_a_run_records_the_counted_flops_of_a_user_workload(tmp_path: Path) -> None:
    """examples/tabular_mlp.py, as it is, in real Keras cells (float32 and emulated float8):
    the FLOPs torch's FlopCounterMode counts for it (docs/workloads.md: 2,195,456 per step of
    64 rows), now in the Keras records too, with TFLOP/s."""
    out = tmp_path / "run"
    done = run_mpbench(
        "run", "-w", "examples.tabular_mlp:WORKLOAD", "-f", "tensorflow", "-p", "fp32",
        "-p", "fp8", "--repeat", "1", "--device", "cpu", "--max-steps", "3",
        "--warmup-steps", "1", "--out", out, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = {
        r["policy"]: r
        for r in (json.loads(line) for line in (out / "results.jsonl").read_text().splitlines())
    }
    forward = 2 * 64 * (32 * 64 + 64 * 64 + 64 * 4)
    for record in records.values():
        assert record["status"] == "ok", record["reason"]
        assert record["flops_per_step"] == 3 * forward - 2 * 64 * 32 * 64 == 2_195_456
        assert record["config"]["flops_source"] == flops.SOURCE
    assert records["float32"]["achieved_tflops"] > 0
    share = records["float8"]["fp8"]
    assert share["flop_share_fp8"] == pytest.approx((32 * 64 + 64 * 64) / (forward / (2 * 64)))
    assert share["flop_share_note"] == fp8.COUNTED_NOTE
