"""A user workload checked once, before the first cell (runner/preflight.py): its data as
every cell will get it (workloads/user.py `user_data`: the forms, dtypes and lengths), and,
where its torch cells run, what its model returns for one small batch, the model built on
torch's meta device (shapes only: no memory, no weights, whatever its size).

Otherwise a workload whose data() returns a list of ints, or whose model returns one number
for a batch, fails in every cell with the framework's traceback line (`cannot unpack
non-iterable int object`, `Dimension out of range`). Like the probe (workloads/user.py), the
check runs in a process of its own (a fork of a warm server where the run has one:
launchers/helper.py): the parent imports neither the user's module nor a framework.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.runner.launchers.helper import run_main

CHECK_TIMEOUT_S = 300.0  # data() may build a large set; each cell would pay the same
META_BATCH = 2  # samples of x_train the model's output is read for
CHECK_MAIN = "mpbench.runner.user_check:main"  # what the check's process runs


@dataclass
class UserCheck:
    """What the check found: the data's sizes, the arrays mpbench casts to float32, and, where
    the check could not finish, why (the cells then go ahead and say what they meet)."""

    train_size: int | None = None
    test_size: int | None = None
    cast: list[str] = field(default_factory=list)
    unchecked: str | None = None


def check_user_workload(
    name: str, seed: int, torch_cells: bool, framework: str | None = None
) -> UserCheck:
    """`name`'s data for `seed` and, with `torch_cells`, its torch model's output, checked in
    a process of its own (forked from `framework`'s warm server where there is one:
    launchers/helper.py); InvalidInput with its one line where a cell could not train."""
    argv = [name, str(seed), *(["torch"] if torch_cells else [])]
    try:
        ran = run_main(CHECK_MAIN, argv, CHECK_TIMEOUT_S, framework)
    except subprocess.TimeoutExpired:
        return UserCheck(unchecked=f"its data was not checked within {CHECK_TIMEOUT_S:.0f} s")
    lines = ran.stdout.strip().splitlines()
    if ran.returncode == 2 and lines:
        raise InvalidInput(lines[-1])
    if ran.returncode != 0 or not lines:
        last = (ran.stderr.strip().splitlines() or [f"exit status {ran.returncode}"])[-1]
        return UserCheck(unchecked=f"checking its data failed ({last})")
    return UserCheck(**json.loads(lines[-1]))


def main(argv: list[str]) -> int:
    """The check's child process: NAME SEED [torch] -> UserCheck's fields as one JSON line
    (exit 0), or one line saying what no cell could train on (exit 2)."""
    sys.path.insert(0, os.getcwd())
    name, seed, torch_cells = argv[0], int(argv[1]), "torch" in argv[2:]
    try:
        found = _check(name, seed, torch_cells)
    except InvalidInput as exc:
        print(exc)
        return 2
    print(json.dumps(found))
    return 0


def _check(name: str, seed: int, torch_cells: bool) -> dict[str, Any]:
    from mpbench.workloads import user
    from mpbench.workloads.inputs import head
    from mpbench.workloads.zoo import one_line

    workload = user.load(name)
    try:
        data = user.user_data(workload, seed, name)
    except InvalidInput:
        raise
    except Exception as exc:  # the workload's own error: one line, as the cell would meet it
        raise InvalidInput(
            f"--workload {name!r}: data({seed}) raised {type(exc).__name__}: {one_line(exc)}"
        ) from None
    if torch_cells and workload.torch is not None:
        _check_output(name, workload, head(data.arrays[0], META_BATCH))
    return {"train_size": data.train_size, "test_size": data.test_size, "cast": data.cast}


def _check_output(name: str, workload: Any, x: Any) -> None:
    """InvalidInput where the model's output for a batch of `x` (one array, or a dict of them
    by keyword, called as the cells call it: backends/torch/inputs.py) is no tensor a cell can
    train on: not a tensor (backends/torch/outputs.py says what came back), or a 0-d one (a
    single number for the whole batch, which the loss cannot pair with the batch's targets).

    Only a certain answer refuses: a builder or forward that cannot run on the meta device
    (it reads a file, calls .item(), needs CUDA) is left to the cells, which say why."""
    try:
        import torch

        from mpbench.backends.torch.inputs import call
        from mpbench.backends.torch.outputs import OutputError, take
        from mpbench.workloads.inputs import each, samples
    except ImportError:  # its torch cells are skipped, with the install hint
        return

    def on_meta(array: Any) -> Any:
        batch = torch.from_numpy(array).to("meta")
        if workload.layout == "NHWC" and batch.dim() == 4:
            batch = batch.permute(0, 3, 1, 2)  # as a torch cell feeds NHWC images
        return batch

    try:
        with torch.device("meta"), torch.no_grad():
            model = workload.torch(torch.device("meta"))[0]
            output = call(model, each(x, on_meta))
    except Exception:
        return
    try:
        tensor = take(output, workload.output)
    except OutputError as exc:
        raise InvalidInput(f"--workload {name!r}: {exc}") from None
    if tensor.dim() == 0:
        raise InvalidInput(
            f"--workload {name!r}: the model returns a 0-d tensor (a single number) for a "
            f"batch of {samples(x)} samples; mpbench trains on one output per sample: return "
            f"the batch's outputs, shape ({samples(x)}, ...), and let loss(output, y) reduce them"
        )
