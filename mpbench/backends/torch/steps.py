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

from mpbench.backends.torch.inputs import Inputs, call
from mpbench.backends.torch.precision import TorchPrecision, read_autocast

Batch = tuple[Inputs, torch.Tensor]  # (x, y): x a tensor, or a dict of them by keyword


@dataclass
class StepResult:
    loss: torch.Tensor  # the mean loss over the micro-batches (not divided by N), detached
    # The scaler's inf/NaN flags for this step, still on the device (None: not checked, no
    # scaler or not asked to). Kept as tensors so the step itself never waits for them.
    found_inf: list[torch.Tensor] | None = None

    @property
    def skipped(self) -> bool | None:
        """Whether the scaler skipped the step (None: not checked). Reads the device, so a
        caller asks only after its clock has stopped: inside the timed step that wait would
        be a host-device sync only loss-scaled (fp16) cells pay."""
        if self.found_inf is None:
            return None
        return any(bool(flag.item()) for flag in self.found_inf)


def train_step(
    model: Callable[..., torch.Tensor],
    optimizer: torch.optim.Optimizer,
    precision: TorchPrecision,
    micro_batches: Sequence[Batch],
    readback: dict[str, Any] | None = None,
    check_skip: bool = False,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> StepResult:
    """`model` may be the compiled module: the scaler stays outside the compiled region (a
    scale changing between steps then causes no recompiles).
    `check_skip` keeps the scaler's overflow flags in the result; nothing here reads a value
    back from the device (`StepResult.skipped` does, once the caller's clock has stopped).
    `loss_fn`: a user workload's loss (of the float32 output and the targets); None: the
    built-ins' cross-entropy."""
    loss_fn = loss_fn or cross_entropy
    scaler = precision.scaler
    count = len(micro_batches)
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for xb, yb in micro_batches:
        with precision.autocast():
            logits = call(model, xb)
            if readback is not None:  # first step: record what autocast really did
                readback.update(read_autocast(precision.device_type))
                readback["compute_dtype"] = str(logits.dtype).replace("torch.", "")
        # The loss (softmax + cross-entropy) runs in float32, like Keras' float32 output layer.
        output = logits.float()
        if readback is not None:
            readback["output_dtype"] = str(output.dtype).replace("torch.", "")
            readback = None
        loss = loss_fn(output, yb)
        losses.append(loss.detach())
        # Divided by N: the accumulated gradient is the mean over the effective batch.
        scaled = loss / count if count > 1 else loss
        (scaler.scale(scaled) if scaler else scaled).backward()
    mean_loss = losses[0] if count == 1 else torch.stack(losses).mean()
    if not scaler:
        optimizer.step()
        return StepResult(mean_loss)
    scaler.step(optimizer)  # runs optimizer.step() only if every gradient is finite
    # Taken before update() drops the scaler's per-optimizer state. One flag set means the
    # step was skipped, for a dynamic scale too: update() backs the scale off exactly then.
    flags = found_inf_flags(scaler, optimizer) if check_skip else None
    if precision.static_scale is not None:
        # update() would halve the scale after an overflow; handing it the scale keeps it.
        scaler.update(new_scale=precision.static_scale)
    else:
        scaler.update()
    return StepResult(mean_loss, flags)


def cross_entropy(output: torch.Tensor, targets: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """The mean cross-entropy over every prediction: one per sample (N, C), or one per token
    for a language model's (N, T, V) logits and (N, T) next tokens."""
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1), **kwargs)


def found_inf_flags(scaler: Any, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The tensors in which scaler.step() recorded inf/NaN gradients, one per device, not
    read back. GradScaler has no public flag for it: `_found_inf_per_device` is private, but
    has held the per-optimizer state since torch 1.6 (torch 2.13 `torch/amp/grad_scaler.py`).
    Not copied (a copy would be one more kernel inside the step): update() may add the other
    devices' flags into the first in place, which leaves "any flag set" unchanged. With a
    static scale the dynamic idiom (scale dropped) cannot tell, since the scale never drops."""
    return list(scaler._found_inf_per_device(optimizer).values())
