"""Hugging Face models by name (docs/workloads.md, "A model zoo by name"), built in this
process from their configurations (real transformers, tiny sizes): the parameters, data and
record they should have, and bad names refused in one line. Slow: importing transformers and
torch takes seconds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from frameworks import installed
from refusals import one_line

from mpbench.workloads import user

pytestmark = [
    pytest.mark.skipif(
        not (installed("transformers") and installed("torch")),
        reason="needs transformers and torch",
    ),
    pytest.mark.slow,
]

# A 1-layer GPT-2 of 18,912 parameters, and a 1-layer BERT: a forward pass takes milliseconds.
GPT2 = "hf:gpt2?n_layer=1&n_embd=32&n_head=2&vocab_size=128&n_positions=64&seq_len=16&samples=64"
BERT = (
    "hf:bert?num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=64"
    "&vocab_size=300&seq_len=16&samples=200&labels=3"
)


# --- Hugging Face --------------------------------------------------------------------------


def test_a_gpt2_by_name_is_the_model_its_config_says() -> None:
    import torch

    workload = user.load(GPT2)
    assert (workload.name, workload.frameworks, workload.output) == ("hf:gpt2", ["torch"], "logits")
    assert (workload.batch_size, workload.epochs) == (8, 1)
    model, optimizer, loss = workload.torch(torch.device("cpu"))
    assert type(model).__name__ == "GPT2LMHeadModel"
    assert isinstance(optimizer, torch.optim.AdamW)
    # Embeddings (128 + 64 positions) × 32, one block, the final norm; the head is tied.
    d = 32
    block = (
        2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)
    )
    params = (128 + 64) * d + block + 2 * d
    assert params == 18_912
    assert sum(p.numel() for p in model.parameters()) == params
    # The probe builds it on the meta device and counts the same, for the memory check.
    described = user.describe(GPT2)
    assert described["description"].startswith("GPT2LMHeadModel, 18,912 parameters")
    assert (described["params"], described["optimizer"], described["optimizer_states"]) == (
        18_912,
        "AdamW",
        2,
    )

    x, y, _, _ = workload.data(0)
    out = model(torch.from_numpy(x[:4]))
    assert tuple(out.logits.shape) == (4, 16, 128)
    assert torch.isfinite(loss(out.logits.float(), torch.from_numpy(y[:4])))


def test_a_language_models_data_is_token_ids_and_their_next_tokens() -> None:
    x, y, x_test, y_test = user.load(GPT2).data(0)
    assert (x.shape, y.shape, x_test.shape, y_test.shape) == (
        (64, 16),
        (64, 16),
        (12, 16),
        (12, 16),
    )
    assert {a.dtype for a in (x, y, x_test, y_test)} == {np.dtype(np.int64)}
    assert (y[:, :-1] == x[:, 1:]).all()  # y: the next tokens
    assert x.min() >= 0 and x.max() < 128
    again, other = user.load(GPT2).data(0), user.load(GPT2).data(1)
    assert (again[0] == x).all() and not (other[0] == x).all()
    # An order-1 chain: each token's most frequent successor follows it most of the time.
    pairs = np.stack([x[:, :-1].ravel(), x[:, 1:].ravel()], axis=1)
    firsts = {}
    for a, b in pairs:
        firsts.setdefault(a, []).append(b)
    top = sum(np.bincount(v).max() for v in firsts.values()) / len(pairs)
    assert top > 0.5


def test_a_bert_by_name_classifies_sequences_with_labels_of_their_tokens() -> None:
    import torch

    workload = user.load(BERT)
    assert user.source(BERT)["task"] == "sequence-classification"  # an encoder's default
    x, y, x_test, _ = workload.data(0)
    assert x.shape == (200, 16) and y.shape == (200,) and x_test.shape == (40, 16)
    assert set(np.unique(y)) == {0, 1, 2}
    assert np.bincount(y).min() > 200 * 0.15  # about balanced
    assert 0 not in x  # BERT's pad id, whose embedding never trains
    model, _, loss = workload.torch(torch.device("cpu"))
    assert type(model).__name__ == "BertForSequenceClassification"
    logits = model(torch.from_numpy(x[:4])).logits
    assert tuple(logits.shape) == (4, 3)
    assert torch.isfinite(loss(logits.float(), torch.from_numpy(y[:4])))


def test_a_decoder_asked_to_classify_gets_a_pad_id_it_never_sees() -> None:
    import torch

    name = GPT2 + "&task=sequence-classification"
    source = user.source(name)
    assert source["task"] == "sequence-classification"
    assert source["config"]["pad_token_id"] == 127
    x = user.load(name).data(0)[0]
    assert x.max() < 127
    model = user.load(name).torch(torch.device("cpu"))[0]
    assert tuple(model(torch.from_numpy(x[:4])).logits.shape) == (4, 2)  # a batch, no refusal


def test_the_record_keeps_the_config_so_the_model_can_be_built_again() -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    source = user.source(GPT2)
    json.dumps(source)  # JSON as it is
    assert {k: source[k] for k in ("zoo", "model_type", "task", "seq_len", "samples")} == {
        "zoo": "hf",
        "model_type": "gpt2",
        "task": "causal-lm",
        "seq_len": 16,
        "samples": 64,
    }
    assert source["package"] == "transformers" and source["version"]
    config = dict(source["config"])
    assert (config["n_layer"], config["n_embd"], config["vocab_size"]) == (1, 32, 128)
    again = AutoConfig.for_model(config.pop("model_type"), **config)
    rebuilt = AutoModelForCausalLM.from_config(again)
    assert sum(p.numel() for p in rebuilt.parameters()) == 18_912


BERT_LM = (
    "hf:bert?num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=64"
    "&vocab_size=300&seq_len=16&samples=20&task=causal-lm"
)


def test_an_encoder_asked_as_a_causal_lm_is_causal() -> None:
    """Issue 55: BertLMHeadModel built with is_decoder=False let every position see the token
    it must predict (next-token accuracy 98.5 % against 65.6 % causal)."""
    import torch

    source = user.source(BERT_LM)
    assert (source["task"], source["model_class"]) == ("causal-lm", "BertLMHeadModel")
    assert source["config"]["is_decoder"] is True  # the record says how it was built
    workload = user.load(BERT_LM)
    torch.manual_seed(0)
    model = workload.torch(torch.device("cpu"))[0].eval()
    assert model.config.is_decoder is True
    x = torch.from_numpy(workload.data(0)[0][:2])
    later = x.clone()
    later[:, -1] = torch.where(later[:, -1] == 5, 6, 5)  # another ordinary id, last position
    with torch.no_grad():
        before, after = model(x).logits, model(later).logits
    # No position sees a later token: only the last one's logits change.
    assert torch.equal(before[:, :-1], after[:, :-1])
    assert not torch.equal(before[:, -1], after[:, -1])


def test_a_causal_lm_told_not_to_be_a_decoder_is_refused_in_one_line() -> None:
    said = one_line(BERT_LM + "&is_decoder=false", user.describe)
    assert said.endswith(
        ": task=causal-lm needs is_decoder=true for bert, not is_decoder=false: without it its "
        "attention is not causal and every position sees the token it must predict (leave "
        "is_decoder out: causal-lm sets it)"
    )
    assert user.source(BERT_LM + "&is_decoder=true")["config"]["is_decoder"] is True


def test_a_llama_takes_a_key_its_config_consumes_under_another_name() -> None:
    import torch

    name = (
        "hf:llama?hidden_size=32&num_attention_heads=2&num_key_value_heads=1&num_hidden_layers=1"
        "&intermediate_size=64&vocab_size=300&rope_theta=500000.0&seq_len=16&samples=10"
    )
    workload = user.load(name)
    model = workload.torch(torch.device("cpu"))[0]
    assert type(model).__name__ == "LlamaForCausalLM"
    x = workload.data(0)[0]
    assert tuple(model(torch.from_numpy(x[:2])).logits.shape) == (2, 16, 300)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("hf:gtp2", "unknown Hugging Face model_type 'gtp2' (did you mean gpt2"),
        ("hf:gpt2?n_layerz=2", "config (GPT2Config) has no 'n_layerz' (did you mean n_layer?)"),
        ("hf:gpt2?dtype=bfloat16", "dtype is not a query key: the model is built in float32"),
        ("hf:gpt2?batch_size=4", "batch_size is not a query key: use --batch-size"),
        ("hf:gpt2?seq_len=2048", "seq_len 2048 is more than the config's max_position_embeddi"),
        ("hf:gpt2?labels=3", "labels is for task=sequence-classification"),
        ("hf:gpt2?task=mt", "task 'mt' is not one of causal-lm, sequence-classification"),
        ("hf:gpt2?seq_len=0", "seq_len must be an integer >= 1, not 0"),
        ("hf:detr", "detr has no causal-LM, sequence-classification, seq2seq or "
         "image-classification model in transformers"),
        ("hf:gpt2?n_embd=30&n_head=4", "transformers cannot build GPT2LMHeadModel from it"),
        # A size of 0 or less: built, it failed in every cell (`__len__() should return >= 0`).
        ("hf:gpt2?n_layer=-1", "n_layer must be a positive integer, not -1 (the gpt2 config's "
         "default is 12)"),
        ("hf:llama?hidden_size=0", "hidden_size must be a positive integer, not 0"),
        ("hf:bert?vocab_size=-5", "vocab_size must be a positive integer, not -5"),
        # transformers' second line says what is wrong; the first only names the field.
        ("hf:gpt2?n_layer=two", "Validation error for field 'n_layer': TypeError: Field "
         "'n_layer' expected int, got str (value: 'two')"),
        # phi3's pad id is 32000: a smaller vocabulary has no row for it.
        ("hf:phi3?vocab_size=1000&hidden_size=32&num_attention_heads=2&num_key_value_heads=2"
         "&num_hidden_layers=1&intermediate_size=64",
         "vocab_size 1000 is not above the phi3 config's pad_token_id 32000 (the embedding's "
         "padding row); give a pad_token_id below 1000 too"),
        ("hf:bart?task=sequence-classification", "bart is an encoder-decoder, and its sequence "
         "classifier needs decoder inputs and <eos> tokens, which a batch of token ids does not "
         "give: hf: trains it as task=seq2seq, the default"),
        ("hf:distilbert?task=causal-lm", "distilbert has no causal-lm model in transformers: "
         "hf: trains it as task=sequence-classification"),
    ],
)  # fmt: skip
def test_a_bad_hugging_face_name_is_one_line(name: str, said: str) -> None:
    assert said in one_line(name, user.describe)


T5 = "hf:t5?d_model=32&d_ff=64&d_kv=8&num_heads=4&num_layers=1&vocab_size=300&seq_len=16"


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("&task=causal-lm", "t5 has no causal-lm model in transformers: hf: trains it as "
         "task=seq2seq"),
        ("&task=sequence-classification", "t5 is an encoder-decoder, and its sequence "
         "classifier needs decoder inputs and <eos> tokens, which a batch of token ids does not "
         "give: hf: trains it as task=seq2seq, the default"),
    ],
)  # fmt: skip
def test_t5_trains_as_seq2seq_and_every_other_task_points_there(query: str, said: str) -> None:
    """t5 was refused whatever was asked (no causal-LM model, a classifier that needs decoder
    inputs); it trains as seq2seq now (test_zoo_seq2seq.py), and each task it has no model
    for names that one, never another refusal."""
    assert user.source(T5)["task"] == "seq2seq"
    assert one_line(T5 + query, user.describe).endswith(said)


def test_a_size_whose_default_is_0_may_be_0() -> None:
    """deberta's type_vocab_size is 0 by default (no token types): 0 is no size refused."""
    name = (
        "hf:deberta?num_hidden_layers=1&hidden_size=32&num_attention_heads=2"
        "&intermediate_size=64&vocab_size=300&type_vocab_size=0&seq_len=16&samples=20"
    )
    assert user.describe(name)["params"] > 0


def test_an_unknown_model_type_names_valid_ones() -> None:
    said = one_line("hf:nosuchmodel", user.describe)
    assert "e.g. gpt2, llama" in said and "types in transformers" in said
