"""Apply a policy to PyTorch and read the effective state back (DESIGN.md §2).

TF32 is set through the fp32_precision API where torch has it (2.9+), else the legacy
allow_tf32 flags — never both in one process, which torch rejects. The read-back reads only
the API that was written: once `torch.backends.cuda.matmul.fp32_precision` has been set, the
legacy getter `torch.get_float32_matmul_precision()` raises "PyTorch is checking the matmul
precision without a specific backend name" (a TORCH_CHECK in ATen's Context, see
docs/source/notes/cuda.rst "TensorFloat-32 (TF32) on Ampere (and later) devices"; it fires on
CPU builds too, which is how tests/backends/test_torch_precision.py reproduces it).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from mpbench.policies import Policy

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class TorchPrecision:
    device_type: str  # "cuda", "cpu", "mps"
    autocast_dtype: torch.dtype | None  # None: no autocast (float32 / tf32)
    scaler: Any  # torch.amp.GradScaler, or None without loss scaling
    static_scale: float | None = None  # --loss-scale N: the scaler's scale never changes

    def autocast(self) -> contextlib.AbstractContextManager:
        # No autocast at all when the policy has none: torch.autocast("mps", enabled=False)
        # raises "unsupported autocast device_type" on torch versions without MPS autocast
        # before it looks at `enabled` (desk review defect 11).
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)


def _new_tf32_api() -> bool:
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def set_tf32(enabled: bool) -> None:
    if _new_tf32_api():
        value = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = value
        torch.backends.cudnn.conv.fp32_precision = value
        torch.backends.cudnn.rnn.fp32_precision = value
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def read_tf32() -> dict[str, Any]:
    """The flags as torch reports them now, whichever API this torch has."""
    if _new_tf32_api():
        matmul = torch.backends.cuda.matmul.fp32_precision
        conv = torch.backends.cudnn.conv.fp32_precision
        return {
            "tf32_api": "fp32_precision",
            "matmul_fp32_precision": matmul,
            "cudnn_conv_fp32_precision": conv,
            "tf32_enabled": matmul == "tf32" or conv == "tf32",
        }
    matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    return {
        "tf32_api": "allow_tf32",
        "matmul_allow_tf32": matmul,
        "cudnn_allow_tf32": conv,
        "tf32_enabled": bool(matmul or conv),
        # Safe here: only the legacy API was written in this process.
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def apply_policy(
    policy: Policy, device: torch.device, loss_scale: float | None = None
) -> TorchPrecision:
    """`loss_scale`: a static scale for policies with loss scaling; None: dynamic."""
    set_tf32(policy.tf32)
    # Full batches only, so shapes never change: let cuDNN autotune its convolution
    # algorithms, as TensorFlow does by default (TF_CUDNN_USE_AUTOTUNE), so torch-vs-TF CNN
    # times compare autotuned kernels on both sides (desk review defect 7).
    torch.backends.cudnn.benchmark = device.type == "cuda"
    autocast_dtype = _DTYPES.get(policy.compute_dtype)
    if not policy.loss_scaling:
        return TorchPrecision(device.type, autocast_dtype, None)
    if loss_scale is None:
        return TorchPrecision(device.type, autocast_dtype, _grad_scaler(device.type))
    # torch has no static GradScaler: growth_factor=1.0 is refused ("must be > 1.0"). A
    # scaler that never grows (growth_interval 2**31-1) and whose update() is handed the
    # scale back (steps.py) keeps it constant while still skipping non-finite steps.
    scaler = _grad_scaler(device.type, init_scale=loss_scale, growth_interval=2**31 - 1)
    return TorchPrecision(device.type, autocast_dtype, scaler, static_scale=loss_scale)


def _grad_scaler(device_type: str, **settings: Any) -> Any:
    # torch.amp.GradScaler(device) arrived in torch 2.3; 2.2 only has the per-device classes.
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type, **settings)
    if device_type == "cuda":
        return torch.cuda.amp.GradScaler(**settings)
    return torch.cpu.amp.GradScaler(**settings)


def read_autocast(device_type: str) -> dict[str, Any]:
    """Call inside the autocast context: what torch will actually do with matmuls there."""
    try:
        enabled = torch.is_autocast_enabled(device_type)
        dtype = torch.get_autocast_dtype(device_type) if enabled else None
    except TypeError:  # torch < 2.4: per-device getters only
        cpu = device_type == "cpu"
        enabled = torch.is_autocast_cpu_enabled() if cpu else torch.is_autocast_enabled()
        getter = torch.get_autocast_cpu_dtype if cpu else torch.get_autocast_gpu_dtype
        dtype = getter() if enabled else None
    return {
        "autocast_enabled": enabled,
        "autocast_dtype": str(dtype).replace("torch.", "") if dtype is not None else None,
    }
