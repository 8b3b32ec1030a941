"""Your own workload (docs/workloads.md, "Your own workload"): a spec a user module defines,
found by `--workload package.module:name` or by the name of an entry point in the
`mpbench.workloads` group; or a model zoo's name (`hf:gpt2`, `keras:MobileNetV2`,
`torchvision:resnet50`, `timm:...`), which mpbench.workloads.zoo builds as such a spec.

mpbench controls the precision policy, the threads, the timing and the seeds; the workload
owns the model, the optimizer, the loss and the data. Nothing here imports a framework: the
parent (the CLI) learns what a user workload is by importing it in a child process (`probe`),
and each cell imports it itself (`load`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.workloads import zoo

ENTRY_POINT_GROUP = "mpbench.workloads"
FRAMEWORK_FIELDS = {"torch": "torch", "tensorflow": "keras"}  # framework -> builder field
PROBE_TIMEOUT_S = 120.0
# The image layouts a user workload's data may declare (UserWorkload.layout); None: as given.
LAYOUTS = (None, "NHWC", "NCHW")


@dataclass(frozen=True)
class UserWorkload:
    """A workload of your own.

    - `data(seed)`: the training and test data as numpy arrays, `(x_train, y_train, x_test,
      y_test)`; or `(x, y)` / an iterable of `(x, y)` batches, which mpbench concatenates and
      splits, the last fifth of the samples held out as the test set. It is read once per
      cell, before anything is timed (mpbench preloads every dataset).
    - `torch(device)`: `(model, optimizer, loss)` with the model on `device`, the optimizer
      over its parameters, `loss(output, y)` a mean loss (it gets the model's output cast to
      float32, as the built-ins' losses do). None: the workload has no torch version.
    - `keras()`: `(model, optimizer, loss)`, built under the dtype policy mpbench has already
      set; mpbench compiles it (adding the loss scaling mixed_float16 needs). None: no Keras
      version.
    - `flops_per_step(batch_size)`: the training FLOPs of one step of `batch_size` samples,
      or a number (for the reference batch size only). None: measured with torch's
      FlopCounterMode in torch cells, unknown in Keras cells.
    - `output`: which tensor of the torch model's output mpbench trains, counts and evaluates
      on, where the forward returns more than a tensor: a key of a `ModelOutput` or dict
      (None: "logits"), or an index of a tuple (None: 0). Models as their libraries return
      them (Hugging Face's) need no wrapper.
    - `layout`: "NHWC" or "NCHW", the layout of the 4-d image arrays `data` returns; mpbench
      transposes them for the framework that wants the other (torch NCHW, Keras NHWC). None:
      every framework gets them as they are.
    """

    name: str
    data: Callable[[int], Any]
    torch: Callable[[Any], tuple[Any, Any, Callable[..., Any]]] | None = None
    keras: Callable[[], tuple[Any, Any, Any]] | None = None
    batch_size: int = 32
    epochs: int = 1
    flops_per_step: Callable[[int], float] | float | None = None
    description: str = ""
    output: str | int | None = None
    layout: str | None = None
    kind = "user"

    @property
    def frameworks(self) -> list[str]:
        return [f for f, attr in FRAMEWORK_FIELDS.items() if getattr(self, attr) is not None]

    def flops(self, batch_size: int) -> float | None:
        """The given FLOPs of one step of `batch_size` samples, or None."""
        given = self.flops_per_step
        if given is None:
            return None
        if callable(given):
            return float(given(batch_size))
        return float(given) if batch_size == self.batch_size else None


@dataclass
class UserWorkloadInfo:
    """What the parent knows of a user workload, from `probe` (no framework imported)."""

    name: str  # as given: "package.module:attr" or an entry point's name
    frameworks: list[str]
    batch_size: int
    epochs: int
    description: str = ""
    source: dict[str, Any] = field(default_factory=dict)
    kind = "user"
    convolutional = False  # unknown: a rule for convolutions never guesses them

    def default_units(self, device_kind: str) -> None:
        return None

    def default_sizes(self, device_kind: str) -> dict[str, int]:
        return {}


def is_reference(name: str) -> bool:
    """Whether `name` names a workload itself (a zoo name, or `module:attr`), not an entry
    point's name."""
    return zoo.is_zoo(name) or ":" in name


def entry_point(name: str) -> str | None:
    """The `module:attr` an installed package's `mpbench.workloads` entry point names."""
    for found in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if found.name == name:
            return found.value
    return None


def entry_point_names() -> list[str]:
    return sorted({e.name for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)})


def reference(name: str) -> str | None:
    """`module:attr` (or the zoo name itself) for a user workload's name, or None where it
    names none."""
    return name.strip() if is_reference(name) else entry_point(name.strip())


def load(name: str) -> UserWorkload:
    """Import the workload `name` names (in a cell, or in the probe). A module outside an
    installed package is found as `python -m` finds one: the working directory comes first on
    sys.path. A zoo name is taken by the zoo first (`hf:gpt2` is never module hf's gpt2).
    InvalidInput (one line naming `name`) where it is not a workload."""
    if zoo.is_zoo(name):
        return _checked(name, zoo.build(name))
    return _checked(name, _imported(name))


def _imported(name: str) -> UserWorkload:
    """The UserWorkload a `module:attr` (or an entry point) names, imported."""
    ref = reference(name)
    if ref is None:
        raise InvalidInput(f"--workload {name!r}: not a built-in workload, not package.module:name")
    module_name, _, attr = ref.partition(":")
    if not module_name or not attr:
        raise InvalidInput(f"--workload {name!r}: must be package.module:name")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise InvalidInput(
                f"--workload {name!r}: no module named {module_name!r} (on sys.path, with the "
                "working directory first)"
            ) from None
        raise InvalidInput(f"--workload {name!r}: importing {module_name} failed: {exc}") from None
    except Exception as exc:  # the module's own error: said in one line, the value named
        raise InvalidInput(
            f"--workload {name!r}: importing {module_name} raised {type(exc).__name__}: {exc}"
        ) from None
    found = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise InvalidInput(
                f"--workload {name!r}: module {module_name} has no {attr!r}; "
                + _workloads_in(module)
            )
        found = getattr(found, part)
    if not isinstance(found, UserWorkload):
        raise InvalidInput(
            f"--workload {name!r}: {attr} is a {type(found).__name__}, not an "
            "mpbench.workloads.UserWorkload"
        )
    return found


def _workloads_in(module: Any) -> str:
    """What a module offers, for a message about a name it lacks."""
    found = sorted(k for k, v in vars(module).items() if isinstance(v, UserWorkload))
    return f"it has: {', '.join(found)}" if found else "it defines no UserWorkload"


def _checked(name: str, workload: UserWorkload) -> UserWorkload:
    """`workload`, checked to be one a cell can run."""
    if not workload.frameworks:
        raise InvalidInput(f"--workload {name!r}: defines neither a torch nor a keras builder")
    if workload.output is not None and (
        isinstance(workload.output, bool) or not isinstance(workload.output, str | int)
    ):
        raise InvalidInput(
            f"--workload {name!r}: output must be a key (str) or an index (int), not "
            f"{type(workload.output).__name__}"
        )
    if workload.layout not in LAYOUTS:
        raise InvalidInput(
            f"--workload {name!r}: layout {workload.layout!r} is not one of "
            + ", ".join(repr(x) for x in LAYOUTS)
        )
    for size in ("batch_size", "epochs"):
        value = getattr(workload, size)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(f"--workload {name!r}: {size} must be a positive integer")
    return workload


def source(name: str) -> dict[str, Any]:
    """Where the workload came from: module, attribute, file and its sha256, and the
    installed distribution and version that holds the module, where one does. A zoo name's:
    the zoo, the model, its full configuration and the library's version."""
    if zoo.is_zoo(name):
        return zoo.source(name)
    module_name, _, attr = (reference(name) or name).partition(":")
    module = sys.modules[module_name]
    path = getattr(module, "__file__", None)
    found: dict[str, Any] = {"module": module_name, "attribute": attr, "file": path}
    if path:
        found["sha256"] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    top = module_name.split(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        found["package"] = dist
        found["version"] = importlib.metadata.version(dist)
        break
    return found


def describe(name: str) -> dict[str, Any]:
    workload = load(name)
    # A zoo model is built once here (the probe), so a configuration the library refuses is
    # one line before anything runs, not an error in every cell.
    description = zoo.describe(name) if zoo.is_zoo(name) else workload.description
    return {
        "name": name,
        "frameworks": workload.frameworks,
        "batch_size": workload.batch_size,
        "epochs": workload.epochs,
        "description": description or workload.name,
        "source": source(name),
    }


_PROBED: dict[str, UserWorkloadInfo] = {}
# Not `-m mpbench.workloads.user`: run as __main__, its UserWorkload would be another class.
_PROBE = "import sys; from mpbench.workloads.user import main; sys.exit(main(sys.argv[1:]))"


def probe(name: str) -> UserWorkloadInfo:
    """The workload `name` names, imported in a child process (the parent imports no
    framework); InvalidInput with the child's one line where it is not a workload."""
    if name in _PROBED:
        return _PROBED[name]
    ran = subprocess.run(
        [sys.executable, "-c", _PROBE, name],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        cwd=os.getcwd(),
    )
    lines = ran.stdout.strip().splitlines()
    if ran.returncode != 0 or not lines:
        said = lines[-1] if lines else (ran.stderr.strip().splitlines() or ["no output"])[-1]
        raise InvalidInput(said)
    info = UserWorkloadInfo(**json.loads(lines[-1]))
    _PROBED[name] = info
    return info


def main(argv: list[str]) -> int:
    """The probe's child process: REF's description as one JSON line (exit 0), or
    one line saying why it is not a workload (exit 2)."""
    sys.path.insert(0, os.getcwd())
    try:
        described = describe(argv[0])
    except InvalidInput as exc:
        print(exc)
        return 2
    print(json.dumps(described))
    return 0
