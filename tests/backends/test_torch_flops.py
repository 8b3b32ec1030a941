"""The analytic FLOPs per training step against what torch itself counts (FlopCounterMode)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from mpbench.backends.torch.models import build_model  # noqa: E402
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
