"""Apply a policy to PyTorch and read the effective state back (docs/architecture.md, "The
precision contract").

TF32 on torch 2.9+ has two views of one setting: the legacy flags
(`torch.backends.cuda.matmul.allow_tf32`, `torch.backends.cudnn.allow_tf32`,
`torch.get_float32_matmul_precision()`) and the fp32_precision API
(`torch.backends.cuda.matmul.fp32_precision`, `torch.backends.cudnn.conv/rnn.fp32_precision`).
A legacy getter raises ("... you have used mix of the legacy and new APIs ...") when the two
disagree, and a write through the new API alone leaves them disagreeing: `allowTF32CuBLAS()`,
`allowTF32CuDNN()` and `float32MatmulPrecision()` TORCH_CHECK that the legacy value matches
the new one (aten/src/ATen/Context.cpp; docs/source/notes/cuda.rst "TensorFloat-32 (TF32) on
Ampere (and later) devices"). mpbench's eager steps read only the new view, but
torch.compile's Inductor and Dynamo call the legacy getters on some releases (GEMM autotuning
calls `torch.get_float32_matmul_precision()` on 2.13). So `set_tf32` writes through the legacy
setters, which on 2.9+ write both views (`setAllowTF32CuBLAS` also sets the cuda matmul
fp32_precision, `setAllowTF32CuDNN` the conv and rnn ones), then states the new-API values
explicitly ("ieee" rather than the "none" a legacy False leaves on conv/rnn). Every getter then
agrees, which tests/backends/test_torch_tf32_flags.py checks on this CPU build (the flags are
process state in ATen's Context on CPU builds too).
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
    """Both TF32 views agree afterwards, whatever mix an earlier write left (module doc)."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    if _new_tf32_api():
        # The same values the legacy setters wrote, with "ieee" in place of their "none":
        # "none" defers to the generic fp32_precision, which something else may have set.
        value = "tf32" if enabled else "ieee"
        torch.backends.cuda.matmul.fp32_precision = value
        torch.backends.cudnn.conv.fp32_precision = value
        torch.backends.cudnn.rnn.fp32_precision = value


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
