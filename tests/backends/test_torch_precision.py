"""The torch policy flags, their read-back and autocast, run for real on this CPU build.

TF32 flags exist on CPU builds too (they are process state in ATen's Context), so the
read-back bug of desk review defect 1 reproduces here without a GPU.
"""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from mpbench.backends.torch import precision  # noqa: E402
from mpbench.policies import resolve  # noqa: E402

NEW_API = hasattr(torch.backends.cuda.matmul, "fp32_precision")


@pytest.fixture(autouse=True)
def restore_float32():
    yield
    precision.set_tf32(False)


def test_tf32_policy_flags_are_set_and_read_back():
    state = precision.apply_policy(resolve("tf32"), torch.device("cpu"))
    assert state.autocast_dtype is None and state.scaler is None
    read = precision.read_tf32()
    assert read["tf32_enabled"] is True
    if NEW_API:
        assert read["matmul_fp32_precision"] == "tf32"
        assert read["cudnn_conv_fp32_precision"] == "tf32"
        assert "float32_matmul_precision" not in read  # the legacy getter is never called
    else:
        assert read["matmul_allow_tf32"] is True


def test_float32_after_tf32_in_one_process_turns_tf32_off():
    precision.apply_policy(resolve("tf32"), torch.device("cpu"))
    precision.apply_policy(resolve("float32"), torch.device("cpu"))
    read = precision.read_tf32()
    assert read["tf32_enabled"] is False
    if NEW_API:
        assert read["matmul_fp32_precision"] == "ieee"
        assert read["cudnn_conv_fp32_precision"] == "ieee"


@pytest.mark.skipif(not NEW_API, reason="torch < 2.9 has only the legacy TF32 API")
def test_the_legacy_getter_raises_once_the_new_api_alone_was_written():
    """Why set_tf32 writes through the legacy setters too (test_torch_tf32_flags.py)."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    with pytest.raises(RuntimeError, match="without a specific backend name"):
        torch.get_float32_matmul_precision()


def test_no_autocast_context_is_built_without_an_autocast_dtype():
    # torch.autocast("mps", enabled=False) raises on torch versions without MPS autocast;
    # a policy without autocast must not construct one at all (defect 11).
    for device_type in ("cpu", "cuda", "mps"):
        context = precision.TorchPrecision(device_type, None, None).autocast()
        assert isinstance(context, contextlib.nullcontext)
        with context:
            pass


def test_bf16_autocast_is_read_back_inside_the_context():
    state = precision.apply_policy(resolve("bf16"), torch.device("cpu"))
    with state.autocast():
        read = precision.read_autocast("cpu")
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert read == {"autocast_enabled": True, "autocast_dtype": "bfloat16"}
    assert out.dtype == torch.bfloat16


def test_fp16_policy_builds_a_dynamic_grad_scaler():
    state = precision.apply_policy(resolve("fp16"), torch.device("cpu"))
    assert state.autocast_dtype is torch.float16
    assert state.scaler is not None and state.scaler.is_enabled()


def test_cudnn_autotuning_only_on_cuda():
    precision.apply_policy(resolve("float32"), torch.device("cpu"))
    assert torch.backends.cudnn.benchmark is False
    precision.apply_policy(resolve("float32"), torch.device("cuda"))
    try:
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = False
