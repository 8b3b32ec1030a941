"""Checks made once, in the parent, before any cell runs or any file is written.

A batch larger than the training set, warm-up that leaves no step to time, `--data real`
with no data, or a corrupt or hostile data file would otherwise fail in every cell's child
process, one `error` record at a time. Here they are one line and exit 2, and no run
directory is created.
"""

from __future__ import annotations

from collections.abc import Callable

from mpbench.backends.base import plan_steps
from mpbench.detect.system import busy_at_start
from mpbench.errors import InvalidInput
from mpbench.runner.cells import Cell
from mpbench.runner.config import RunConfig
from mpbench.telemetry.contention import busy_warning
from mpbench.workloads import get_workload


def preflight(config: RunConfig, cells: list[Cell], warn: Callable[[str], None]) -> None:
    """InvalidInput if a cell that would run cannot; `warn` gets data fall-back notes and,
    when other processes already keep the machine busy, one line saying so."""
    from mpbench.data import check_data  # numpy: only when a run really starts

    running = dict.fromkeys(cell.spec.workload for cell in cells if cell.skip_reason is None)
    parallel = max((cell.spec.nproc for cell in cells if cell.skip_reason is None), default=1)
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
    for name in running:
        workload = get_workload(name)
        settings = config.workloads[name]
        data = check_data(
            workload.dataset,
            config.data,
            config.data_dir,
            config.allow_download,
            seed=config.seed,
            synthetic_train_size=settings.synthetic_train_size,
            synthetic_test_size=settings.synthetic_test_size,
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


def _recipe_hint(batch: int, configured: int) -> str:
    if batch == configured:
        return ""
    return (
        f" (the batch {configured} grown by --batch-scale-16bit, --accumulate and the world "
        f"size of --nproc to {batch} samples per optimizer step)"
    )
