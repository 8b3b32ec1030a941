"""Models as users hand them to mpbench, as `UserWorkload`s the tests name by
`user_models:NAME` (tests/ is on sys.path): Hugging Face GPT-2 and BERT exactly as
transformers returns them (a ModelOutput, Conv1D projections in GPT-2), a model returning a
dict or a tuple, one returning nothing usable, and a small BatchNorm CNN whose images come
NHWC. All tiny: a cell of each trains in a second or two on one CPU thread.

And the mistakes users make, each refused before the first cell (runner/user_check.py): a
model returning one number for the batch, data() returning a list of ints, x and y of
different lengths; and float64 features, which mpbench casts to float32 and says so."""

from __future__ import annotations

import numpy as np

from mpbench.workloads import UserWorkload

TOKENS, VOCAB, BATCH = 16, 128, 8
GPT2_SIZES = dict(n_layer=2, n_embd=64, n_head=2)


def _tokens(seed: int, width: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, size=(96, width)).astype(np.int64)


def lm_data(seed: int):
    x = _tokens(seed, TOKENS + 1)
    return x[:64, :-1], x[:64, 1:], x[64:, :-1], x[64:, 1:]


def classes_data(seed: int):
    x = _tokens(seed, TOKENS)
    y = (x[:, 0] % 2).astype(np.int64)
    return x[:64], y[:64], x[64:], y[64:]


def token_loss(output, targets):
    import torch.nn.functional as F

    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))


def gpt2(device):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=VOCAB, n_positions=64, **GPT2_SIZES)
    model = GPT2LMHeadModel(config).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), token_loss


def bert(device):
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=256,
        max_position_embeddings=64,
    )
    model = BertForSequenceClassification(config).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), torch.nn.functional.cross_entropy


class _Returns:
    """A small classifier whose forward returns `kind` around its logits."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(self, device):
        import torch
        from torch import nn

        kind = self.kind

        class Model(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.embed = nn.Embedding(VOCAB, 16)
                self.head = nn.Linear(16, 2)

            def forward(self, tokens):
                logits = self.head(self.embed(tokens).mean(dim=1))
                if kind == "dict":
                    return {"hidden": logits.detach(), "scores": logits}
                if kind == "tuple":
                    return (logits, logits.detach().sum())
                return "not a tensor"

        model = Model().to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.functional.cross_entropy


def images_nhwc(seed: int):
    rng = np.random.default_rng(seed)
    x = rng.random((80, 8, 8, 3), dtype=np.float32)
    y = (x[..., 0].mean(axis=(1, 2)) > 0.5).astype(np.int64)
    return x[:64], y[:64], x[64:], y[64:]


def bn_cnn(device):
    import torch
    from torch import nn

    # The layout check: a (N, 8, 8, 3) NHWC batch fed as it is would fail in Conv2d(3, ...).
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 2),
    ).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy


GPT2 = UserWorkload(name="gpt2", data=lm_data, torch=gpt2, batch_size=BATCH)
BERT = UserWorkload(name="bert", data=classes_data, torch=bert, batch_size=BATCH)
DICT = UserWorkload(
    name="dict", data=classes_data, torch=_Returns("dict"), batch_size=BATCH, output="scores"
)
TUPLE = UserWorkload(name="tuple", data=classes_data, torch=_Returns("tuple"), batch_size=BATCH)
NOT_A_TENSOR = UserWorkload(name="str", data=classes_data, torch=_Returns("str"), batch_size=BATCH)
BN_CNN = UserWorkload(
    name="bn_cnn", data=images_nhwc, torch=bn_cnn, batch_size=BATCH, layout="NHWC"
)


def gpt2_forward_flops(batch: int) -> int:
    """The analytic transformer formula (docs/workloads.md) for GPT2_SIZES: per sequence of T
    tokens, L·(24·T·d² + 4·T²·d) + 2·T·d·V, the whole T×T attention square counted."""
    layers, d, t = GPT2_SIZES["n_layer"], GPT2_SIZES["n_embd"], TOKENS
    return batch * (layers * (24 * t * d * d + 4 * t * t * d) + 2 * t * d * VOCAB)


# --- mistakes, refused before the first cell -------------------------------------------------

FEATURES = 8


def _features(seed: int, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((80, FEATURES)).astype(dtype)
    y = (x[:, 0] > 0).astype(np.int64)
    return x[:64], y[:64], x[64:], y[64:]


class _Mlp:
    """A two-layer classifier of FEATURES floats; `summed`: its forward returns the batch's
    logits summed into one number (a 0-d tensor), as a model returning its own scalar does."""

    def __init__(self, summed: bool = False) -> None:
        self.summed = summed

    def __call__(self, device):
        import torch
        from torch import nn

        summed = self.summed

        class Model(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.layers = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, 2))

            def forward(self, x):
                logits = self.layers(x)
                return logits.sum() if summed else logits

        model = Model().to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy


def _short_y(seed: int):
    x, y, x_test, y_test = _features(seed)
    return x, y[:50], x_test, y_test


ONE_NUMBER = UserWorkload(name="one_number", data=_features, torch=_Mlp(summed=True), batch_size=8)
INTS = UserWorkload(name="ints", data=lambda seed: [1, 2, 3, 4], torch=_Mlp(), batch_size=8)
SHORT_Y = UserWorkload(name="short_y", data=_short_y, torch=_Mlp(), batch_size=8)
FLOAT64 = UserWorkload(
    name="float64", data=lambda seed: _features(seed, np.float64), torch=_Mlp(), batch_size=8
)


# A tiny Mixtral by name (2 layers, 4 experts, top-2): the MoE tests' model
# (tests/backends/test_moe_precision.py, test_moe_policy.py).
TINY_MIXTRAL = (
    "hf:mixtral?hidden_size=64&intermediate_size=128&num_hidden_layers=2&num_attention_heads=4"
    "&num_key_value_heads=2&num_local_experts=4&num_experts_per_tok=2&vocab_size=128"
    "&max_position_embeddings=64&seq_len=16&samples=64"
)
