"""Summary dtypes from what ran (issue 56, item 5): `head_dtype` is the forward's last
projection and `linear_dtype` every other one, whatever a model's names or biases. They had
been read from the op alone (addmm "linear", mm "head"): a llama's bias-free projections all
read as its head and it had no linear_dtype; a phi's head has a bias, and it had no head_dtype."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mpbench.backends.torch.op_dtypes import traced_op_dtypes  # noqa: E402
from mpbench.backends.torch.precision import TorchPrecision  # noqa: E402

CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1),
    "phi": lambda: transformers.PhiConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2),
}  # fmt: skip


class Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).logits


def _loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _trace(model: torch.nn.Module, dtype: torch.dtype | None, x, y=None) -> dict:
    precision = TorchPrecision("cpu", dtype, None)
    return traced_op_dtypes(model, precision, x, x if y is None else y, _loss)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_projection_and_the_head_of_a_language_model(name: str) -> None:
    torch.manual_seed(0)
    model = Logits(transformers.AutoModelForCausalLM.from_config(CONFIGS[name]()))
    tokens = torch.randint(0, 128, (2, 8))
    bf16 = _trace(model, torch.bfloat16, tokens)
    assert bf16["linear_dtype"] == "bfloat16" and bf16["head_dtype"] == "bfloat16"
    fp32 = _trace(model, None, tokens)
    assert fp32["linear_dtype"] == "float32" and fp32["head_dtype"] == "float32"


def test_a_head_kept_in_float32_is_told_apart_from_the_projections() -> None:
    """A model that runs its own head outside autocast: only the head reads float32."""

    class WideHead(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)
            self.head = torch.nn.Linear(16, 5)

        def forward(self, x):
            mixed, _ = self.attention(x, x, x)  # out_proj is called functionally
            with torch.autocast("cpu", enabled=False):
                return self.head(mixed.float())

    x = torch.randn(2, 4, 16)
    state = traced_op_dtypes(WideHead(), TorchPrecision("cpu", torch.bfloat16, None), x,
                             torch.randint(0, 5, (2,)), lambda out, y: out[:, 0].sum())  # fmt: skip
    assert state["linear_dtype"] == "bfloat16"  # the attention's in and out projections
    assert state["head_dtype"] == "float32"
    # 2·B·T·d·n FLOPs each: the head 2·8·16·5 = 1,280 of 19,712 (the in-projection 12,288,
    # the out-projection 4,096, Q·Kᵀ and the weighted sum 2 × 1,024)
    assert state["matmul_float32_places"] == {"head aten.mm": pytest.approx(1280 / 19712, abs=1e-4)}
