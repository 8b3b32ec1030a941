"""True skip reasons (issue 56, item 5): the fp8 layer plan lists every module whose matrix
weight feeds a GEMM and is not converted, with why, and no other. nn.MultiheadAttention's
out_proj was said to be "not called in the traced forward" though its GEMM runs every step
(the parent multiplies by its weight itself); ViT's embeddings were listed "not nn.Linear"
though their matrices (position embeddings, a class token) feed no matmul."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mpbench.backends.torch.fp8_layers import (  # noqa: E402
    NOT_CALLED,
    layer_plan,
    trace_forward,
)


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(16, 16)
        self.position = torch.nn.Parameter(torch.randn(1, 4, 16))  # added, never multiplied
        self.attention = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.unused = torch.nn.Linear(16, 16)  # built, never called
        self.head = torch.nn.Linear(16, 32)

    def forward(self, x):
        x = self.embed(x) + self.position
        x, _ = self.attention(x, x, x)
        return self.head(x)


def test_each_module_not_converted_says_why_and_none_without_a_gemm_is_listed() -> None:
    model = Attention()
    plan = layer_plan(model, trace_forward(model, torch.randn(2, 4, 16)))
    assert [layer.name for layer in plan.fp8] == ["embed", "head"]
    assert plan.skipped["attention.out_proj"].startswith(
        "its weight is multiplied by its parent attention (MultiheadAttention) directly"
    )
    assert plan.skipped["attention"].startswith("not nn.Linear (MultiheadAttention)")
    assert plan.skipped["unused"] == NOT_CALLED
    assert "" not in plan.skipped  # the model's own position matrix feeds no matmul


def test_vit_embeddings_are_not_a_layer_fp8_passed_by() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(image_size=16, patch_size=8, num_channels=3, hidden_size=32,
                                    num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=64)  # fmt: skip
    model = transformers.ViTModel(config)
    plan = layer_plan(model, trace_forward(model, torch.randn(2, 3, 16, 16)))
    assert "embeddings" not in plan.skipped
    assert plan.skipped["embeddings.patch_embeddings.projection"].startswith("convolution")
    assert len(plan.fp8) == 7  # q, k, v, the attention output, the MLP's two, the pooler
