"""TF32: after any policy, every TF32 getter torch has (the legacy ones torch.compile reads on
some releases, and the fp32_precision ones) answers without raising, and they agree.

The flags are process state in ATen's Context, present on CPU builds too, so this runs here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from mpbench.backends.torch import precision  # noqa: E402
from mpbench.policies import POLICIES  # noqa: E402

NEW_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")

# Every getter, legacy and new, that a compiled or eager torch step may read.
GETTERS: dict[str, Callable[[], Any]] = {
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "get_float32_matmul_precision": torch.get_float32_matmul_precision,
}
if NEW_API:
    GETTERS |= {
        "cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
        "cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
        "cudnn.rnn.fp32_precision": lambda: torch.backends.cudnn.rnn.fp32_precision,
    }


@pytest.fixture(autouse=True)
def restore_float32():
    yield
    precision.set_tf32(False)


def read_all() -> dict[str, Any]:
    values, errors = {}, {}
    for name, getter in GETTERS.items():
        try:
            values[name] = getter()
        except RuntimeError as exc:
            errors[name] = str(exc).split(",")[0]
    assert not errors, errors
    return values


def assert_agree(values: dict[str, Any], tf32: bool) -> None:
    matmul = {
        values["cuda.matmul.allow_tf32"],
        values["get_float32_matmul_precision"] != "highest",
    }
    cudnn = {values["cudnn.allow_tf32"]}
    if NEW_API:
        matmul.add(values["cuda.matmul.fp32_precision"] == "tf32")
        cudnn |= {
            values["cudnn.conv.fp32_precision"] == "tf32",
            values["cudnn.rnn.fp32_precision"] == "tf32",
        }
    assert matmul == {tf32} and cudnn == {tf32}, values


@pytest.mark.parametrize(
    "order", list(itertools.permutations(POLICIES)), ids=lambda order: "-".join(order)
)
def test_every_tf32_getter_agrees_after_every_policy(order):
    for name in order:
        policy = POLICIES[name]
        precision.apply_policy(policy, torch.device("cpu"))
        assert_agree(read_all(), policy.tf32)
        assert precision.read_tf32()["tf32_enabled"] is policy.tf32


@pytest.mark.skipif(not NEW_API, reason="torch < 2.9 has only the legacy TF32 API")
@pytest.mark.parametrize("enabled", [True, False])
def test_set_tf32_repairs_a_state_written_through_the_new_api_alone(enabled):
    """What an earlier mpbench (or another library) leaves: the new matmul flag set, the
    legacy one not, so that torch.get_float32_matmul_precision() raises."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
        torch.get_float32_matmul_precision()
    precision.set_tf32(enabled)
    assert_agree(read_all(), enabled)
