"""The Hugging Face model benchmarks/hf_vs_loop.py trains: GPT-2 as transformers returns it
(a ModelOutput, Conv1D projections), handed to mpbench as a UserWorkload with no wrapper.
Sized so that a CPU step takes tens of milliseconds: 2 blocks of width 128, 64 tokens."""

from __future__ import annotations

import numpy as np

from mpbench.workloads import UserWorkload

# 256 training sequences: 32 steps an epoch, so one epoch holds the benchmark's steps (mpbench
# trains at most --epochs epochs: fewer steps than asked would time earlier steps than the loop).
TOKENS, VOCAB, BATCH, SEQUENCES = 64, 256, 8, 320


def lm_data(seed: int):
    """Token ids of a fixed order-1 chain (learnable), inputs and next tokens."""
    rng = np.random.default_rng(seed)
    follow = np.random.default_rng(0).integers(0, VOCAB, size=(VOCAB, 4))
    tokens = np.empty((SEQUENCES, TOKENS + 1), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, VOCAB, size=SEQUENCES)
    for t in range(1, TOKENS + 1):
        tokens[:, t] = follow[tokens[:, t - 1], rng.integers(0, 4, size=SEQUENCES)]
    train = SEQUENCES * 4 // 5
    x, y = tokens[:, :-1], tokens[:, 1:]
    return x[:train], y[:train], x[train:], y[train:]


def token_loss(output, targets):
    import torch.nn.functional as F

    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))


def gpt2(device):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB, n_positions=TOKENS, n_embd=128, n_layer=2, n_head=4, use_cache=False
    )
    model = GPT2LMHeadModel(config).to(device)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), token_loss


GPT2 = UserWorkload(name="hf_gpt2", data=lm_data, torch=gpt2, batch_size=BATCH, epochs=1)
