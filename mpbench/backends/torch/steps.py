"""One PyTorch optimizer step: N accumulated micro-batches, the loss scaler, skip detection.

The accumulation follows the AMP notes' "Gradient accumulation" pattern (torch
docs/source/notes/amp_examples.rst): each micro-batch's loss is divided by N, gradients stay
scaled while they accumulate, and the scaler steps and updates once per window, so an
overflow in any micro-batch skips the whole effective batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from mpbench.backends.torch.precision import TorchPrecision, read_autocast

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class StepResult:
    loss: torch.Tensor  # the mean loss over the micro-batches (not divided by N), detached
    skipped: bool | None  # None: not checked (no scaler, or not asked to check)


def train_step(
    model: Callable[[torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    precision: TorchPrecision,
    micro_batches: Sequence[Batch],
    readback: dict[str, Any] | None = None,
    check_skip: bool = False,
) -> StepResult:
    """`model` may be the compiled module: the scaler stays outside the compiled region (a
    scale changing between steps then causes no recompiles, research notes §3).
    `check_skip` reads whether the scaler skipped the step, which waits for the device."""
    scaler = precision.scaler
    count = len(micro_batches)
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for xb, yb in micro_batches:
        with precision.autocast():
            logits = model(xb)
            if readback is not None:  # first step: record what autocast really did
                readback.update(read_autocast(precision.device_type))
                readback["compute_dtype"] = str(logits.dtype).replace("torch.", "")
        # The loss (softmax + cross-entropy) runs in float32, like Keras' float32 output layer.
        output = logits.float()
        if readback is not None:
            readback["output_dtype"] = str(output.dtype).replace("torch.", "")
            readback = None
        loss = F.cross_entropy(output, yb)
        losses.append(loss.detach())
        # Divided by N: the accumulated gradient is the mean over the effective batch.
        scaled = loss / count if count > 1 else loss
        (scaler.scale(scaled) if scaler else scaled).backward()
    mean_loss = losses[0] if count == 1 else torch.stack(losses).mean()
    if not scaler:
        optimizer.step()
        return StepResult(mean_loss, None)
    scale_before = scaler.get_scale() if check_skip and precision.static_scale is None else None
    scaler.step(optimizer)  # runs optimizer.step() only if every gradient is finite
    skipped = None
    if precision.static_scale is not None:
        if check_skip:
            skipped = found_inf(scaler, optimizer)  # read before update() clears it
        # update() would halve the scale after an overflow; handing it the scale keeps it.
        scaler.update(new_scale=precision.static_scale)
    else:
        scaler.update()
        if check_skip:
            # A dynamic scaler lowers the scale exactly when it skipped the step.
            skipped = scaler.get_scale() < scale_before
    return StepResult(mean_loss, skipped)


def found_inf(scaler: Any, optimizer: torch.optim.Optimizer) -> bool:
    """Whether scaler.step() found inf/NaN gradients (and so skipped the step). GradScaler has
    no public flag for it: `_found_inf_per_device` is private, but has read the per-optimizer
    state since torch 1.6 (checked on 2.13; research notes §1). With a static scale the
    dynamic idiom (scale dropped) cannot tell, since the scale never drops."""
    return bool(sum(v.item() for v in scaler._found_inf_per_device(optimizer).values()))
