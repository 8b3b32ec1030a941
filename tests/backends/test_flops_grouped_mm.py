"""Every matmul counted, once (issue 56, item 1): FlopCounterMode scores aten._grouped_mm 0, and
transformers 5 runs mixture-of-experts layers through it, so a tiny Mixtral's FLOPs were a
third of the truth. mpbench adds the formula; these tests hold it to the same products done
one group at a time with aten.mm (which torch's own formula counts), and a whole MoE model to
its eager experts (the same FLOPs, routed through mm)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from mpbench.backends.torch.flops import counted, grouped_mm_flop  # noqa: E402

OFFS = torch.tensor([3, 7, 12], dtype=torch.int32)  # three groups of 3, 4 and 5


def _mm_flops(run) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def _rows(a, b, g, lo, hi):  # 2-D x 3-D: tokens sorted by expert, one weight per expert
    return a[lo:hi] @ b[g]


def _contraction(a, b, g, lo, hi):  # 2-D x 2-D: the weight gradient, groups along K
    return a[:, lo:hi] @ b[lo:hi]


def _columns(a, b, g, lo, hi):  # 3-D x 2-D: groups along the output's columns
    return a[g] @ b[:, lo:hi]


def _batched(a, b, g, lo, hi):  # 3-D x 3-D
    return a[g] @ b[g]


@pytest.mark.parametrize(
    ("a", "b", "offs", "per_group", "join"),
    [
        ((12, 8), (3, 8, 4), OFFS, _rows, lambda parts: torch.cat(parts)),
        ((8, 12), (12, 4), OFFS, _contraction, torch.stack),
        ((3, 4, 8), (8, 12), torch.tensor([4, 8, 12], dtype=torch.int32), _columns,
         lambda parts: torch.cat(parts, dim=1)),
        ((3, 4, 8), (3, 8, 4), None, _batched, torch.stack),
    ],
)  # fmt: skip
def test_the_formula_equals_the_groups_done_one_by_one(a, b, offs, per_group, join) -> None:
    x, w = torch.randn(*a), torch.randn(*b)
    grouped = torch._grouped_mm(x, w, offs=offs)
    bounds = [0, *offs.tolist()] if offs is not None else list(range(a[0] + 1))
    parts = []

    def groups() -> None:
        for g in range(len(bounds) - 1):
            parts.append(per_group(x, w, g, bounds[g], bounds[g + 1]))

    assert grouped_mm_flop(a, b) == _mm_flops(groups)
    # ... and the operation is the one described: the same products
    assert torch.allclose(grouped, join(parts), atol=1e-5)


def test_torch_alone_scores_grouped_mm_zero() -> None:
    """Why the formula is added: if a torch release counts it, this fails and it can go."""
    x, w = torch.randn(12, 8), torch.randn(3, 8, 4)
    assert _mm_flops(lambda: torch._grouped_mm(x, w, offs=OFFS)) == 0


def _tiny_mixtral(experts: str):
    transformers = pytest.importorskip("transformers")
    config = transformers.MixtralConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, experts_implementation=experts)


def test_an_moe_counts_the_same_through_grouped_mm_as_through_eager_experts() -> None:
    tokens = torch.randint(0, 128, (2, 16))
    counts = {}
    for experts in ("grouped_mm", "eager"):
        model = _tiny_mixtral(experts)
        counts[experts] = counted(model, lambda m=model: m(tokens, labels=tokens).loss.backward())
    assert counts["grouped_mm"].total == counts["eager"].total
    assert counts["grouped_mm"].added == ["aten._grouped_mm"]
    assert "aten._grouped_mm by mpbench's formula" in counts["grouped_mm"].source
    assert counts["eager"].added == [] and "mpbench's formula" not in counts["eager"].source
    # The experts are most of this model's work: without the formula the count falls short.
    model = _tiny_mixtral("grouped_mm")
    plain = _mm_flops(lambda: model(tokens, labels=tokens).loss.backward())
    assert plain < 0.5 * counts["grouped_mm"].total


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("groups", [1, 2, 8])
def test_a_grouped_convolution_counts_three_times_its_forward(groups: int, transposed: bool):
    """torch 2.13 scores a grouped convolution's weight gradient `groups` times its work (a
    depthwise one: once per channel too many); mpbench's formula divides it back. Forward,
    input gradient and weight gradient are each one convolution of the forward's size."""
    kind = torch.nn.ConvTranspose2d if transposed else torch.nn.Conv2d
    conv = kind(8, 16, 3, groups=groups)
    x = torch.randn(4, 8, 10, 10, requires_grad=True)
    out = 8 if not transposed else 10  # the output's side (3x3, no padding); the input's for
    spatial = out * out  # a transposed one, which multiplies each input point by the kernel
    forward = 2 * 4 * spatial * 9 * 16 * 8 // groups
    count = counted(conv, lambda: conv(x).sum().backward())
    assert count.total == 3 * forward
    assert "aten.convolution_backward" in count.added
    if groups > 1:  # what torch alone says
        assert _mm_flops(lambda: conv(x).sum().backward()) == forward * (2 + groups)
