"""transformer_lm: one spec, the same parameters in torch and in Keras, tensor by tensor."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from frameworks import needs_tensorflow

from mpbench.errors import InvalidInput
from mpbench.workloads import get_workload

torch = pytest.importorskip("torch")

from mpbench.backends.torch.models import build_model  # noqa: E402

SIZES = [  # (units, heads, layers, seq_len): the CPU preset, the tests' tiny one, an odd one
    (128, 4, 2, 128),
    (32, 2, 1, 16),
    (48, 3, 3, 40),
]

KERAS_CHILD = r"""
import json, sys
import keras
from mpbench.backends.tensorflow.models import build_model
from mpbench.workloads import get_workload

workload = get_workload("transformer_lm")
out = []
for units, heads, layers, seq_len in json.loads(sys.argv[1]):
    model = build_model(workload, units, heads=heads, layers=layers, seq_len=seq_len)
    shapes = sorted(int(keras.ops.size(v)) for v in model.trainable_variables)
    out.append({"params": int(model.count_params()), "sizes": shapes})
print("RESULT " + json.dumps(out))
"""


def keras_counts() -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-c", KERAS_CHILD, json.dumps(SIZES)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line.removeprefix("RESULT "))


def test_the_cpu_preset_has_the_researched_parameter_count() -> None:
    workload = get_workload("transformer_lm")
    assert workload.param_count(128, heads=4, layers=2, seq_len=128) == 445_952
    preset = workload.default_sizes("cpu")
    assert (workload.default_units("cpu"), preset) == (
        128,
        {"heads": 4, "layers": 2, "seq_len": 128},
    )
    # 3 x (2 x (24·T·d² + 4·T²·d) + 2·T·d·V) x 32 sequences: 12.08 GFLOP a step.
    assert workload.flops_per_step(32, 128, heads=4, layers=2, seq_len=128) == 12_079_595_520


def test_sizes_that_make_no_model_are_refused() -> None:
    workload = get_workload("transformer_lm")
    with pytest.raises(InvalidInput, match=r"\(units\) 100 is not divisible by its 3 heads"):
        workload.shape(100, heads=3, layers=1, seq_len=8)


@needs_tensorflow
def test_torch_and_keras_build_the_same_parameters() -> None:
    workload = get_workload("transformer_lm")
    keras_side = keras_counts()
    for (units, heads, layers, seq_len), keras_model in zip(SIZES, keras_side, strict=True):
        sizes = {"heads": heads, "layers": layers, "seq_len": seq_len}
        model = build_model(workload, units, **sizes)
        torch_count = sum(p.numel() for p in model.parameters())
        assert torch_count == keras_model["params"] == workload.param_count(units, **sizes)
        # Tensor by tensor: torch's fused (3d, d) q/k/v weight and (3d,) bias are Keras'
        # three (d, h, d/h) kernels and (h, d/h) biases, the rest one to one.
        torch_sizes = []
        for name, p in model.named_parameters():
            if name.endswith("qkv.weight") or name.endswith("qkv.bias"):
                torch_sizes += [p.numel() // 3] * 3
            else:
                torch_sizes.append(p.numel())
        assert sorted(torch_sizes) == keras_model["sizes"]


def test_torch_model_is_causal_and_initialised_as_the_spec_says() -> None:
    workload = get_workload("transformer_lm")
    torch.manual_seed(0)
    model = build_model(workload, 128, heads=4, layers=2, seq_len=128)
    assert model.tokens.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert model.blocks[0].ln_1.eps == 1e-5
    assert all(b.qkv.bias.abs().sum() == 0 for b in model.blocks)
    tokens = torch.randint(0, 256, (2, 128))
    changed = tokens.clone()
    changed[:, 64:] = (changed[:, 64:] + 1) % 256
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    # A change from position 64 on leaves every earlier prediction exactly as it was.
    assert torch.equal(before[:, :64], after[:, :64])
    assert not torch.allclose(before[:, 64:], after[:, 64:])
