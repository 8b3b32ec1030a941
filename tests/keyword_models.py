"""Models that take several inputs, as users hand them to mpbench: `UserWorkload`s whose
x is a dict of the model's keyword arguments (docs/workloads.md, "A model of several
inputs"), named by `keyword_models:NAME` (tests/ is on sys.path).

- `T5`: a raw transformers `T5ForConditionalGeneration`, x = {"input_ids": the source,
  "decoder_input_ids": the target shifted right}, y the target; source and target of
  different lengths (16 and 8 tokens), so that the FLOP count tells the cross-attention's
  T_target × T_source from a self-attention's square. data() returns `(x, y)`: mpbench holds
  out the last fifth, the same rows of each input.
- `KERAS_TWO_INPUTS`: a Keras model of two named inputs: its cells are skipped, with the
  reason (mpbench feeds a dict x to torch models only).
- The mistakes, refused before the first cell: inputs of different lengths, a dict y,
  x_train and x_test naming different inputs, a key that is no keyword, and a model of two
  inputs returning one number for the batch.
"""

from __future__ import annotations

import numpy as np

from mpbench.workloads import UserWorkload

SOURCE_TOKENS, TARGET_TOKENS, VOCAB, BATCH = 16, 8, 128, 8
SAMPLES = 80  # 64 to train on, the last 16 held out
PAD, EOS = 0, 1  # T5's: the pad id is also its decoder start
T5_SIZES = dict(d_model=32, d_ff=64, d_kv=8, num_heads=4, num_layers=2, num_decoder_layers=1)


def translation(seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Source ids, and a target that is a function of them (each of the first 7 source ids
    mapped, then <eos>); the decoder's input is the target shifted right after the start id,
    as T5's `_shift_right` makes it."""
    source = np.random.default_rng(seed).integers(2, VOCAB, size=(SAMPLES, SOURCE_TOKENS))
    mapped = (source[:, : TARGET_TOKENS - 1] * 7) % (VOCAB - 2) + 2
    target = np.concatenate([mapped, np.full((SAMPLES, 1), EOS)], axis=1)
    decoder = np.concatenate([np.full((SAMPLES, 1), PAD), target[:, :-1]], axis=1)
    return {"input_ids": source, "decoder_input_ids": decoder}, target


def token_loss(output, targets):
    import torch.nn.functional as F

    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))


def t5(device):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=VOCAB, decoder_start_token_id=PAD, **T5_SIZES)
    model = T5ForConditionalGeneration(config).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), token_loss


T5 = UserWorkload(name="t5", data=translation, torch=t5, batch_size=BATCH)


def encoder_decoder_forward_flops(
    batch: int,
    source: int,
    target: int,
    d: int,
    inner: int,
    ff: int,
    encoder_layers: int,
    decoder_layers: int,
    vocab: int,
) -> int:
    """An encoder-decoder transformer's forward matmul FLOPs (2 per multiply-add), the whole
    attention squares counted: per encoder layer the q, k, v, o projections (d → inner and
    back), Q·Kᵀ and A·V (2·T²·inner each) and a two-matrix FFN (d → ff → d); per decoder
    layer the same self-attention and FFN on the target, and a cross-attention whose q and o
    see the target, k and v the source, with T_target × T_source scores; the LM head
    (d → vocab) on the target. No gated FFN, no bias counted (adds, not matmuls)."""
    encoder = 8 * source * d * inner + 4 * source**2 * inner + 4 * source * d * ff
    self_attention = 8 * target * d * inner + 4 * target**2 * inner
    cross = 4 * target * d * inner + 4 * source * d * inner + 4 * target * source * inner
    decoder = self_attention + cross + 4 * target * d * ff
    head = 2 * target * d * vocab
    return batch * (encoder_layers * encoder + decoder_layers * decoder + head)


def t5_forward_flops(batch: int) -> int:
    sizes = T5_SIZES
    return encoder_decoder_forward_flops(
        batch, SOURCE_TOKENS, TARGET_TOKENS, sizes["d_model"], sizes["d_kv"] * sizes["num_heads"],
        sizes["d_ff"], sizes["num_layers"], sizes["num_decoder_layers"], VOCAB,
    )  # fmt: skip


# --- Keras: a dict x, skipped with the reason ----------------------------------------------


def _keras_two_inputs():
    import keras

    left, right = keras.Input((4,), name="left"), keras.Input((4,), name="right")
    joined = keras.layers.Concatenate()([left, right])
    model = keras.Model({"left": left, "right": right}, keras.layers.Dense(2)(joined))
    return model, keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy"


def _two_features(seed: int):
    rng = np.random.default_rng(seed)
    left, right = rng.standard_normal((2, 40, 4)).astype(np.float32)
    return {"left": left, "right": right}, (left[:, 0] > right[:, 0]).astype(np.int64)


KERAS_TWO_INPUTS = UserWorkload(
    name="two_inputs", data=_two_features, keras=_keras_two_inputs, batch_size=8
)


# --- mistakes, refused before the first cell -------------------------------------------------


def _ragged(seed: int):
    x, y = translation(seed)
    x["decoder_input_ids"] = x["decoder_input_ids"][:50]
    return x, y


def _dict_y(seed: int):
    x, y = translation(seed)
    return x, {"labels": y}


def _other_inputs(seed: int):
    x, y = translation(seed)
    test = {"input_ids": x["input_ids"][64:], "attention_mask": x["input_ids"][64:] > 0}
    return {k: v[:64] for k, v in x.items()}, y[:64], test, y[64:]


def _bad_key(seed: int):
    x, y = translation(seed)
    return {"input ids": x["input_ids"]}, y


RAGGED = UserWorkload(name="ragged", data=_ragged, torch=t5, batch_size=BATCH)
DICT_Y = UserWorkload(name="dict_y", data=_dict_y, torch=t5, batch_size=BATCH)
OTHER_INPUTS = UserWorkload(name="other_inputs", data=_other_inputs, torch=t5, batch_size=BATCH)
BAD_KEY = UserWorkload(name="bad_key", data=_bad_key, torch=t5, batch_size=BATCH)


def _summed(device):
    """A model of two inputs whose forward returns one number for the whole batch."""
    import torch
    from torch import nn

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 4)

        def forward(self, input_ids, decoder_input_ids):
            return (self.embed(input_ids).sum() + self.embed(decoder_input_ids).sum()).float()

    model = Model().to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), token_loss


ONE_NUMBER = UserWorkload(name="one_number", data=translation, torch=_summed, batch_size=BATCH)
