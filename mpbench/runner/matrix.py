"""Expand a RunConfig into cells: framework × workload × policy × repeat.

Cells that cannot run here (a framework that is not installed, a policy the device does not
support) are kept as cells with a skip reason, so the results say why they are missing.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mpbench.backends import FRAMEWORKS, INSTALL_HINTS
from mpbench.backends.base import CellSpec
from mpbench.errors import InvalidInput, unknown_choice
from mpbench.policies import (
    FLOAT32,
    POLICIES,
    DeviceTraits,
    MeasuredStep,
    Policy,
    PolicyRating,
    Rating,
    auto_policies,
    left_out_by_auto,
    rate,
    rate_convolutions,
    resolve,
)
from mpbench.runner.config import RunConfig
from mpbench.runner.launchers.helper import describe_workload
from mpbench.runner.launchers.process import available_cores
from mpbench.settings import SETTINGS, USER_DATA
from mpbench.workloads import resolve_workloads

# The settings every cell takes as they are (Setting.cell): a run-wide one read from the
# RunConfig, a per-workload one from that workload's WorkloadSettings, each into the CellSpec
# field of the same name.
PASSED_FROM_RUN = tuple(s.target for s in SETTINGS if s.cell and s.home == "run")
PASSED_FROM_WORKLOAD = tuple(s.target for s in SETTINGS if s.cell and s.home == "workload")

# The CellSpec fields expand() works out per cell rather than copies, each named in its
# CellSpec(...) call: the cell's identity and place in the matrix (run_id, cell_id, framework,
# workload, policy, repeat); the device as resolved (--device auto is no device); a setting
# that goes through a rule first (seed + repeat, so that each repeat has its own; the batch
# size times the 16-bit factor, with the unscaled one as the reference; units, heads, layers
# and seq_len where unset, the workload's preset for the device; the one --threads count, or
# the cores, for both thread pools); the recipe's axes, one value of each list per cell (the
# loss scale, accumulation, the 16-bit factor, compile, nproc, and grad_comm, which only a
# torch cell of more than one replica keeps); the data mode (--data chooses the built-ins'
# data; a user workload's cell records "user": cell_data). `verbose` is no part of the plan:
# the runner sets it as the cell starts, from this invocation's --verbose (a --resume may
# differ); nor `float32_step_s`, which the runner hands the cell as it starts, from the run's
# records (its float32 twin's step: runner/twin.py).
WORKED_OUT = frozenset(
    {
        "run_id",
        "cell_id",
        "framework",
        "workload",
        "policy",
        "repeat",
        "device",
        "seed",
        "batch_size",
        "reference_batch_size",
        "units",
        "heads",
        "layers",
        "seq_len",
        "intra_op_threads",
        "inter_op_threads",
        "loss_scale",
        "accumulate",
        "batch_scale_16bit",
        "compile",
        "nproc",
        "grad_comm",
        "data",
        "verbose",
        "float32_step_s",
    }
)


@dataclass
class Cell:
    spec: CellSpec
    skip_reason: str | None = None  # set when the cell is decided without running it
    fallback_of: str | None = None  # --on-diverge fallback: the diverged cell's id
    # A data-parallel cell: the same cell at world size 1 in this run, its scaling reference.
    scaling_reference: str | None = None


def installed(framework: str) -> bool:
    # find_spec looks for the package without importing it (importing TF takes seconds).
    return importlib.util.find_spec(framework) is not None


def resolve_frameworks(names: list[str]) -> list[str]:
    if not names:
        found = [f for f in FRAMEWORKS if installed(f)]
        if not found:
            hints = " or ".join(INSTALL_HINTS.values())
            raise InvalidInput(f"neither PyTorch nor TensorFlow is installed: {hints}")
        return found
    chosen: list[str] = []
    for name in names:
        name = name.strip().lower()
        if name == "all":
            chosen += FRAMEWORKS
        elif name in FRAMEWORKS:
            chosen.append(name)
        else:
            raise unknown_choice("framework", name, [*FRAMEWORKS, "all"])
    return list(dict.fromkeys(chosen))


class Cells(list[Cell]):
    """expand's cells, in order, and the plan's `notes`: what the run says once before its
    first cell (preflight), such as the policies `auto` left out on this device."""

    def __init__(self, cells: list[Cell], notes: list[str]) -> None:
        super().__init__(cells)
        self.notes = notes


def resolve_policies(
    names: list[str],
    traits: DeviceTraits,
    framework: str | None = None,
    measured: Sequence[MeasuredStep] = (),
) -> list[Policy]:
    """The policies `names` ask for in `framework`, in order, each once: `auto` is float32
    and every policy rated fast on the device in that framework (measured where detect
    --measure cached a step, by rule elsewhere; never float8; framework None: fast in any),
    `all` every policy; a policy named explicitly runs even where it is slow (an unsupported
    one becomes a skipped cell, _skip_reason)."""
    chosen: list[Policy] = []
    for name in names:
        key = name.strip().lower()
        if key == "auto":
            chosen += auto_policies(traits, framework, measured)
        elif key == "all":
            chosen += POLICIES.values()
        else:
            chosen.append(resolve(key))
    return list(dict.fromkeys(chosen))


def left_out(
    names: list[str],
    traits: DeviceTraits,
    framework: str | None = None,
    measured: Sequence[MeasuredStep] = (),
) -> list[PolicyRating]:
    """The policies `auto` among `names` left out in `framework` on this device, with their
    ratings: none where `all` or no `auto` is asked, and never one that another name asks
    for."""
    keys = [name.strip().lower() for name in names]
    if "auto" not in keys or "all" in keys:
        return []
    chosen = resolve_policies(names, traits, framework, measured)
    return [
        r for r in left_out_by_auto(traits, framework, measured) if POLICIES[r.policy] not in chosen
    ]


def _said(ratings: list[PolicyRating]) -> str:
    """Why one policy was left out: its rating and reason, once where the frameworks agree,
    else each framework's."""

    def one(rating: PolicyRating) -> str:
        why = f"{rating.rating.value}: {rating.reason}"
        if rating.rating is Rating.FAST:  # float8: opt-in even where fast
            why += "; auto never picks float8"
        return why

    if len({(r.rating, r.reason) for r in ratings}) == 1:
        return one(ratings[0])
    return "; ".join(f"{r.framework}: {one(r)}" for r in ratings)


def left_out_note(
    names: list[str],
    traits: DeviceTraits,
    frameworks: Sequence[str] = FRAMEWORKS,
    measured: Sequence[MeasuredStep] = (),
) -> str | None:
    """One line saying what `auto` runs in each framework and what it left out and why
    (detect's ratings, per framework), or None where it left nothing out."""
    names_of = {
        f: [p.name for p in resolve_policies(names, traits, f, measured)] for f in frameworks
    }
    out = {f: left_out(names, traits, f, measured) for f in frameworks}
    if not any(out.values()):
        return None
    ran = _runs(names_of)
    said = []
    for policy in POLICIES:
        ratings = [r for f in frameworks for r in out[f] if r.policy == policy]
        if not ratings:
            continue
        where = (
            ""
            if len(ratings) == len(frameworks)
            else " in " + _and([r.framework or "" for r in ratings])
        )
        said.append(f"{policy}{where} ({_said(ratings)})")
    note = (
        f"--policy auto runs {ran} (float32 and the policies rated fast there on "
        f"{traits.name}) and leaves out {', '.join(said)}; a policy named with -p (or in "
        "[run] policies) runs even where it is slow"
    )
    if all(kept == [FLOAT32.name] for kept in names_of.values()):
        note += (
            "; with float32 alone, compare's --min-speedup and --max-accuracy-delta have "
            "nothing to compare it to"
        )
    return note


def _runs(names_of: dict[str, list[str]]) -> str:
    """ "float32, mixed_bfloat16 in torch and tensorflow", or each framework's set."""
    sets = list(dict.fromkeys(tuple(kept) for kept in names_of.values()))
    parts = []
    for kept in sets:
        frameworks = [f for f, names in names_of.items() if tuple(names) == kept]
        parts.append(f"{', '.join(kept)} in {_and(frameworks)}")
    return "; ".join(parts)


def _and(words: list[str]) -> str:
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + f" and {words[-1]}"


def no_fast_path_notes(
    cells: list[Cell],
    names: list[str],
    traits: DeviceTraits,
    fp8_mode: str,
    measured: Sequence[MeasuredStep] = (),
) -> list[str]:
    """One line per policy named by its name (-p bf16, [run] policies) whose cells run in a
    framework the device's ratings call slow or emulated for it, in the ratings' own words:
    `-p bf16` on a CPU without bf16 instructions ran 5-15× slower than float32 and said
    nothing. Not for `auto` (left_out_note says what it left out, and why) nor `all` (every
    policy, fast or not, by request); not for float8 under --fp8-mode emulated (emulation
    was asked for) or hardware (its cells are skipped with the reason)."""
    keys = [name.strip().lower() for name in names]
    named = {resolve(key) for key in keys if key not in ("auto", "all")}
    running: dict[Policy, list[str]] = {}
    for cell in cells:
        if cell.skip_reason is None:
            frameworks = running.setdefault(POLICIES[cell.spec.policy], [])
            if cell.spec.framework not in frameworks:
                frameworks.append(cell.spec.framework)
    notes = []
    for policy, frameworks in running.items():
        if policy not in named or (policy.fp8 and fp8_mode != "auto"):
            continue
        ratings = [rate(policy, traits, f, measured) for f in frameworks]
        slow = [r for r in ratings if r.rating in (Rating.SLOW, Rating.EMULATED)]
        if not slow:
            continue
        if len(slow) == len(ratings) and len({(r.rating, r.reason) for r in slow}) == 1:
            said = f"{slow[0].reason} (rated {slow[0].rating.value})"
        else:
            said = "; ".join(f"{r.framework}: {r.reason} (rated {r.rating.value})" for r in slow)
        notes.append(f"-p {policy.short} on {traits.name}: {said}; its cells run as asked")
    return notes


def measured_steps_for(config: RunConfig, report) -> list[MeasuredStep]:
    """The training steps `detect --measure` cached for the run's device (its hardware
    fingerprint, the threads the cells run with, the installed frameworks' versions): what
    `--policy auto` rates from, over the rules. [] where none applies."""
    from mpbench.detect.steps import cached_steps

    device, _ = resolve_device(config.device, report)
    kind, _, index = device.partition(":")
    fingerprint = report.hardware_fingerprint(kind, int(index) if index else None)
    return cached_steps(fingerprint, device, threads=config.threads or available_cores())


DEVICE_CHOICES = ["auto", "cpu", "cuda", "cuda:N", "mps"]
ROCM_DEVICE_FILE = Path("/dev/kfd")  # ROCm builds of torch name AMD GPUs "cuda" too


def apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def resolve_device(requested: str, report) -> tuple[str, DeviceTraits]:
    """`auto` → the first NVIDIA GPU, else Apple MPS, else the CPU; plus its traits.

    A device that is certainly not here is invalid input (exit 2) rather than a run of
    skipped cells: MPS off Apple Silicon, cuda:N beyond the GPUs CUDA would number, CUDA on a
    machine with neither NVML GPUs nor NVIDIA/ROCm device files. Where the GPUs may be there
    but detect cannot see them (a container without libnvidia-ml), the framework decides in
    the cell."""
    if requested == "auto":
        if report.gpus and report.device_traits("cuda", 0) is not None:
            requested = "cuda:0"
        elif apple_silicon():
            requested = "mps"
        else:
            requested = "cpu"
    kind, _, index_text = requested.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index_text and not index_text.isdigit()):
        raise unknown_choice("device", requested, DEVICE_CHOICES)
    if kind in ("cpu", "mps") and index_text:
        raise unknown_choice("device", requested, DEVICE_CHOICES)
    index = int(index_text) if index_text else (0 if kind == "cuda" else None)
    if kind == "mps" and not apple_silicon():
        raise InvalidInput(
            f"--device mps: Apple's Metal (MPS) backend exists only on Apple Silicon Macs; "
            f"this machine is {platform.system()} {platform.machine()}"
        )
    if kind == "cuda":
        _check_cuda_index(index, report)
    traits = report.device_traits(kind, index)
    if traits is None:
        # Not seen by detect (no NVML in a container, say): the framework decides in the cell.
        traits = DeviceTraits(kind=kind, name=f"{kind} (not detected)")
    return (f"cuda:{index}" if kind == "cuda" else kind), traits


def _check_gpus_per_node(nproc: int, report) -> None:
    """Each replica of a node needs a GPU of its own (cuda:0 .. cuda:N-1)."""
    mapping = report.cuda_mapping() if report.gpus else None
    if nproc > 1 and mapping is not None and mapping.known and nproc > len(mapping.gpus):
        raise InvalidInput(
            f"--nproc {nproc}: each replica needs a GPU of its own, and CUDA numbers "
            f"{len(mapping.gpus)} here"
        )


def _check_cuda_index(index: int, report) -> None:
    if report.gpus:
        mapping = report.cuda_mapping()
        if mapping.known and mapping.get(index) is None:
            count = len(mapping.gpus)
            seen = f"cuda:0 to cuda:{count - 1}" if count > 1 else "cuda:0"
            raise InvalidInput(
                f"--device cuda:{index}: CUDA numbers {count} GPU(s) here ({seen})"
                if count
                else f"--device cuda:{index}: CUDA_VISIBLE_DEVICES hides every GPU"
            )
        return
    if report.nvidia_device_files_present or ROCM_DEVICE_FILE.exists():
        return  # GPUs may be there although NVML cannot read them: the cell will tell
    raise InvalidInput(
        f"--device cuda:{index}: no GPU here (NVML lists none, and there is no /dev/nvidia* "
        "or /dev/kfd); use --device cpu, or auto"
    )


def expand(
    config: RunConfig, report, run_id: str, measured: Sequence[MeasuredStep] = ()
) -> tuple[str, DeviceTraits, Cells]:
    """The run's cells. `measured`: the device's measured steps (measured_steps_for), which
    `--policy auto` rates each framework's policies from where they apply."""
    device, traits = resolve_device(config.device, report)
    if device.startswith("cuda"):
        _check_gpus_per_node(max(config.nproc), report)
    frameworks = resolve_frameworks(config.frameworks)
    names = resolve_workloads(config.workload_names, traits.kind)
    workloads = [describe_workload(name) for name in names]
    # `auto` per framework: the same device may run a policy fast in one and slow in the
    # other (fp16 on an AVX-512 FP16 CPU: slow in Keras, fast in torch with AMX-FP16).
    # float32 first in each round, whatever order they were named in: it is every other
    # cell's twin, which a cell that cannot pay is held to (backends/stopping.py).
    policies_of = {
        f: sorted(resolve_policies(config.policies, traits, f, measured), key=_after_float32)
        for f in frameworks
    }
    # The policies asked for other than by `auto` (by name, or `all`): they run even where a
    # workload makes them slow; `auto` leaves such a cell out, saying why.
    named = set(
        resolve_policies([n for n in config.policies if n.strip().lower() != "auto"], traits)
    )
    cells: list[Cell] = []
    threads = config.threads or available_cores()
    from_run = {name: getattr(config, name) for name in PASSED_FROM_RUN}
    for framework in frameworks:
        missing = None if installed(framework) else INSTALL_HINTS[framework]
        for workload in workloads:
            settings = config.workloads[workload.name]
            from_workload = {name: getattr(settings, name) for name in PASSED_FROM_WORKLOAD}
            units = settings.units
            if units is None:
                units = workload.default_units(traits.kind)
            # A language model's heads, layers and seq_len: set, else the device's preset.
            sizes = {
                name: getattr(settings, name) if getattr(settings, name) is not None else preset
                for name, preset in workload.default_sizes(traits.kind).items()
            }
            if sizes:
                workload.shape(units, **sizes)  # InvalidInput where they make no model
            # Repeats in rounds (float32 r0, bf16 r0, float32 r1, bf16 r1, ...): slow drift of
            # the machine then hits every policy alike instead of one policy's whole series.
            for repeat in range(config.rounds):
                for policy in policies_of[framework]:
                    for recipe in recipes(config, framework, policy):
                        spec = CellSpec(
                            **from_run,
                            **from_workload,
                            # The fields worked out per cell (WORKED_OUT says why).
                            run_id=run_id,
                            cell_id=cell_id(framework, workload.name, policy.name, recipe, repeat),
                            framework=framework,
                            workload=workload.name,
                            policy=policy.name,
                            repeat=repeat,
                            device=device,
                            batch_size=settings.batch_size * recipe.batch_scale_16bit,
                            reference_batch_size=settings.batch_size,
                            units=units,
                            # Each repeat its own seed, so accuracy deltas get a spread too.
                            seed=config.seed + repeat,
                            loss_scale=recipe.loss_scale,
                            accumulate=recipe.accumulate,
                            batch_scale_16bit=recipe.batch_scale_16bit,
                            compile=recipe.compile,
                            nproc=recipe.nproc,
                            grad_comm=recipe.grad_comm,
                            intra_op_threads=threads,
                            inter_op_threads=threads,
                            data=cell_data(config, workload),
                            **sizes,
                        )
                        skip = _skip_reason(
                            policy, traits, framework, missing, config.fp8_mode, measured
                        )
                        skip = skip or _unsupported_by(workload, framework)
                        if policy not in named:
                            skip = skip or _auto_leaves_out(policy, traits, workload)
                        reference = None
                        if spec.world_size > 1 and config.nnodes == 1 and 1 in config.nproc:
                            single = dataclasses.replace(recipe, nproc=1, grad_comm="fp32")
                            reference = cell_id(
                                framework, workload.name, policy.name, single, repeat
                            )
                        cells.append(Cell(spec, skip, scaling_reference=reference))
    if config.adaptive:
        # --repeat auto decides after whole rounds (runner/adaptive.py): a round is every cell
        # of the matrix once, so the repeat is the outermost loop (a stable sort keeps the rest).
        cells.sort(key=lambda cell: cell.spec.repeat)
    note = left_out_note(config.policies, traits, frameworks, measured)
    notes = [note] if note else []
    notes += no_fast_path_notes(cells, config.policies, traits, config.fp8_mode, measured)
    return device, traits, Cells(cells, notes)


def _after_float32(policy: Policy) -> bool:
    """The sort key that puts float32 first and keeps the others' order (a stable sort)."""
    return policy is not FLOAT32


@dataclass(frozen=True)
class Recipe:
    """One combination of the recipe axes (docs/recipes.md) that a cell trains with."""

    loss_scale: float | None = None
    accumulate: int = 1
    batch_scale_16bit: int = 1
    compile: bool = False
    nproc: int = 1  # replicas per node
    nnodes: int = 1
    grad_comm: str = "fp32"  # torch data-parallel cells only

    def suffix(self) -> str:
        """The cell id's mark for every value that is not the default: `@ls1024@acc4`."""
        marks = []
        if self.loss_scale is not None:
            marks.append(f"@ls{self.loss_scale:g}")
        if self.accumulate != 1:
            marks.append(f"@acc{self.accumulate}")
        if self.batch_scale_16bit != 1:
            marks.append(f"@bs{self.batch_scale_16bit}")
        if self.compile:
            marks.append("@compiled")
        if self.nproc != 1:
            marks.append(f"@np{self.nproc}")
        if self.nnodes != 1:
            marks.append(f"@nodes{self.nnodes}")
        if self.grad_comm != "fp32":
            marks.append(f"@comm-{self.grad_comm}")
        return "".join(marks)


def recipes(config: RunConfig, framework: str, policy: Policy) -> list[Recipe]:
    """The recipes a cell of this framework and policy runs: the product of the axes, where
    an axis that does not apply keeps its default instead of repeating an identical cell.

    A loss scale applies to the loss-scaled policy (mixed_float16) only, the batch factor to
    the 16-bit policies only (float32 is their reference at 1x), torch.compile to torch only;
    accumulation and the world size to all. The gradient-communication precision marks torch
    cells of more than one replica only. World size is the outer loop: a world-size-1 cell
    runs before the data-parallel cells that take it as their scaling reference.

    A torch float8 cell compiles whatever the axis says unless --fp8-eager
    (backends/torch/fp8.fp8_compiled): with `--compile --also-eager` its eager cell would
    train, compile and time exactly what its compiled cell does, so it runs once, as the
    compiled cell, beside the other policies' compiled cells."""
    sixteen = policy.compute_dtype in ("float16", "bfloat16")
    loss_scales = config.loss_scale if policy.loss_scaling else [None]
    batch_scales = config.batch_scale_16bit if sixteen else [1]
    compiles = config.compile if framework == "torch" else [False]
    if policy.fp8 and framework == "torch" and not config.fp8_eager and True in compiles:
        compiles = [True]
    combos = itertools.product(config.nproc, config.accumulate, compiles, batch_scales, loss_scales)
    found = []
    for nproc, acc, comp, bs, ls in combos:
        parallel = nproc * config.nnodes > 1
        comm = config.grad_comm if parallel and framework == "torch" else "fp32"
        found.append(Recipe(ls, acc, bs, comp, nproc, config.nnodes, comm))
    return list(dict.fromkeys(found))


def cell_id(framework: str, workload: str, policy: str, recipe: Recipe, repeat: int) -> str:
    return f"{framework}/{workload}/{policy}{recipe.suffix()}/r{repeat}"


def _skip_reason(
    policy: Policy,
    traits: DeviceTraits,
    framework: str,
    missing: str | None,
    fp8_mode: str,
    measured: Sequence[MeasuredStep] = (),
) -> str | None:
    if missing:
        return f"{framework} is not installed: {missing}"
    rating = rate(policy, traits, framework, measured)
    if rating.rating is Rating.UNSUPPORTED:
        return f"{policy.name} is unsupported on {traits.name}: {rating.reason}"
    if policy.fp8 and fp8_mode == "hardware" and rating.rating is not Rating.FAST:
        # Asked for fp8 GEMMs in hardware: never a silent emulation instead.
        return f"--fp8-mode hardware: {traits.name} has no fp8 GEMMs ({rating.reason})"
    return None


def _auto_leaves_out(policy: Policy, traits: DeviceTraits, workload) -> str | None:
    """`--policy auto` on a workload whose layers make the policy slow here (fp16
    convolutions on a CPU without AMX-FP16, policies.rate_convolutions): a skipped cell that
    says why and how to run it anyway."""
    if not workload.convolutional:
        return None
    rating = rate_convolutions(policy, traits)
    if rating is None or rating.rating is Rating.FAST:
        return None
    return (
        f"--policy auto leaves {policy.short} out of {workload.name} on {traits.name}: "
        f"{rating.reason}; name it (-p {policy.short}) to run it anyway"
    )


def cell_data(config: RunConfig, workload) -> str:
    """The data mode a cell records: --data (auto, real, synthetic) for a built-in workload;
    "user" for a user workload, which trains on its own data(seed) whatever --data says, so
    that its record never claims a synthetic or real set it did not use."""
    return USER_DATA if workload.kind == "user" else config.data


def _unsupported_by(workload, framework: str) -> str | None:
    """A user workload may define one framework's builder only (a zoo model is one
    framework's): the other's cells say so, in the user's words ("hf:gpt2 has no TensorFlow
    version: it trains in torch only"). Where no cell can train, preflight refuses the run."""
    return workload.no_version(framework) if workload.kind == "user" else None
