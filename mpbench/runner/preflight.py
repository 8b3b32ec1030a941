"""Checks made once, in the parent, before any cell runs or any file is written.

A batch larger than the training set, warm-up that leaves no step to time, `--data real`
with no data, a corrupt or hostile data file, more replicas per node than the node can
hold, a user workload's data or model output that no cell can train on (runner/user_check.py),
a zoo model too big for the memory there is, or frameworks none of the workloads has a version
for would otherwise fail in every cell's child process, one `error` record at a time (or run
nothing and exit 0). Here they are one line and exit 2, and no run directory is created.
Settings that change no cell of this run (a loss scale without an fp16 cell, ...) are said
once, as warnings, after the plan's own notes (the policies `--policy auto` left out,
runner/matrix.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mpbench.backends.base import plan_steps
from mpbench.detect.system import busy_at_start
from mpbench.errors import InvalidInput
from mpbench.policies import resolve
from mpbench.results.contention import busy_warning
from mpbench.runner.config import RunConfig
from mpbench.runner.launchers.helper import describe_workload
from mpbench.runner.matrix import Cell, available_cores
from mpbench.runner.user_check import check_user_workload
from mpbench.workloads import shadowed_entry_point
from mpbench.workloads.user import FRAMEWORK_NAMES, UserWorkloadInfo


def preflight(
    config: RunConfig, cells: list[Cell], warn: Callable[[str], None], report: Any = None
) -> None:
    """InvalidInput if a cell that would run cannot; `warn` gets data fall-back notes,
    settings that change no cell and, when other processes already keep the machine busy,
    one line saying so. The warnings come once every check has passed: a refusal is then
    the only line on stderr, not the last of several. `report` (detect's): where a GPU's
    memory is read from (None: a model's size is held to the host's memory only)."""
    said: list[str] = list(getattr(cells, "notes", []))  # expand's Cells; a plain list: none
    _check(config, cells, said.append, report)
    for message in said:
        warn(message)


def _check(
    config: RunConfig, cells: list[Cell], warn: Callable[[str], None], report: Any = None
) -> None:
    running = dict.fromkeys(cell.spec.workload for cell in cells if cell.skip_reason is None)
    parallel = max((cell.spec.nproc for cell in cells if cell.skip_reason is None), default=1)
    check_some_cell_trains(config, cells)
    check_ranks_per_node(cells, available_cores(), available_memory())
    check_models_fit(cells, report)
    for unused in unused_settings(config, cells):
        warn(unused)
    tensorflow_parallel = any(
        c.spec.framework == "tensorflow" and c.spec.world_size > 1 and c.skip_reason is None
        for c in cells
    )
    if config.grad_comm != "fp32" and tensorflow_parallel:
        # recipes() gives TensorFlow cells fp32: said once here, where the user sees it.
        warn(
            f"--grad-comm {config.grad_comm} applies to torch DDP only: TensorFlow's "
            "MirroredStrategy all-reduces the gradients in their own dtype, float32 (the "
            "variables' dtype under every Keras policy); its records say grad_comm fp32"
        )
    if parallel > 1 and cells[0].spec.device == "cpu":
        warn(
            f"--nproc {parallel} on a CPU: the replicas share its cores, so the figures "
            "measure the data-parallel plumbing, not scaling"
        )
    for name in dict.fromkeys(cell.spec.workload for cell in cells):
        shadowed = shadowed_entry_point(name)
        if shadowed:
            warn(shadowed)
    for name in running:
        workload = describe_workload(name)
        if workload.kind == "user":
            found = _user_data(name, workload, config, cells, warn)
        else:
            found = _builtin_data(name, workload, config, cells, warn)
        if found is not None:
            _check_batches(name, *found, config, cells)
    if running:
        # Last, once the run is certain to start: 0.5 s of other processes' CPU use.
        busy = busy_warning(busy_at_start())
        if busy:
            warn(busy)


def _builtin_data(
    name: str, workload: Any, config: RunConfig, cells: list[Cell], warn: Callable[[str], None]
) -> tuple[int, str]:
    """A built-in's data found (or its synthetic stand-in chosen): its training samples and
    where they come from."""
    from mpbench.data import check_data  # numpy: only when a run really starts

    settings = config.workloads[name]
    slow = _too_big_for_a_cpu(name, workload, cells)
    if slow:
        warn(slow)
    # A text dataset is cut into windows of the cells' sequence length (one per workload).
    seq_len = next((cell.spec.seq_len for cell in cells if cell.spec.workload == name), None)
    data = check_data(
        workload.dataset,
        config.data,
        config.data_dir,
        config.allow_download,
        seed=config.seed,
        synthetic_train_size=settings.synthetic_train_size,
        synthetic_test_size=settings.synthetic_test_size,
        seq_len=seq_len,
    )
    if data.warning:
        warn(data.warning)
    if data.source == "synthetic" and config.data == "auto":
        # auto fell back: the cells get the stand-in directly instead of each one
        # searching (and trying to download) again, which could only end the same way.
        for cell in cells:
            if cell.spec.workload == name:
                cell.spec.data = "synthetic"
    return data.train_size, data.origin or f"{data.source} {data.dataset}"


def _user_data(
    name: str,
    workload: UserWorkloadInfo,
    config: RunConfig,
    cells: list[Cell],
    warn: Callable[[str], None],
) -> tuple[int, str] | None:
    """A user workload's data (and its torch model's output) checked once, in a child
    process (runner/user_check.py): its training samples and where they come from; None where
    the check could not finish (said once; the cells go ahead) or the data is a zoo's own."""
    if workload.source.get("zoo"):
        return None  # mpbench's synthetic data, made to fit the model it built in the probe
    torch_cells = any(
        c.spec.workload == name and c.spec.framework == "torch" and c.skip_reason is None
        for c in cells
    )
    # Forked from the warm server of a framework its cells run in, where there is one.
    framework = next(
        (c.spec.framework for c in cells if c.spec.workload == name and c.skip_reason is None),
        None,
    )
    found = check_user_workload(name, config.seed, torch_cells, framework)
    if found.unchecked:
        warn(f"{name}: {found.unchecked}; its cells will say what they meet")
        return None
    if found.cast:
        warn(
            f"{name}: data() gives {', '.join(found.cast)}; mpbench casts them to float32, "
            "as the built-ins' data is (the precision policy sets the compute dtype, not the "
            "data), and each record's data.origin says so"
        )
    return found.train_size, f"its data({config.seed})"


def _check_batches(
    name: str, train_size: int, where: str, config: RunConfig, cells: list[Cell]
) -> None:
    """Every distinct effective batch a running cell of `name` feeds per optimizer step (the
    16-bit batch factor and accumulation multiply it), largest first, held to the training
    set: the same rule each cell applies, said once."""
    settings = config.workloads[name]
    batches = {
        cell.spec.effective_batch * cell.spec.world_size
        for cell in cells
        if cell.spec.workload == name and cell.skip_reason is None
    }
    for batch in sorted(batches, reverse=True):
        try:
            plan_steps(
                train_size, batch, settings.epochs, settings.max_steps, settings.warmup_steps
            )
        except ValueError as exc:
            hint = _recipe_hint(batch, settings.batch_size)
            raise InvalidInput(f"{name} on {where}: {exc}{hint}") from None


def check_some_cell_trains(config: RunConfig, cells: list[Cell]) -> None:
    """InvalidInput where no workload of the run has a version in any of its frameworks
    (`-w hf:gpt2 -f tensorflow`): every cell would be skipped, nothing run, and the run exit
    0. Where some cells can train, the others are skipped cells that say why (matrix.py)."""
    workloads = dict.fromkeys(cell.spec.workload for cell in cells)
    frameworks = list(dict.fromkeys(cell.spec.framework for cell in cells))
    infos = {name: describe_workload(name) for name in workloads}
    reasons = [
        info.no_version(framework)
        for info in infos.values()
        if isinstance(info, UserWorkloadInfo)
        for framework in frameworks
    ]
    if not cells or None in reasons or len(reasons) < len(workloads) * len(frameworks):
        return  # a built-in (every framework), or some pair that trains
    asked = ", ".join(frameworks)
    option = f"-f {asked}" if config.frameworks else f"the installed frameworks ({asked})"
    trains_in = sorted({f for info in infos.values() for f in info.frameworks})
    named = " and ".join(FRAMEWORK_NAMES[f] for f in trains_in)
    fix = (
        f"use -f {' -f '.join(trains_in)}"
        if config.frameworks
        else f"install {named}: pip install " + " ".join(f"'mpbench[{f}]'" for f in trains_in)
    )
    raise InvalidInput(f"{option}: {'; '.join(reasons)}, so no cell of this run can train; {fix}")


def check_models_fit(cells: list[Cell], report: Any = None) -> None:
    """InvalidInput where a zoo model's training cannot fit in the memory of the device its
    cells run on: its parameters, counted by the probe's meta-device build, times the bytes
    training holds for each at least (UserWorkloadInfo.training_bytes), against the GPU's
    memory, or the host's available memory on a CPU (once per replica of --nproc there).
    Without it an 80-billion-parameter config allocates in its cell until the machine runs
    out. A lower bound against what there is: a model this refuses cannot fit."""
    running = [cell.spec for cell in cells if cell.skip_reason is None]
    for name in dict.fromkeys(spec.workload for spec in running):
        info = describe_workload(name)
        need = info.training_bytes() if isinstance(info, UserWorkloadInfo) else None
        if need is None:
            continue
        spec = next(spec for spec in running if spec.workload == name)
        place, memory = _device_memory(spec.device, report)
        replicas = max(s.nproc for s in running if s.workload == name) if place == "host" else 1
        if memory is None or need * replicas <= memory:
            continue
        per = need // info.params
        copies = f", × {replicas} replicas of --nproc {replicas}" if replicas > 1 else ""
        where = f"{spec.device} has" if place == "gpu" else "this machine has available"
        raise InvalidInput(
            f"--workload {name!r}: training it holds at least {need * replicas / 2**30:,.1f} "
            f"GiB ({info.params:,} parameters × {per} bytes: each float32 weight, its gradient "
            f"and {info.optimizer}'s {info.optimizer_states} states{copies}; activations come on "
            f"top), more than the {memory / 2**30:,.1f} GiB {where}; make the model smaller"
        )


def _device_memory(device: str, report: Any) -> tuple[str, int | None]:
    """("host", the available memory) for a CPU or Apple's unified memory, which the model
    shares with everything else; ("gpu", its memory) for a CUDA device detect lists, else
    None (the cell will tell)."""
    if not device.startswith("cuda"):
        return "host", available_memory()
    if report is None:
        return "gpu", None
    _, _, index = device.partition(":")
    gpu = report.gpu_for_cuda_index(int(index or 0))
    return "gpu", getattr(gpu, "memory_total_bytes", None)


# A CPU's matmul peak is well under a TFLOP/s (detect --measure): a workload above this many
# FLOPs a step takes minutes a step there, and is named as such before it starts.
CPU_STEP_FLOPS_WARNING = 1e13


def _too_big_for_a_cpu(name: str, workload, cells: list[Cell]) -> str | None:
    """What to say when a built-in sized for a GPU (transformer_lm_large) runs on a CPU."""
    spec = next((c.spec for c in cells if c.spec.workload == name and c.skip_reason is None), None)
    if spec is None or spec.device != "cpu":
        return None
    flops = workload.flops_per_step(spec.batch_size, spec.units, **spec.sizes)
    if flops < CPU_STEP_FLOPS_WARNING:
        return None
    return (
        f"{name} on a CPU: {flops / 1e12:,.0f} TFLOP a training step, minutes a step at a "
        "CPU's matmul speed; it is sized for fp8 on a GPU (fp8 on a CPU is emulated anyway)"
    )


def _recipe_hint(batch: int, configured: int) -> str:
    if batch == configured:
        return ""
    return (
        f" (the batch {configured} grown by --batch-scale-16bit, --accumulate and the world "
        f"size of --nproc to {batch} samples per optimizer step)"
    )


# The least one torch rank holds resident: the interpreter, torch and the smallest workload
# on synthetic data (measured: 322 MiB for mnist_dense at --nproc 2 on a CPU, torch 2.13).
RANK_MEMORY_BYTES = 320 * 2**20


def check_ranks_per_node(cells: list[Cell], cores: int, available: int | None) -> None:
    """InvalidInput when a node cannot hold the replicas --nproc starts on it.

    On a CPU each replica needs a core of its own (`cores`: those this process may run on):
    more replicas than cores only take turns, and torchrun starts them all the same, up to
    the 1024 the option allows. Each torch rank is a process and needs RANK_MEMORY_BYTES of
    the `available` memory. (GPUs: one per replica, checked where the device is resolved.)"""
    parallel = [c.spec for c in cells if c.skip_reason is None and c.spec.nproc > 1]
    if not parallel:
        return
    nproc = max(spec.nproc for spec in parallel)
    if parallel[0].device == "cpu" and nproc > cores:
        raise InvalidInput(
            f"--nproc {nproc}: on a CPU each replica needs a core of its own, and this "
            f"process may run on {cores} (its CPU affinity); pass --nproc {cores} or fewer"
        )
    ranks = max((spec.nproc for spec in parallel if spec.framework == "torch"), default=0)
    if available is not None and ranks * RANK_MEMORY_BYTES > available:
        fits = available // RANK_MEMORY_BYTES
        raise InvalidInput(
            f"--nproc {ranks}: each torch rank is a process that holds at least "
            f"{RANK_MEMORY_BYTES // 2**20} MiB, and this node has {available / 2**30:.1f} GiB "
            f"available; it holds --nproc {fits} at most"
        )


def available_memory() -> int | None:
    """Bytes the node's ranks may still take: the free memory, or less where this process's
    memory cgroup (a container's limit) leaves less; None where neither can be read."""
    import psutil

    from mpbench.runner.launchers.oom import memory_cgroup

    try:
        free: int | None = psutil.virtual_memory().available
    except (OSError, RuntimeError):
        free = None
    cgroup = memory_cgroup()
    if cgroup is None:
        return free
    try:
        limit = (cgroup / "memory.max").read_text().strip()  # "max": no limit
        used = int((cgroup / "memory.current").read_text())
    except (OSError, ValueError):
        return free
    if not limit.isdigit():
        return free
    left = max(int(limit) - used, 0)
    return left if free is None else min(free, left)


def unused_settings(config: RunConfig, cells: list[Cell]) -> list[str]:
    """Settings that change no cell that runs: each would otherwise pass without a word,
    and the run would look like it measured them."""
    running = [cell.spec for cell in cells if cell.skip_reason is None]
    if not running:
        return []
    found = []
    static = [scale for scale in config.loss_scale if scale is not None]
    if static and not any(resolve(spec.policy).loss_scaling for spec in running):
        found.append(
            f"--loss-scale {static[0]:g}: applies to mixed_float16 cells only, and none runs "
            "here; add -p fp16 to measure it"
        )
    if config.grad_comm != "fp32" and not any(spec.world_size > 1 for spec in running):
        found.append(
            f"--grad-comm {config.grad_comm}: applies to data-parallel cells only, and every "
            "cell here runs one replica; add --nproc 2 (or more) to measure it"
        )
    if True in config.compile and not any(spec.framework == "torch" for spec in running):
        found.append(
            "--compile: applies to torch cells only, and none runs here; TensorFlow's "
            "switch is --jit on"
        )
    # float8 cells skipped here (--fp8-mode hardware off sm_89+, a missing framework) say
    # why in their records: the options did not go unused, and -p fp8 was given.
    planned_fp8 = [cell.spec for cell in cells if resolve(cell.spec.policy).fp8]
    if config.fp8_mode != "auto" and not planned_fp8:
        found.append(
            f"--fp8-mode {config.fp8_mode}: applies to float8 cells only, and none runs here; "
            "add -p fp8 to measure it"
        )
    torch_fp8 = any(spec.framework == "torch" for spec in planned_fp8)
    if config.fp8_eager and not torch_fp8:
        found.append(
            "--fp8-eager: applies to torch float8 cells only, and none runs here; Keras' "
            "float8 cells compile with --jit on"
        )
    if config.fp8_recipe != "tensorwise" and not torch_fp8:
        found.append(
            f"--fp8-recipe {config.fp8_recipe}: applies to torch float8 cells only, and none "
            "runs here; Keras' float8 layers have one recipe (delayed scaling)"
        )
    return found
