"""The fp8 contract (docs/policies.md, "fp8"): which layers run their GEMMs in fp8, what share
of the FLOPs that is, and how a cell is labelled: by what ran, never by what was asked.

Both backends build their `fp8` record from here, so torch and Keras cells follow one set of
rules. No framework; of mpbench only the policy table (mpbench.policies), whose device
rating says the same as device_refusal here.

- Only Linear / Dense layers go fp8 (torchao swaps nn.Linear only; Keras implements float8 in
  Dense and EinsumDense only): convolutions, norms, the softmax and the loss stay in the base
  policy, mixed_bfloat16.
- A layer goes fp8 only where its in and out features are multiples of 16: on CUDA,
  torch._scaled_mm (cuBLASLt) refuses other shapes, while a CPU accepts them and so would hide
  the GPU's failure (torchao's Float8LinearConfig, `pad_inner_dim`). The same layers go fp8 on
  every device, so an emulated cell's numerics are the hardware cell's.
- `hardware` only on NVIDIA compute capability >= 8.9 with a real fp8 GEMM path (the backend
  says whether it has one); `emulated` everywhere else, with the reason. Asking for hardware
  where there is none refuses the cell (Fp8Refused), never falls back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mpbench.policies import FLOAT8, FP8_CPU_REASON, FP8_MIN_CC

# --fp8-mode: auto (hardware where there is one, else emulated), hardware (refuse where there
# is none), emulated (fp8 numerics without fp8 GEMMs, also on an sm_89+ GPU).
FP8_MODES = ("auto", "hardware", "emulated")
HARDWARE, EMULATED = "hardware", "emulated"
# torchao's float8 training recipes (Float8LinearConfig.from_recipe_name); Keras has one.
TORCH_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
CUDA_MULTIPLE = 16
# What every op that is not an fp8 GEMM runs in, in both backends (the policy table's fact).
BASE_POLICY = FLOAT8.base


class Fp8Refused(Exception):
    """The cell asked for something fp8 cannot honestly give here: it is skipped, with this."""


@dataclass(frozen=True)
class LinearLayer:
    """One Linear / Dense layer as a GEMM: `rows_per_sample` rows of the input per sample
    (1 for a classifier, the sequence length for a language model's projections; torch
    traces it from the layer's real input), `calls` times a forward pass."""

    name: str
    in_features: int
    out_features: int
    rows_per_sample: int | float = 1
    calls: int = 1

    @property
    def forward_flops_per_sample(self) -> float:
        per_call = 2.0 * self.in_features * self.out_features * self.rows_per_sample
        return per_call * self.calls

    def cuda_refusal(self) -> str | None:
        """Why cuBLASLt's fp8 GEMM would refuse this layer's shape; None where it takes it."""
        bad = [
            f"{name} {value}"
            for name, value in (("in", self.in_features), ("out", self.out_features))
            if value % CUDA_MULTIPLE
        ]
        if not bad:
            return None
        return (
            f"{' and '.join(bad)} not a multiple of {CUDA_MULTIPLE} "
            "(fp8 GEMMs on CUDA need it): kept in bfloat16"
        )


@dataclass
class LayerPlan:
    """Which layers go fp8 and which stay in the base precision, with why."""

    fp8: list[LinearLayer] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # layer name -> reason

    @property
    def fp8_names(self) -> list[str]:
        return [layer.name for layer in self.fp8]


def plan_layers(linears: Iterable[LinearLayer], other: dict[str, str] | None = None) -> LayerPlan:
    """The fp8 layers among `linears` (their shapes allowing it); `other`: layers of the model
    that are not Linear / Dense (a convolution, ...) with why they stay, listed as skipped."""
    plan = LayerPlan(skipped=dict(other or {}))
    for layer in linears:
        refusal = layer.cuda_refusal()
        if refusal:
            plan.skipped[layer.name] = refusal
        else:
            plan.fp8.append(layer)
    return plan


# Why a float8 cell's FLOP share is 0: the record's flop_share_note, and compare's verdict.
NO_FP8_LAYER = "no layer ran in fp8, so the cell trained as its bf16 base"


def flop_share(plan: LayerPlan, forward_flops_per_sample: float | None) -> float | None:
    """The fp8 GEMMs' share of the model's forward FLOPs per sample (the backward pass of a
    GEMM or a convolution costs twice its forward, so the training step's share is the same);
    None where the model's FLOPs are unknown."""
    if not forward_flops_per_sample:
        return None
    fp8 = sum(layer.forward_flops_per_sample for layer in plan.fp8)
    return min(1.0, fp8 / forward_flops_per_sample)


def device_refusal(kind: str, capability: tuple[int, int] | None) -> str | None:
    """Why this device runs no fp8 GEMM in hardware; None on NVIDIA sm_89+."""
    if kind == "cuda" and capability is not None and capability >= FP8_MIN_CC:
        return None
    if kind == "cuda":
        cc = f"{capability[0]}.{capability[1]}" if capability else "unknown"
        return f"compute capability {cc} < 8.9 has no fp8 Tensor Cores"
    if kind == "cpu":
        return FP8_CPU_REASON
    return f"mpbench labels only NVIDIA sm_89+ fp8 as hardware, not {kind}"


def emulated_gemm(how: str, operands: Iterable[str], output: str | None = None) -> str:
    """An emulated fp8 GEMM in the record's words (`fp8.gemm`), the one place they are made:
    `how` the backend's path, `operands` the dtype(s) its GEMM was seen multiplying the
    fp8-rounded (dequantised) operands in, `output` the dtype the product left the layer in
    where that differs (torchao casts its float32 product to the autocast dtype). Each
    backend passes what ran, never what the policy would suggest."""
    dtypes = "/".join(sorted(set(operands))) or "a dtype that was not traced"
    text = f"emulated ({how}): fp8-rounded operands multiplied in {dtypes}"
    if output and {output} != set(operands):
        text += f", the product cast to {output}"
    return text


@dataclass(frozen=True)
class Execution:
    """How a cell's fp8 GEMMs run: `hardware` or `emulated`, and why."""

    mode: str
    why: str

    @property
    def emulated(self) -> bool:
        return self.mode == EMULATED


def execution(requested: str, device: str | None, path: str | None) -> Execution:
    """The label, from what ran: `device` is device_refusal's answer, `path` the backend's
    reason it has no fp8 GEMM here (no XLA for Keras, a recipe the build lacks), None where
    it has one. Fp8Refused when hardware was asked for and either refuses."""
    if requested not in FP8_MODES:
        raise ValueError(f"fp8 mode {requested!r} is not one of {', '.join(FP8_MODES)}")
    refusal = device or path
    if requested == HARDWARE and refusal:
        raise Fp8Refused(f"hardware fp8 was asked for (--fp8-mode hardware), but {refusal}")
    if requested == EMULATED:
        return Execution(EMULATED, "--fp8-mode emulated: fp8 numerics without fp8 GEMMs")
    if refusal:
        return Execution(EMULATED, refusal)
    return Execution(HARDWARE, "fp8 GEMMs on fp8 Tensor Cores (compute capability >= 8.9)")


def record(
    run: Execution,
    requested: str,
    plan: LayerPlan,
    layers_fp8: list[str],
    forward_flops: float | None,
    flop_note: str | None,
    *,
    backend: str,
    gemm: str,
    recipe: str,
    scaling: str,
    formats: dict[str, str],
    compiled: bool | None = None,
    prediction: dict[str, Any] | None = None,
    traced_share: float | None = None,
    swapped_layers: dict[str, str] | None = None,
    shapes_source: str | None = None,
) -> dict[str, Any]:
    """The record's `fp8` (results.schema.Fp8Stats' fields), from what ran: the FLOP share is
    of the planned layers that are fp8 after conversion (`layers_fp8`), not of the plan;
    `traced_share` where the backend counted it per module itself (torch: fp8_layers), else
    from the plan's shapes against `forward_flops` per sample."""
    ran = set(layers_fp8)
    if not ran:
        # No layer went fp8: the cell trained as its bf16 base, bit for bit. Its share is 0,
        # known without counting a FLOP (a model that cannot be counted said "unknown", a
        # wrong answer there).
        share, flop_note = 0.0, NO_FP8_LAYER
    elif traced_share is not None:
        share = traced_share
    else:
        share = flop_share(LayerPlan(fp8=[x for x in plan.fp8 if x.name in ran]), forward_flops)
    return {
        "mode": run.mode,
        "why": run.why,
        "requested": requested,
        "backend": backend,
        "gemm": gemm,
        "recipe": recipe,
        "scaling": scaling,
        "formats": dict(formats),
        "base_policy": BASE_POLICY,
        "layers_fp8": list(layers_fp8),
        "skipped_layers": dict(plan.skipped),
        "flop_share_fp8": share,
        "flop_share_note": flop_note,  # why there is no share, or where the FLOPs came from
        "compiled": compiled,  # torch: under torch.compile; None where the backend has no such
        "prediction": prediction,  # torch: each fp8 GEMM's shape and predicted gain over bf16
        "swapped_layers": dict(swapped_layers or {}),  # torch: swapped for nn.Linear, and how
        "shapes_source": shapes_source,  # where the GEMM shapes came from
    }
