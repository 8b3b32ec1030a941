"""Encoder-decoders by name (docs/workloads.md, "Hugging Face: hf:<model_type>", task
seq2seq): `hf:t5`, `hf:bart` and their kin built from tiny configurations (real
transformers), trained on a synthetic translation with their decoder inputs made by their own
rule; end to end through `mpbench run` in fp32 and bf16, each record's FLOPs the analytic
encoder-decoder count. Slow: importing transformers and torch takes seconds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli import run_mpbench
from frameworks import installed
from keyword_models import encoder_decoder_forward_flops
from refusals import one_line

from mpbench.workloads import user

pytestmark = [
    pytest.mark.skipif(
        not (installed("transformers") and installed("torch")),
        reason="needs transformers and torch",
    ),
    pytest.mark.slow,
]

SEQ_LEN, VOCAB, D, FF = 16, 300, 32, 64
# 2 encoder layers and 1 decoder layer of width 32 (4 heads of 8), FFN 64, 300 ids.
T5 = (
    f"hf:t5?d_model={D}&d_ff={FF}&d_kv=8&num_heads=4&num_layers=2&num_decoder_layers=1"
    f"&vocab_size={VOCAB}&seq_len={SEQ_LEN}&samples=40"
)
BART_SIZES = (
    f"d_model={D}&encoder_layers=2&decoder_layers=1&encoder_attention_heads=4"
    f"&decoder_attention_heads=4&encoder_ffn_dim={FF}&decoder_ffn_dim={FF}&vocab_size={VOCAB}"
    f"&max_position_embeddings=64&seq_len={SEQ_LEN}&samples=40"
)
BART = f"hf:bart?{BART_SIZES}"
BATCH = 8  # hf:'s batch


def forward_flops(batch: int) -> int:
    """Both tiny models' forward: the same widths (BART's inner width is d_model, T5's
    heads × d_kv = 32), 2 encoder layers, 1 decoder layer, source and target of SEQ_LEN."""
    return encoder_decoder_forward_flops(batch, SEQ_LEN, SEQ_LEN, D, D, FF, 2, 1, VOCAB)


def test_t5_by_name_is_a_seq2seq_model_trained_on_a_translation() -> None:
    import torch

    source = user.source(T5)
    assert (source["task"], source["model_class"]) == ("seq2seq", "T5ForConditionalGeneration")
    # transformers 5's T5Config has no decoder start: T5's own (the pad id), and recorded.
    assert source["config"]["decoder_start_token_id"] == 0
    assert "decoder inputs: the target shifted right" in source["data"]
    described = user.describe(T5)["description"]
    assert described.startswith("T5ForConditionalGeneration, ")
    assert "synthetic translation" in described

    workload = user.load(T5)
    x, y, x_test, y_test = workload.data(0)
    assert list(x) == ["input_ids", "decoder_input_ids"] and list(x_test) == list(x)
    assert {a.shape for a in x.values()} == {(40, SEQ_LEN)} and y.shape == (40, SEQ_LEN)
    assert {a.shape for a in x_test.values()} == {(8, SEQ_LEN)} and y_test.shape == (8, SEQ_LEN)
    assert {a.dtype for a in (*x.values(), y)} == {np.dtype(np.int64)}
    source_ids, decoder = x["input_ids"], x["decoder_input_ids"]
    assert (y[:, -1] == 1).all()  # every target ends in T5's <eos>
    assert (decoder[:, 0] == 0).all() and (decoder[:, 1:] == y[:, :-1]).all()  # _shift_right
    assert not np.isin(source_ids, [0, 1]).any()  # no pad, no <eos> in the source
    # The target is a function of the source: one counterpart per source id, a permutation.
    pairs = set(zip(source_ids[:, :-1].ravel(), y[:, :-1].ravel(), strict=True))
    assert len(pairs) == len({s for s, _ in pairs}) == len({t for _, t in pairs})
    assert not (source_ids[:, :-1] == y[:, :-1]).all()

    model, _, loss = workload.torch(torch.device("cpu"))
    batch = {k: torch.from_numpy(v[:4]) for k, v in x.items()}
    logits = model(**batch).logits
    assert tuple(logits.shape) == (4, SEQ_LEN, VOCAB)
    assert torch.isfinite(loss(logits.float(), torch.from_numpy(y[:4])))


@pytest.mark.parametrize(
    ("model_type", "start"),
    [
        ("bart", 2),  # shift_tokens_right from decoder_start_token_id 2
        ("mbart", 2),  # mBART's rule: the last token (<eos>, 2) wrapped to the front
        ("pegasus", 0),  # from its decoder_start_token_id, the pad id 0
        ("blenderbot", 1),  # no method: its module's shift_tokens_right, from bos 1
    ],
)
def test_each_encoder_decoder_starts_its_decoder_by_its_own_rule(model_type, start) -> None:
    name = f"hf:{model_type}?{BART_SIZES}"
    assert user.source(name)["task"] == "seq2seq"
    x, y, _, _ = user.load(name).data(0)
    decoder = x["decoder_input_ids"]
    assert (decoder[:, 0] == start).all() and (decoder[:, 1:] == y[:, :-1]).all()


def test_bart_keeps_its_decoder_as_a_causal_lm_when_asked() -> None:
    source = user.source(BART + "&task=causal-lm")
    assert (source["task"], source["model_class"]) == ("causal-lm", "BartForCausalLM")
    x = user.load(BART + "&task=causal-lm").data(0)[0]
    assert isinstance(x, np.ndarray)  # a decoder's x: token ids alone


def test_the_seq2seq_loss_ignores_labels_of_minus_100() -> None:
    import torch

    from mpbench.workloads.zoo.seq2seq import loss

    logits = torch.randn(2, 3, 5)
    y = torch.tensor([[1, 2, -100], [4, -100, -100]])
    kept = logits[[0, 0, 1], [0, 1, 0]]
    expected = torch.nn.functional.cross_entropy(kept, torch.tensor([1, 2, 4]))
    assert torch.allclose(loss(logits, y), expected)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("hf:t5?task=causal-lm", "t5 has no causal-lm model in transformers: hf: trains it as "
         "task=seq2seq"),
        ("hf:bart?task=sequence-classification", "bart is an encoder-decoder, and its sequence "
         "classifier needs decoder inputs and <eos> tokens, which a batch of token ids does not "
         "give: hf: trains it as task=seq2seq, the default"),
        ("hf:bert?task=seq2seq", "bert has no seq2seq model in transformers: hf: trains it as "
         "task=sequence-classification"),
        ("hf:t5?labels=3", "labels is for task=sequence-classification"),
        # marian's start and pad ids are 58100: a small vocabulary has no row for the start.
        (f"hf:marian?{BART_SIZES}&pad_token_id=0", "decoder_start_token_id 58100 is no id of "
         "the vocabulary (vocab_size 300): a seq2seq target ends in <eos> and the decoder "
         "starts from its start id; give a decoder_start_token_id below 300"),
        (f"{T5}&eos_token_id=300", "eos_token_id 300 is no id of the vocabulary (vocab_size "
         "300)"),
    ],
)  # fmt: skip
def test_a_bad_seq2seq_name_is_one_line(name: str, said: str) -> None:
    assert said in one_line(name, user.describe)


def test_marian_trains_with_ids_in_its_vocabulary() -> None:
    name = f"hf:marian?{BART_SIZES}&pad_token_id=0&decoder_start_token_id=0&eos_token_id=1"
    assert user.describe(name)["description"].startswith("MarianMTModel, ")
    x, y, _, _ = user.load(name).data(0)
    assert (x["decoder_input_ids"][:, 0] == 0).all() and (y[:, -1] == 1).all()


# --- end to end ----------------------------------------------------------------------------

TINY = ("--max-steps", "3", "--warmup-steps", "1", "--repeat", "1", "--device", "cpu",
        "--threads", "1")  # fmt: skip


def test_t5_and_bart_by_name_train_in_fp32_and_bf16_with_their_analytic_flops(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    done = run_mpbench("run", *TINY, "--out", out, "-w", T5, "-w", BART, "-f", "torch",
                       "-p", "fp32", "-p", "bf16", timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    found = {(r["workload"].partition("?")[0], r["policy"]) for r in records}
    assert found == {(m, p) for m in ("hf:t5", "hf:bart") for p in ("float32", "mixed_bfloat16")}
    # Every matmul has an input gradient (the embeddings train): a step is 3 × forward.
    expected = 3 * forward_flops(BATCH)
    assert expected == 32_538_624
    for record in records:
        assert record["status"] == "ok", record
        assert record["flops_per_step"] == expected, record["workload"]
        assert record["accuracy"]["test_accuracy"] is not None  # per target token
        assert record["config"]["workload_source"]["task"] == "seq2seq"
        assert record["config"]["output"] == "'logits' of the Seq2SeqLMOutput the forward returns"
        assert "op_dtypes_unavailable" not in record["precision"]
    bf16 = [r for r in records if r["policy"] == "mixed_bfloat16"]
    assert {r["precision"]["linear_dtype"] for r in bf16} == {"bfloat16"}
