"""The float8 policy in torch: torchao float8 training on the nn.Linear layers that
mpbench/fp8_rules.py allows, labelled by what ran (hardware or emulated), and the record's
`fp8` field.

torchao is imported only for a float8 cell (the `fp8` extra)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

from mpbench import fp8_rules as rules
from mpbench.backends.base import Unsupported
from mpbench.backends.torch.fp8_gemm_timing import measure
from mpbench.backends.torch.fp8_layers import (
    SHAPES_SOURCE,
    SHARE_SOURCE,
    ForwardTrace,
    layer_plan,
    swap_hf_conv1d,
    trace_forward,
    traced_share,
)
from mpbench.backends.torch.inputs import Inputs
from mpbench.backends.torch.precision import TorchPrecision
from mpbench.errors import first_line
from mpbench.fp8_gemms import Fp8Prediction, no_hardware, training_gemms, untimed
from mpbench.fp8_rules import (
    HARDWARE,
    Execution,
    Fp8Refused,
    LayerPlan,
    device_refusal,
    execution,
)
from mpbench.policies import FLOAT8

INSTALL_HINT = "float8 in torch needs torchao: pip install 'mpbench[fp8]'"
# The aten GEMMs an emulated Float8Linear may run below its Float8TrainingTensor operands.
_GEMMS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_mm")


@dataclass
class TracedGemm:
    """What an emulated Float8Linear's GEMM ran in (traced_gemm): the dtypes of the tensors
    it multiplied, the dtype its product left the layer in, or why it was not seen."""

    operands: list[str]
    output: str | None
    error: str | None = None


@dataclass
class Fp8Setup:
    """What a float8 cell decided before training: its plan, label and torchao config."""

    plan: LayerPlan
    execution: Execution
    config: Any
    trace: ForwardTrace  # the model's own forward: GEMM shapes and FLOPs per module
    swapped: dict[str, str]  # layers swapped for nn.Linear so fp8 can take them
    torchao: Any = None
    gemm: TracedGemm | None = None  # an emulated cell's GEMM, as the probe saw it run
    prediction: Fp8Prediction | None = None  # its GEMMs' shapes and predicted gain over bf16


def import_torchao() -> Any:
    """torchao and its float8 module. On a CPU, importing torchao 0.18 prints "Failed to load
    ..._C_mxfp8..." lines (its CUDA kernels, harmless here) and a torch._pytree deprecation
    warning (through torch's logger, whose handler keeps the real stderr, so redirecting
    stderr alone misses it): they would read as errors in a cell's output, so they are
    swallowed for the import only."""
    pytree = logging.getLogger("torch.utils._pytree")
    level = pytree.level
    pytree.setLevel(logging.ERROR)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            import torchao
            import torchao.float8 as float8
    except ImportError as exc:
        raise Unsupported(INSTALL_HINT) from exc
    finally:
        pytree.setLevel(level)
    return torchao, float8


def device_capability(device: torch.device) -> tuple[int, int] | None:
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)
    return None


def probe_scaled_mm(device: torch.device, recipe: str) -> str | None:
    """Why this torch build's fp8 GEMM refuses the recipe's scales here; None where it runs.

    Relies on torch._scaled_mm(self, mat2, scale_a, scale_b, bias=None, scale_result=None,
    out_dtype=None, use_fast_accum=False) (aten native_functions.yaml, torch 2.4 to 2.13):
    scale_a / scale_b are float32, a scalar for tensorwise, (M, 1) and (1, N) for rowwise;
    mat2 must be column-major; K and N multiples of 16 on CUDA."""
    m, k, n = 32, 128, 32
    try:
        # No random numbers: the cell's seeded generator is left where it was.
        a = torch.linspace(-1, 1, m * k, device=device).reshape(m, k).to(torch.float8_e4m3fn)
        b = torch.linspace(-1, 1, n * k, device=device).reshape(n, k).to(torch.float8_e4m3fn)
        b = b.t()  # column-major
        if recipe == "tensorwise":
            sa = torch.tensor(1.0, device=device)
            sb = torch.tensor(1.0, device=device)
        else:
            sa = torch.ones(m, 1, device=device, dtype=torch.float32)
            sb = torch.ones(1, n, device=device, dtype=torch.float32)
        torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception as exc:  # any refusal is the answer
        return f"this torch build's _scaled_mm refused {recipe} scales here: {first_line(exc)}"
    return None


def label(device: torch.device, requested: str, recipe: str) -> Execution:
    """hardware or emulated, by the device and (on sm_89+) a probe of the GEMM path."""
    refusal = device_refusal(device.type, device_capability(device))
    path = None if refusal else probe_scaled_mm(device, recipe)
    try:
        return execution(requested, refusal, path)
    except Fp8Refused as exc:
        raise Unsupported(str(exc)) from exc


class _GemmRecorder(TorchDispatchMode):
    """The GEMMs that run below torchao's Float8TrainingTensor. An op on that wrapper
    subclass (what mpbench's op_dtypes trace records: its nominal dtype, the autocast one) is
    handed back to the subclass (NotImplemented), so this mode sees, after autocast, the
    plain-tensor ops the subclass runs in turn: the GEMM that computes."""

    def __init__(self) -> None:
        super().__init__()
        self.operands: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
        if any(is_traceable_wrapper_subclass(x) for x in leaves):
            return NotImplemented
        if str(func.overloadpacket) in _GEMMS:
            self.operands.update(
                str(x.dtype).removeprefix("torch.") for x in leaves if x.is_floating_point()
            )
        return func(*args, **kwargs)


def traced_gemm(
    config: Any, device: torch.device, autocast_dtype: torch.dtype | None
) -> TracedGemm:
    """Run one Float8Linear of the cell's config on its device, forward and backward, under
    the autocast the cell trains in, and record the dtype its GEMMs multiply in and the dtype
    its output has. torchao 0.18's emulate=True multiplies `a._data.float() / a._scale` by
    `b._data.float() / b._scale` with autocast already applied above it, so float32 in,
    float32 out, cast to the autocast dtype: the record says what this build ran, whatever
    a later torchao does. No random numbers are drawn (the cell's seeded RNG is untouched)."""
    from torchao.float8 import convert_to_float8_training

    try:
        linear = torch.nn.Linear(32, 32, bias=False, device="meta").to_empty(device=device)
        with torch.no_grad():
            linear.weight.copy_(torch.linspace(-1.0, 1.0, 32 * 32).reshape(32, 32))
        probe = convert_to_float8_training(torch.nn.Sequential(linear), config=config)
        x = torch.linspace(-2.0, 2.0, 16 * 32, device=device).reshape(16, 32)
        recorder = _GemmRecorder()
        with recorder:
            with TorchPrecision(device.type, autocast_dtype, None).autocast():
                y = probe(x)
            y.float().sum().backward()
    except Exception as exc:  # no trace: the record says so rather than guess
        return TracedGemm([], None, first_line(exc))
    return TracedGemm(sorted(recorder.operands), str(y.dtype).removeprefix("torch."))


def _autocast_dtype(cell: Any) -> torch.dtype | None:
    """The autocast dtype the cell trains in (precision.apply_policy's): its policy's compute
    dtype, bfloat16 for float8."""
    name = getattr(getattr(cell, "policy", None), "compute_dtype", FLOAT8.compute_dtype)
    return None if name == "float32" else getattr(torch, name)


def prepare(
    cell: Any,
    model: torch.nn.Module,
    sample: Inputs,
    optimizer: torch.optim.Optimizer | None = None,
) -> Fp8Setup:
    """Plan, label and configure a float8 cell (before its model is converted): transformers
    Conv1D layers swapped for nn.Linear first (`optimizer`, built already, re-pointed), then
    one traced forward of `sample` (a micro-batch) gives the plan its shapes and FLOPs."""
    torchao, float8 = import_torchao()
    spec = cell.spec
    swapped = swap_hf_conv1d(model, optimizer)
    trace = trace_forward(model, sample)
    plan = layer_plan(model, trace)
    run = label(cell.device, spec.fp8_mode, spec.fp8_recipe)
    config = float8.Float8LinearConfig.from_recipe_name(spec.fp8_recipe)
    config = dataclasses.replace(config, emulate=run.mode != HARDWARE)
    gemm = traced_gemm(config, cell.device, _autocast_dtype(cell)) if config.emulate else None
    prediction = predict_gain(cell, plan, run)
    return Fp8Setup(plan, run, config, trace, swapped, torchao, gemm, prediction)


def predict_gain(cell: Any, plan: LayerPlan, run: Execution) -> Fp8Prediction:
    """Each fp8 layer's three training GEMMs at the cell's micro-batch, timed in bf16 and fp8
    on the device before training (fp8_gemm_timing.measure: a few seconds at most, its
    tensors freed before the memory meter starts); shapes only where fp8 is emulated."""
    spec = cell.spec
    gemms = training_gemms(plan.fp8, spec.batch_size, spec.fp8_recipe)
    if not run.emulated:
        return measure(gemms, cell.device, spec.fp8_recipe, compiled=fp8_compiled(spec))
    if spec.fp8_mode == "emulated":  # the device may have fp8 GEMMs: none was asked for
        return untimed(gemms, run.why, hardware=False)
    return no_hardware(gemms, run.why)


def convert(setup: Fp8Setup, model: torch.nn.Module) -> list[str]:
    """Swap the plan's nn.Linear layers for torchao Float8Linear, in place; the names that are
    Float8Linear afterwards (what runs, not the plan)."""
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    names = set(setup.plan.fp8_names)
    convert_to_float8_training(
        model, config=setup.config, module_filter_fn=lambda mod, fqn: fqn in names
    )
    return [name for name, mod in model.named_modules() if isinstance(mod, Float8Linear)]


def check_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """A user workload's optimizer was built before conversion: it must still hold the
    model's parameters (torchao keeps the weight and bias objects)."""
    own = {id(p) for p in model.parameters()}
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if not held <= own or not own <= held:
        raise RuntimeError(
            "float8: after torchao's conversion the user workload's optimizer no longer holds "
            "the model's parameters; build the optimizer from model.parameters()"
        )


def _scaling(config: Any) -> str:
    cast = config.cast_config_input
    granularity = getattr(cast.scaling_granularity, "value", str(cast.scaling_granularity))
    per = "per tensor" if granularity == "tensorwise" else "per row (axiswise)"
    text = f"dynamic (current) scaling, {per}"
    if getattr(config, "round_scales_to_power_of_2", False):
        text += ", power-of-2 scales"
    return text


def _formats(config: Any) -> dict[str, str]:
    def name(cast: Any) -> str:
        return str(cast.target_dtype).removeprefix("torch.")

    return {
        "input": name(config.cast_config_input),
        "weight": name(config.cast_config_weight),
        "grad_output": name(config.cast_config_grad_output),
    }


def fp8_compiled(spec: Any) -> bool:
    """Whether a float8 cell's model runs under torch.compile: by default (torchao fuses the
    scaling and casting kernels only there; eager fp8 is its slow path), or with --compile;
    --fp8-eager alone runs it eager."""
    return bool(spec.compile or not spec.fp8_eager)


def record(
    setup: Fp8Setup, requested: str, recipe: str, layers_fp8: list[str], compiled: bool
) -> dict:
    """The record's `fp8` (results.Fp8Stats' fields), from what ran."""
    if setup.execution.mode == HARDWARE:
        kind = "cuBLASLt tensorwise" if recipe == "tensorwise" else "CUTLASS/cuBLAS rowwise"
        gemm = f"torch._scaled_mm on fp8 Tensor Cores ({kind})"
    else:
        traced = setup.gemm or TracedGemm([], None, "not traced")
        gemm = rules.emulated_gemm("torchao emulate=True", traced.operands, traced.output)
        if traced.error:
            gemm += f" (the probe failed: {traced.error})"
    prediction = setup.prediction
    share = traced_share(setup.trace, layers_fp8)
    return rules.record(
        setup.execution,
        requested,
        setup.plan,
        layers_fp8,
        None,
        SHARE_SOURCE if share is not None else "the traced forward counted no FLOPs",
        backend=f"torchao {setup.torchao.__version__} float8 training",
        gemm=gemm,
        recipe=recipe,
        scaling=_scaling(setup.config),
        formats=_formats(setup.config),
        compiled=compiled,
        prediction=dataclasses.asdict(prediction) if prediction is not None else None,
        traced_share=share,
        swapped_layers=setup.swapped,
        shapes_source=SHAPES_SOURCE,
    )


def apply_fp8(
    cell: Any,
    model: torch.nn.Module,
    sample: Inputs,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict:
    """The backend's one call: plan (from one traced forward of `sample`, a micro-batch of
    the cell's inputs), label, convert `model` (before its optimizer is built, or check
    `optimizer` after), and return the record's `fp8`."""
    setup = prepare(cell, model, sample, optimizer)
    names = convert(setup, model)
    if optimizer is not None:
        check_optimizer(model, optimizer)
    spec = cell.spec
    return record(setup, spec.fp8_mode, spec.fp8_recipe, names, fp8_compiled(spec))
