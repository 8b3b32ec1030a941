"""Your model, measured right (issue 41), in torch cells run in this process: a model's
ModelOutput / dict / tuple read for one tensor, FLOPs counted on the math attention path (a
tiny HF GPT-2 against the analytic transformer formula), fp8 GEMM shapes traced from each
layer's real input (BERT: M = batch × tokens), GPT-2's Conv1D projections swapped so fp8 takes
them, every unconverted matmul layer named with its reason, parameters counted as Keras counts
them, images transposed from a declared layout, op dtypes read back for a user model."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import user_models
from builders import cell_spec

torch = pytest.importorskip("torch")

from mpbench.backends.torch import outputs  # noqa: E402
from mpbench.backends.torch.backend import run_cell  # noqa: E402
from mpbench.backends.torch.fp8_layers import SWAPPED  # noqa: E402

TINY = dict(
    batch_size=user_models.BATCH, max_steps=3, warmup_steps=1, epochs=1, intra_op_threads=1,
    units=None, fp8_eager=True,
)  # fmt: skip


def _run(workload: str, policy: str = "float32", **changes: object):
    spec = cell_spec(workload=f"user_models:{workload}", policy=policy, **{**TINY, **changes})
    return run_cell(spec, lambda step, total: None, lambda message: None)


# --- what a model may return ---------------------------------------------------------------


def test_a_tensor_is_taken_from_a_mapping_a_tuple_or_itself():
    logits = torch.ones(2, 3)
    assert outputs.take(logits, None) is logits
    assert outputs.take(OrderedDict(loss=None, logits=logits), None) is logits
    assert outputs.take({"scores": logits, "x": 1}, "scores") is logits
    assert outputs.take((logits, 5), None) is logits
    assert outputs.take([0, logits], 1) is logits


@pytest.mark.parametrize(
    ("returned", "wanted", "said"),
    [
        ({"hidden": torch.ones(1)}, None, "a dict with keys hidden: no tensor under 'logits'"),
        ((1, 2), None, "a tuple of 2 (int, int): no tensor at index 0"),
        ("text", None, "a str, not a tensor"),
        ({"logits": torch.ones(1)}, 3, "no tensor under 3"),
    ],
)
def test_an_output_without_the_tensor_is_one_line_saying_what_came_back(returned, wanted, said):
    with pytest.raises(outputs.OutputError) as error:
        outputs.take(returned, wanted)
    message = str(error.value)
    assert said in message and "\n" not in message
    assert "UserWorkload(output=" in message


def test_a_dict_and_a_tuple_output_train_and_the_record_says_what_was_read():
    by_dict = _run("DICT")
    assert by_dict.status == "ok" and by_dict.test_accuracy is not None
    assert by_dict.extra_config["output"] == "'scores' of the dict the forward returns"
    by_tuple = _run("TUPLE", policy="mixed_bfloat16")
    assert by_tuple.status == "ok"
    assert by_tuple.extra_config["output"] == "item 0 of the tuple the forward returns"


def test_a_model_returning_no_tensor_fails_its_cell_in_one_line():
    with pytest.raises(outputs.OutputError, match="the model returned a str, not a tensor"):
        _run("NOT_A_TENSOR")


# --- Hugging Face models as transformers returns them ----------------------------------------


def _transformers() -> None:
    pytest.importorskip("transformers")


def test_gpt2_trains_and_its_flops_are_the_transformer_formula():
    _transformers()
    result = _run("GPT2")
    assert result.status == "ok"
    assert result.extra_config["output"].startswith("'logits' of the CausalLM")
    # Every GEMM has an input gradient here (the embeddings train): the step is 3 × forward.
    expected = 3 * user_models.gpt2_forward_flops(user_models.BATCH)
    assert result.extra_config["flops_per_micro_batch"] == expected
    assert "math path" in result.extra_config["flops_source"]


def test_fused_attention_is_counted_on_the_math_path():
    """FlopCounterMode scores the fused CPU attention kernel 0; mpbench's count runs it on
    the math path, where Q·Kᵀ and A·V are two bmm of 2·B·H·T²·D each. (transformers may pick
    the math path itself for a masked attention: a plain sdpa call decides this test.)"""
    from torch.utils.flop_counter import FlopCounterMode

    from mpbench.backends.torch.flops import counted

    class Attention(torch.nn.Module):
        def forward(self, q):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    batch, heads, t, d = 2, 2, 16, 32
    q = torch.randn(batch, heads, t, d)
    with FlopCounterMode(display=False) as fused:
        Attention()(q)
    assert fused.get_total_flops() == 0
    assert counted(Attention(), lambda: Attention()(q)).total == 2 * 2 * batch * heads * t * t * d


def test_gpt2_fp8_swaps_its_conv1d_projections_and_converts_them_all():
    _transformers()
    pytest.importorskip("torchao")
    result = _run("GPT2", policy="float8")
    assert result.status == "ok"
    fp8 = result.fp8
    projections = [
        f"transformer.h.{i}.{name}"
        for i in range(2)
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    ]
    assert fp8["swapped_layers"] == dict.fromkeys(projections, SWAPPED)
    assert sorted(fp8["layers_fp8"]) == sorted([*projections, "lm_head"])
    # The tied embedding is named with its own reason; nothing that owns a matmul weight is
    # left out of both lists.
    assert fp8["skipped_layers"]["transformer.wte"].endswith("(its weight is tied to lm_head)")
    assert set(fp8["skipped_layers"]) == {"transformer.wte", "transformer.wpe"}
    # The share is the counter's: everything but the attention's two bmm per block.
    d, t, layers, v = 64, user_models.TOKENS, 2, user_models.VOCAB
    converted = layers * 24 * t * d * d + 2 * t * d * v
    total = converted + layers * 4 * t * t * d
    assert fp8["flop_share_fp8"] == pytest.approx(converted / total)
    assert "traced forward" in fp8["shapes_source"]


def test_bert_fp8_gemms_have_m_batch_times_tokens():
    _transformers()
    pytest.importorskip("torchao")
    result = _run("BERT", policy="float8")
    assert result.status == "ok"
    fp8 = result.fp8
    rows = fp8["prediction"]["rows"]
    encoder = [r for r in rows if ".encoder." in r["layer"] and r["role"] == "forward"]
    assert encoder and {r["m"] for r in encoder} == {user_models.BATCH * user_models.TOKENS}
    # The pooler and classifier see one row a sample.
    pooler = [r for r in rows if r["layer"] == "bert.pooler.dense" and r["role"] == "forward"]
    assert [r["m"] for r in pooler] == [user_models.BATCH]
    assert "out 2 not a multiple of 16" in fp8["skipped_layers"]["classifier"]
    embedding = fp8["skipped_layers"]["bert.embeddings.word_embeddings"]
    assert embedding == "embedding: a table lookup, no GEMM"  # nothing tied in BERT


# --- parameters, layout, op dtypes ---------------------------------------------------------


def test_a_batchnorm_cnn_counts_its_running_statistics_apart_and_trains_nchw():
    result = _run("BN_CNN", policy="mixed_bfloat16")
    assert result.status == "ok"
    conv, bn, head = 3 * 3 * 3 * 8 + 8, 2 * 8, 8 * 2 + 2
    assert result.params == conv + bn + head  # trainable: BatchNorm's weight and bias
    assert result.params_non_trainable == 2 * 8  # its running mean and variance
    assert result.extra_config["data_layout"] == "NCHW (given NHWC, transposed)"
    # Under bf16 autocast on a CPU the convolution runs in bf16, BatchNorm gets its output.
    assert result.precision["convolution_dtype"] == "bfloat16"
    assert "batch_norm_dtype" in result.precision
    assert "aten.convolution" in result.precision["op_dtypes"]
