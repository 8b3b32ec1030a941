"""Checks made once, in the parent, before any cell runs or any file is written.

A batch larger than the training set, warm-up that leaves no step to time, `--data real`
with no data, a corrupt or hostile data file, or more replicas per node than the node can
hold would otherwise fail in every cell's child process, one `error` record at a time. Here
they are one line and exit 2, and no run directory is created. Settings that change no cell
of this run (a loss scale without an fp16 cell, ...) are said once, as warnings, after the
plan's own notes (the policies `--policy auto` left out, runner/matrix.py).
"""

from __future__ import annotations

from collections.abc import Callable

from mpbench.backends.base import plan_steps
from mpbench.detect.system import busy_at_start
from mpbench.errors import InvalidInput
from mpbench.policies import resolve
from mpbench.results.contention import busy_warning
from mpbench.runner.config import RunConfig
from mpbench.runner.matrix import Cell, available_cores
from mpbench.workloads import describe_workload, shadowed_entry_point


def preflight(config: RunConfig, cells: list[Cell], warn: Callable[[str], None]) -> None:
    """InvalidInput if a cell that would run cannot; `warn` gets data fall-back notes,
    settings that change no cell and, when other processes already keep the machine busy,
    one line saying so. The warnings come once every check has passed: a refusal is then
    the only line on stderr, not the last of several."""
    said: list[str] = list(getattr(cells, "notes", []))  # expand's Cells; a plain list: none
    _check(config, cells, said.append)
    for message in said:
        warn(message)


def _check(config: RunConfig, cells: list[Cell], warn: Callable[[str], None]) -> None:
    from mpbench.data import check_data  # numpy: only when a run really starts

    running = dict.fromkeys(cell.spec.workload for cell in cells if cell.skip_reason is None)
    parallel = max((cell.spec.nproc for cell in cells if cell.skip_reason is None), default=1)
    check_ranks_per_node(cells, available_cores(), available_memory())
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
        settings = config.workloads[name]
        if workload.kind == "user":
            continue  # its data is made in the cell, by the workload's own code
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
        # Every distinct effective batch a running cell feeds per optimizer step (the
        # 16-bit batch factor and accumulation multiply it), largest first: the same rule
        # each cell applies, said once.
        batches = {
            cell.spec.effective_batch * cell.spec.world_size
            for cell in cells
            if cell.spec.workload == name and cell.skip_reason is None
        }
        for batch in sorted(batches, reverse=True):
            try:
                plan_steps(
                    data.train_size,
                    batch,
                    settings.epochs,
                    settings.max_steps,
                    settings.warmup_steps,
                )
            except ValueError as exc:
                where = data.origin or f"{data.source} {data.dataset}"
                hint = _recipe_hint(batch, settings.batch_size)
                raise InvalidInput(f"{name} on {where}: {exc}{hint}") from None
    if running:
        # Last, once the run is certain to start: 0.5 s of other processes' CPU use.
        busy = busy_warning(busy_at_start())
        if busy:
            warn(busy)


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
