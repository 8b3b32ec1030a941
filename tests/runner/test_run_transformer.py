"""transformer_lm end to end: `mpbench run` trains a tiny decoder-only LM in real child
processes, in torch and in Keras, under float32 and mixed_bfloat16, and records what ran in
which dtype as each framework reports it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import needs_tensorflow, needs_torch

from mpbench.workloads import get_workload

pytestmark = [needs_torch, needs_tensorflow, pytest.mark.all_cores]  # Keras replicas

SIZES = {"units": 32, "heads": 2, "layers": 1, "seq_len": 16}
TINY = """
[run]
data = "synthetic"
warmup_steps = 3
timeout = 300

[workloads.transformer_lm]
batch_size = 16
epochs = 1
max_steps = 60
units = 32
heads = 2
layers = 1
seq_len = 16
synthetic_train_size = 1024
synthetic_test_size = 64
"""


def run_lm(folder: Path, config_text: str, *args: str) -> list[dict]:
    """`mpbench run -w transformer_lm` on the CPU with `config_text`; the records."""
    config = folder / "tiny.toml"
    config.write_text(config_text)
    out = folder / "run"
    # The early stop off: this is a test of training and read-back, and a tiny model's bf16
    # step on a CPU can be 100x float32's (a clean-clone CI run saw 112x and stopped the cell).
    common = ("--config", config, "-w", "transformer_lm", "--device", "cpu", "--out", out,
              "--stop-slower-than", "off")  # fmt: skip
    result = run_mpbench("run", *common, *args, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict]:
    """Four cells, once for the module: both frameworks, float32 and mixed_bfloat16. One
    thread each: only the replicas' test needs the module's two cores. With two threads,
    beside the other xdist worker's tests (a busy core), the four took 90 s on a 2-core AMX
    Xeon, their threads waiting on each other for the one free core."""
    folder = tmp_path_factory.mktemp("transformer")
    found = run_lm(
        folder, TINY, "-f", "all", "-p", "fp32", "-p", "bf16", "--repeat", "1", "--threads", "1"
    )
    return {(r["framework"], r["policy"]): r for r in found}


def test_every_cell_trains_the_same_model_and_learns(run) -> None:
    workload = get_workload("transformer_lm")
    units, sizes = SIZES["units"], {k: v for k, v in SIZES.items() if k != "units"}
    assert len(run) == 4
    for (framework, policy), record in run.items():
        assert record["status"] == "ok", (framework, policy, record["reason"])
        # The same parameters in both frameworks, the spec's count.
        assert record["params"] == workload.param_count(units, **sizes) == 21_472
        assert record["flops_per_step"] == workload.flops_per_step(16, units, **sizes)
        assert record["config"]["heads"] == 2 and record["config"]["seq_len"] == 16
        assert record["data"]["name"] == "synthetic-tinyshakespeare"
        assert record["data"]["train_size"] == 1024
        # Next-token prediction learns the stream: from log(256) = 5.55 nats, well down.
        accuracy = record["accuracy"]
        assert accuracy["test_loss"] < math.log(256) - 0.75, (framework, policy, accuracy)
        # Next-byte accuracy far above the 1/256 of guessing.
        assert accuracy["test_accuracy"] > 0.2, (framework, policy, accuracy)


def test_torch_reads_back_which_op_ran_in_which_dtype(run) -> None:
    fp32 = run["torch", "float32"]["precision"]
    assert {fp32[f"{role}_dtype"] for role in ("layer_norm", "softmax", "loss", "attention")} == {
        "float32"
    }
    bf16 = run["torch", "mixed_bfloat16"]["precision"]
    assert bf16["variable_dtype"] == "float32" and bf16["autocast_dtype"] == "bfloat16"
    # Layer norm, softmax and the loss in float32; the linears and attention in bfloat16.
    assert bf16["layer_norm_dtype"] == "float32"
    assert bf16["softmax_dtype"] == "float32" and bf16["loss_dtype"] == "float32"
    assert bf16["linear_dtype"] == "bfloat16" and bf16["attention_dtype"] == "bfloat16"
    assert bf16["head_dtype"] == "bfloat16"
    assert bf16["op_dtypes"]["aten._scaled_dot_product_flash_attention_for_cpu"] == "bfloat16"


def test_keras_reads_back_which_op_ran_in_which_dtype(run) -> None:
    fp32 = run["tensorflow", "float32"]["precision"]
    assert fp32["attention_dtype"] == "float32" and fp32["linear_dtype"] == "float32"
    bf16 = run["tensorflow", "mixed_bfloat16"]["precision"]
    assert bf16["dtype_policy"] == "mixed_bfloat16" and bf16["variable_dtype"] == "float32"
    # LayerNormalization computes in float32 (and hands bfloat16 on), both softmaxes and
    # the loss run in float32; attention's einsums and the Dense layers in bfloat16.
    assert bf16["layer_norm_dtype"] == "float32"
    assert bf16["softmax_dtype"] == "float32" and bf16["attention_softmax_dtype"] == "float32"
    assert bf16["loss_dtype"] == "float32"
    assert bf16["attention_dtype"] == "bfloat16" and bf16["linear_dtype"] == "bfloat16"
    # The tied head in bfloat16 too (reverse_dtype; left unset it would run in float32).
    assert bf16["head_dtype"] == "bfloat16" and bf16["output_dtype"] == "float32"
    assert bf16["op_dtypes"]["MultiHeadAttention/Softmax"] == "float32"
    assert bf16["op_dtypes"]["MultiHeadAttention/Einsum"] == "bfloat16"


def test_keras_replicas_average_the_loss_per_token(tmp_path: Path) -> None:
    """Two replicas (MirroredStrategy, custom loop) average each sample's per-token loss
    over the global batch: the same loss as one replica, not seq_len times it."""
    found = run_lm(
        tmp_path,
        TINY.replace("max_steps = 60", "max_steps = 12"),
        *("-f", "tensorflow", "-p", "fp32", "--loop", "custom", "--nproc", "1,2"),
    )
    losses = {r["cell_id"]: r["accuracy"]["train_loss_per_epoch"][0] for r in found}
    one, two = (
        losses["tensorflow/transformer_lm/float32/r0"],
        losses["tensorflow/transformer_lm/float32@np2/r0"],
    )
    assert 4.0 < one < math.log(256) + 0.1 and abs(two - one) < 0.3, losses
