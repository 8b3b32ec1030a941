"""Build a workload spec as a torch module, initialised like Keras (Glorot-uniform, zero bias)
so that both frameworks start from the same kind of model; the language model as its spec
says (N(0, 0.02) weights, zero biases)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mpbench.workloads import Conv, Dense, Flatten, LanguageModel, LMShape, MaxPool, Workload


def build_model(
    workload: Workload | LanguageModel, units: int | None, **sizes: int | None
) -> nn.Module:
    """The workload's model; `sizes` (heads, layers, seq_len) for a language model."""
    if workload.kind == "language_model":
        return TransformerLM(workload, workload.shape(units, **sizes))
    return _classifier(workload, units)


def _classifier(workload: Workload, units: int | None) -> nn.Sequential:
    layers: list[nn.Module] = []
    channels = workload.input_shape[-1]
    features = workload.input_shape[-1]
    spatial = workload.input_shape[0] if len(workload.input_shape) == 3 else None
    for layer in workload.layers(units):
        if isinstance(layer, Conv):
            layers.append(nn.Conv2d(channels, layer.filters, layer.kernel))
            layers.append(nn.ReLU())
            channels = layer.filters
            spatial = spatial - layer.kernel + 1
        elif isinstance(layer, MaxPool):
            layers.append(nn.MaxPool2d(layer.size))
            spatial = spatial // layer.size
        elif isinstance(layer, Flatten):
            layers.append(nn.Flatten())
            features = channels * spatial * spatial
        elif isinstance(layer, Dense):
            layers.append(nn.Linear(features, layer.units))
            if layer.activation == "relu":
                layers.append(nn.ReLU())
            features = layer.units
    model = nn.Sequential(*layers)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)
    return model


class Block(nn.Module):
    """x += Attn(LN(x)); x += W2·GELU(W1·LN(x)). The q, k, v projections are one Linear
    (d -> 3d, the same weights and biases as Keras' three (d, h, d/h) kernels), attention is
    F.scaled_dot_product_attention with is_causal (a fused kernel where torch has one)."""

    def __init__(self, spec: LanguageModel, shape: LMShape) -> None:
        super().__init__()
        d, eps = shape.d_model, spec.layer_norm_epsilon
        self.heads = shape.heads
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.fc_1 = nn.Linear(d, spec.mlp_ratio * d)
        self.fc_2 = nn.Linear(spec.mlp_ratio * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.fc_2(F.gelu(self.fc_1(self.ln_2(x))))


class TransformerLM(nn.Module):
    # The embedding whose weight the head multiplies by (F.linear, no nn.Linear): fp8's plan
    # names it so (backends/torch/fp8_layers.py).
    functional_head_of = "tokens"

    """Token and position embeddings, the blocks, a final LayerNorm and a head tied to the
    token embedding: (B, T) int tokens -> (B, T, V) logits. Under autocast the embeddings
    come out float32, so the residual stream (and every LayerNorm's input) stays float32
    while the linears and attention run in the autocast dtype."""

    def __init__(self, spec: LanguageModel, shape: LMShape) -> None:
        super().__init__()
        self.shape = shape
        self.tokens = nn.Embedding(shape.vocab, shape.d_model)
        self.positions = nn.Embedding(shape.seq_len, shape.d_model)
        self.blocks = nn.ModuleList(Block(spec, shape) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(shape.d_model, eps=spec.layer_norm_epsilon)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=spec.init_std)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        where = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(where)
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.tokens.weight)  # the tied head, no bias


def build_optimizer(workload: Workload | LanguageModel, params) -> torch.optim.Optimizer:
    """The spec's hyper-parameters, spelled the torch way (Keras `rho` is torch `alpha`)."""
    spec = workload.optimizer
    extra = spec.params
    if spec.name == "rmsprop":
        return torch.optim.RMSprop(
            params, lr=spec.learning_rate, alpha=extra["rho"], eps=extra["epsilon"]
        )
    return torch.optim.Adam(
        params,
        lr=spec.learning_rate,
        betas=(extra["beta_1"], extra["beta_2"]),
        eps=extra["epsilon"],
    )
