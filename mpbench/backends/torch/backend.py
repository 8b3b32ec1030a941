"""Train one cell in PyTorch: preload data on the device, apply the policy, time every step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from mpbench.backends.base import (
    CellSpec,
    Measurements,
    Progress,
    Unsupported,
    check_finite,
    cpu_device_info,
    load_dataset,
    peak_rss_bytes,
    plan_steps,
)
from mpbench.backends.timing import StepTimer
from mpbench.backends.torch.models import build_model, build_optimizer
from mpbench.backends.torch.precision import (
    TorchPrecision,
    apply_policy,
    read_autocast,
    read_tf32,
)
from mpbench.policies import resolve
from mpbench.results.schema import DeviceInfo, LossScaleStats, MemoryStats
from mpbench.workloads import get_workload


def resolve_device(requested: str) -> torch.device:
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise Unsupported(
            f"torch {torch.__version__} sees no CUDA device (CPU-only build?): "
            "install a CUDA build of torch"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise Unsupported("torch reports MPS unavailable on this machine")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def describe_device(device: torch.device) -> DeviceInfo:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return DeviceInfo(
            "cuda", torch.cuda.get_device_name(device), f"{major}.{minor}", device.index
        )
    if device.type == "mps":
        return DeviceInfo("mps", "Apple GPU (MPS)")
    return cpu_device_info()


def synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None  # CPU ops run synchronously


def _to_device(array: Any, device: torch.device, channels_last: bool) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    if tensor.dim() == 4:  # data comes channels-last (N, H, W, C); torch convs take NCHW
        tensor = tensor.permute(0, 3, 1, 2).contiguous()
        if channels_last:
            tensor = tensor.to(memory_format=torch.channels_last)
    return tensor.to(device)


def run_cell(spec: CellSpec, progress: Progress, warn: Callable[[str], None]) -> Measurements:
    workload = get_workload(spec.workload)
    policy = resolve(spec.policy)
    device = resolve_device(spec.device)
    torch.manual_seed(spec.seed)

    data = load_dataset(spec, workload, warn)
    # channels_last lets cuDNN use Tensor Cores without layout transposes on NVIDIA GPUs.
    channels_last = device.type == "cuda" and len(workload.input_shape) == 3
    x_train = _to_device(data.x_train, device, channels_last)
    y_train = torch.from_numpy(data.y_train).to(device)
    x_test = _to_device(data.x_test, device, channels_last)
    y_test = torch.from_numpy(data.y_test).to(device)

    model = build_model(workload, spec.units).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = build_optimizer(workload, model.parameters())
    precision = apply_policy(policy, device)
    plan = plan_steps(len(x_train), spec.batch_size, spec.epochs, spec.max_steps, spec.warmup_steps)

    sync = synchronizer(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    state: dict[str, Any] = {}
    timer = StepTimer(sync)
    generator = torch.Generator(device=device).manual_seed(spec.seed)
    epoch_losses: list[float] = []
    skipped_steps = 0
    step = 0
    model.train()
    while step < plan.total_steps:
        order = torch.randperm(len(x_train), device=device, generator=generator)
        losses: list[float] = []
        for index in range(plan.steps_per_epoch):
            if step >= plan.total_steps:
                break
            batch = order[index * spec.batch_size : (index + 1) * spec.batch_size]
            xb, yb = x_train[batch], y_train[batch]
            scale_before = precision.scaler.get_scale() if precision.scaler else None
            timer.start()
            loss = _train_step(model, optimizer, precision, xb, yb, state if step == 0 else None)
            timer.stop()
            step += 1
            losses.append(check_finite(loss.item(), step))
            if precision.scaler and precision.scaler.get_scale() < scale_before:
                skipped_steps += 1  # GradScaler lowers the scale exactly when it skips a step
            progress(step, plan.total_steps)
        epoch_losses.append(sum(losses) / len(losses))

    test_accuracy, test_loss = _evaluate(model, precision, x_test, y_test, spec.batch_size)
    memory = MemoryStats(host_peak_rss_bytes=peak_rss_bytes())
    if device.type == "cuda":
        memory.device_peak_allocated_bytes = torch.cuda.max_memory_allocated(device)
        memory.device_peak_reserved_bytes = torch.cuda.max_memory_reserved(device)

    loss_scale = None
    if precision.scaler:
        loss_scale = LossScaleStats(float(precision.scaler.get_scale()), skipped_steps)
    state.update(read_tf32())
    state.update(
        policy=policy.name,
        variable_dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
        loss_scaling=bool(precision.scaler and precision.scaler.is_enabled()),
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        memory_format="channels_last" if channels_last else "contiguous",
    )
    return Measurements(
        framework_version=f"torch {torch.__version__}",
        device=describe_device(device),
        precision=state,
        step_times_s=timer.times_s,
        warmup_steps=plan.warmup_steps,
        samples_per_step=spec.batch_size,
        epoch_losses=epoch_losses,
        test_accuracy=test_accuracy,
        test_loss=test_loss,
        params=sum(p.numel() for p in model.parameters()),
        memory=memory,
        loss_scale=loss_scale,
        data=data.info,
    )


def _train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    precision: TorchPrecision,
    xb: torch.Tensor,
    yb: torch.Tensor,
    readback: dict[str, Any] | None,
) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    with precision.autocast():
        logits = model(xb)
        if readback is not None:  # first step: record what autocast really did
            readback.update(read_autocast(precision.device_type))
            readback["compute_dtype"] = str(logits.dtype).replace("torch.", "")
    # The loss (softmax + cross-entropy) runs in float32, like Keras' float32 output layer.
    output = logits.float()
    if readback is not None:
        readback["output_dtype"] = str(output.dtype).replace("torch.", "")
    loss = F.cross_entropy(output, yb)
    if precision.scaler:
        precision.scaler.scale(loss).backward()
        precision.scaler.step(optimizer)
        precision.scaler.update()
    else:
        loss.backward()
        optimizer.step()
    return loss.detach()


@torch.no_grad()
def _evaluate(
    model: torch.nn.Module,
    precision: TorchPrecision,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    batch_size: int,
) -> tuple[float, float]:
    model.eval()
    correct, loss_sum = 0, 0.0
    for start in range(0, len(x_test), batch_size):
        xb, yb = x_test[start : start + batch_size], y_test[start : start + batch_size]
        with precision.autocast():
            logits = model(xb)
        output = logits.float()
        loss_sum += F.cross_entropy(output, yb, reduction="sum").item()
        correct += (output.argmax(dim=1) == yb).sum().item()
    model.train()
    return correct / len(x_test), loss_sum / len(x_test)
