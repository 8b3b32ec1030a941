"""The analytic FLOPs per training step against what torch itself counts (FlopCounterMode)."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from mpbench.backends.torch.models import build_model  # noqa: E402
from mpbench.backends.torch.steps import cross_entropy  # noqa: E402
from mpbench.workloads import get_workload  # noqa: E402


def counted_training_flops(workload_name: str, batch: int, units: int | None) -> int:
    """Forward + backward of one step, as torch's dispatcher-level counter sees them."""
    workload = get_workload(workload_name)
    model = build_model(workload, units)
    x = torch.randn(batch, *workload.input_shape)
    if x.dim() == 4:  # the spec is channels-last; torch convolutions take NCHW
        x = x.permute(0, 3, 1, 2).contiguous()
    y = torch.randint(0, workload.num_classes, (batch,))
    with FlopCounterMode(display=False) as counter:
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize(
    ("workload", "batch", "units"),
    [("mnist_dense", 128, 64), ("mnist_dense", 32, 512), ("cifar10_cnn", 8, None)],
)
def test_analytic_flops_match_torch_flop_counter(workload, batch, units):
    analytic = get_workload(workload).flops_per_step(batch, units)
    assert analytic == counted_training_flops(workload, batch, units)


def test_the_first_layer_input_gradient_is_what_3x_forward_overcounts():
    workload = get_workload("mnist_dense")
    forward = workload.forward_flops(128, 64)
    counted = counted_training_flops("mnist_dense", 128, 64)
    assert counted == 3 * forward - 2 * 128 * 784 * 64  # no gradient for the input data


def counted_language_model_flops(batch: int, units: int, **sizes: int) -> tuple[int, int]:
    """(counted with torch's math attention, counted with its default CPU attention)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    workload = get_workload("transformer_lm")
    model = build_model(workload, units, **sizes)
    tokens = torch.randint(0, 256, (batch, sizes["seq_len"]))
    counts = []
    for backends in ([SDPBackend.MATH], None):
        kernel = sdpa_kernel(backends) if backends else contextlib.nullcontext()
        with kernel, FlopCounterMode(display=False) as counter:
            loss = cross_entropy(model(tokens).float(), tokens)
            loss.backward()
        counts.append(counter.get_total_flops())
    return counts[0], counts[1]


@pytest.mark.parametrize(
    ("batch", "units", "heads", "layers", "seq_len"),
    [(4, 128, 4, 2, 128), (3, 32, 2, 1, 16), (2, 48, 3, 3, 40)],
)
def test_language_model_flops_match_the_counter_with_math_attention(
    batch, units, heads, layers, seq_len
):
    """FlopCounterMode counts attention only where SDPA runs as matmuls (the math backend):
    it has no formula for the fused CPU kernel (`_scaled_dot_product_flash_attention_for_cpu`),
    which it counts as 0. With math attention the count is the analytic figure exactly; with
    the fused kernel it falls short by exactly the attention's 3 × 4·T²·d per layer."""
    sizes = {"heads": heads, "layers": layers, "seq_len": seq_len}
    workload = get_workload("transformer_lm")
    analytic = workload.flops_per_step(batch, units, **sizes)
    math_count, fused_count = counted_language_model_flops(batch, units, **sizes)
    assert analytic == math_count
    assert analytic - fused_count == 3 * batch * layers * 4 * seq_len**2 * units
