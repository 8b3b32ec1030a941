"""Encoder-decoders by name (`hf:t5`, `hf:bart`, `hf:mbart`, `hf:pegasus`, `hf:marian`, ...):
task `seq2seq`, transformers' `AutoModelForSeq2SeqLM` trained as it is for translation.

The data is a synthetic translation: the source is token ids of the zoo's Markov chain
(data.py), the target each source token's fixed counterpart (one permutation of the ids for
every seed) and the config's <eos>, so that a model reading its source through
cross-attention predicts every target token and accuracy rises far above chance. `x` is the
two inputs by keyword (`UserWorkload` data may be a dict: workloads/inputs.py): `input_ids`
(the source) and `decoder_input_ids`, the target shifted right by the model's own rule
(`prepare_decoder_input_ids_from_labels`: T5's `_shift_right`, BART's `shift_tokens_right`
with `decoder_start_token_id`, mBART's wrapping of the last token), which is what
transformers does with `labels` in training; `y` is the target. The loss is the token
cross-entropy over the target, labels of -100 ignored as transformers' own loss ignores them
(the targets are never padded: every sequence is `seq_len` long).
"""

from __future__ import annotations

import copy
import inspect
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from mpbench.workloads.zoo import ZooName
from mpbench.workloads.zoo.data import markov_tokens

SEQ2SEQ = "seq2seq"
AUTO_CLASS = "AutoModelForSeq2SeqLM"
MAPPING = "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"
SOURCE, DECODER_INPUT = "input_ids", "decoder_input_ids"  # the model's keyword arguments
IGNORE_INDEX = -100  # transformers' label for "no target", torch cross_entropy's default
COUNTERPART_SEED = 0x7A25  # each source id's counterpart in the target: one for every seed


def is_text_seq2seq(default_config: Any) -> bool:
    """Whether a type with a seq2seq model is an encoder-decoder of text (t5, bart, ...), not
    a speech or audio model listed under the same auto class (qwen2_audio, voxtral), which
    takes other inputs than token ids."""
    return bool(getattr(default_config, "is_encoder_decoder", False))


def prepare_config(name: ZooName, config: Any, model_class: Any, vocab: int) -> None:
    """The configuration made one a seq2seq step can train: a decoder start id where the
    model shifts its labels with T5's `_shift_right` and the configuration has none
    (transformers 5's T5Config keeps no `decoder_start_token_id`; T5's own configurations set
    it to the pad id, as its `_shift_right` error says); InvalidInput where <eos> or the
    decoder start is no id of the vocabulary (an embedding lookup past its rows)."""
    if getattr(config, "decoder_start_token_id", None) is None and hasattr(
        model_class, "_shift_right"
    ):
        config.decoder_start_token_id = config.pad_token_id
    for key in ("eos_token_id", "decoder_start_token_id"):
        value = _one_id(getattr(config, key, None))
        if value is not None and not 0 <= value < vocab:
            raise name.invalid(
                f"{key} {value} is no id of the vocabulary (vocab_size {vocab}): a seq2seq "
                f"target ends in <eos> and the decoder starts from its start id; give a "
                f"{key} below {vocab}, or a larger vocab_size"
            )


def eos_of(config: Any) -> int | None:
    """The id every target ends in (the first where the configuration lists several)."""
    return _one_id(getattr(config, "eos_token_id", None))


def _one_id(value: Any) -> int | None:
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def translation(
    samples: int, seq_len: int, ids: np.ndarray, seed: int, eos: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """(source, target), int64 (samples, seq_len) each: the source from the Markov chain; the
    target each source token's counterpart (a fixed permutation of `ids`), its last position
    <eos> (where there is one) as a real target ends."""
    source = markov_tokens(samples, seq_len, ids, seed)
    counterpart = ids[np.random.default_rng(COUNTERPART_SEED).permutation(len(ids))]
    target = counterpart[np.searchsorted(ids, source)]
    if eos is not None:
        target[:, -1] = eos
    return source, target


def shift_rule(model: Any) -> Callable[[Any], Any] | None:
    """How `model` makes its decoder inputs from labels in training: its own
    `prepare_decoder_input_ids_from_labels`, else its module's `shift_tokens_right` with the
    configuration's pad and decoder start ids (blenderbot, m2m_100 have no method); None
    where transformers has neither."""
    prepare = getattr(model, "prepare_decoder_input_ids_from_labels", None)
    if prepare is not None:
        return lambda labels: prepare(labels=labels)
    shift = getattr(sys.modules.get(type(model).__module__), "shift_tokens_right", None)
    if shift is None:
        return None
    config = model.config
    ids = [config.pad_token_id, getattr(config, "decoder_start_token_id", None)]
    given = ids[: len(inspect.signature(shift).parameters) - 1]
    return lambda labels: shift(labels, *given)


def no_shift_rule(model_class: str) -> str:
    """Why hf: cannot train a seq2seq model that has no rule for its decoder inputs."""
    return (
        f"{model_class} has no rule in transformers for its decoder inputs "
        "(prepare_decoder_input_ids_from_labels or its module's shift_tokens_right): hf: "
        "cannot make them from the targets"
    )


def decoder_inputs(auto: Any, config: Any, build_kwargs: dict[str, Any], labels: Any) -> Any:
    """`labels` shifted right by the model's own rule (shift_rule), the model built on torch's
    meta device (no memory, no weights): the rule reads its configuration only."""
    import torch

    with torch.device("meta"):
        model = auto.from_config(copy.deepcopy(config), **build_kwargs)
    rule = shift_rule(model)
    if rule is None:
        raise TypeError(no_shift_rule(type(model).__name__))
    return rule(torch.from_numpy(labels)).numpy()


def data(
    samples: int,
    test: int,
    seq_len: int,
    ids: np.ndarray,
    seed: int,
    auto: Any,
    config: Any,
    build_kwargs: dict[str, Any],
) -> tuple[Any, ...]:
    """(x_train, y_train, x_test, y_test) of `samples` and `test` sequences: x the source and
    the decoder inputs by keyword (the targets shifted by the model's rule: decoder_inputs),
    y the target."""
    source, target = translation(samples + test, seq_len, ids, seed, eos_of(config))
    decoder = decoder_inputs(auto, config, build_kwargs, target).astype(np.int64)
    train, held = slice(None, samples), slice(samples, None)
    return (
        {SOURCE: source[train], DECODER_INPUT: decoder[train]},
        target[train],
        {SOURCE: source[held], DECODER_INPUT: decoder[held]},
        target[held],
    )


def loss(logits: Any, y: Any) -> Any:
    """The token cross-entropy over the target (the float32 logits, as mpbench gives them),
    labels of -100 ignored as in transformers' own seq2seq loss."""
    from torch.nn.functional import cross_entropy

    flat = logits.reshape(-1, logits.shape[-1])
    return cross_entropy(flat, y.reshape(-1), ignore_index=IGNORE_INDEX)


# What the record's `data` adds for a seq2seq model, after the source's chain.
RECORDED = (
    "; target: each source id's fixed counterpart, its last position <eos>; decoder inputs: "
    "the target shifted right by the model's own rule (prepare_decoder_input_ids_from_labels, "
    "or its module's shift_tokens_right)"
)


def about(ids: np.ndarray, seq_len: int, eos: int | None) -> str:
    """The data, in the words the workload's description uses."""
    ending = f" and <eos> ({eos})" if eos is not None else ""
    return (
        f"synthetic translation: source an order-1 Markov chain over {len(ids)} ids, target "
        f"each source token's fixed counterpart{ending}, decoder inputs the target shifted "
        f"right; seq_len {seq_len}"
    )
