"""`--on-diverge fallback` (docs/telemetry.md): a diverged cell is run again one step down
the precision ladder that the device supports, as a new cell labelled as its fallback.

No framework switches precision during a run (research notes §8: fairseq and DeepSpeed stop
and tell the user to use fp32 or bf16; Megatron skips). mpbench does the honest version:
the diverged cell keeps its `diverged` record, and the fallback is a separate cell with its
own record whose `fallback_of` names the original, so nothing is reported as the original
policy's success.
"""

from __future__ import annotations

import dataclasses

from mpbench.backends.base import CellSpec
from mpbench.policies import DeviceTraits, Rating, rate, resolve

MARK = "~fallback-"  # in the fallback's cell id, after the original's policy and recipe


def next_policy(policy: str, traits: DeviceTraits) -> str | None:
    """The first policy below `policy` (its `fallbacks`, mpbench.policies) that the device
    supports; None at the bottom."""
    for candidate in resolve(policy).fallbacks:
        if rate(candidate, traits).rating is not Rating.UNSUPPORTED:
            return candidate
    return None


def fallback_spec(spec: CellSpec, traits: DeviceTraits) -> CellSpec | None:
    """The cell that runs `spec` again one step down the ladder; None where there is none.

    Everything but the precision stays: the batch, the steps, the seed, the recipe. A static
    loss scale belongs to fp16 and is dropped; the cell id keeps the original's and marks the
    fallback (`torch/mnist_dense/mixed_float16@ls1e+30~fallback-mixed_bfloat16/r0`), so a
    --resume finds it and compare shows it as its own row."""
    policy = next_policy(spec.policy, traits)
    if policy is None:
        return None
    head, _, repeat = spec.cell_id.rpartition("/")
    return dataclasses.replace(
        spec, policy=policy, loss_scale=None, cell_id=f"{head}{MARK}{policy}/{repeat}"
    )
