"""Your own workload (docs/workloads.md, "Your own workload"): a spec a user module defines,
found by `--workload package.module:name` or by the name of an entry point in the
`mpbench.workloads` group; or a model zoo's name (`hf:gpt2`, `keras:MobileNetV2`,
`torchvision:resnet50`, `timm:...`), which mpbench.workloads.zoo builds as such a spec.
The zoo sits above this module (its models are UserWorkloads): it fills the registry here
(ZOOS) that `load`, `source` and `describe` look a zoo name up in.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput, one_line
from mpbench.workloads.inputs import each, named, parts, rows, samples

ENTRY_POINT_GROUP = "mpbench.workloads"
FRAMEWORK_FIELDS = {"torch": "torch", "tensorflow": "keras"}  # framework -> builder field
FRAMEWORK_NAMES = {"torch": "torch", "tensorflow": "TensorFlow"}  # as messages name them
PROBE_TIMEOUT_S = 120.0
BYTES_PER_FLOAT32 = 4
# The image layouts a user workload's data may declare (UserWorkload.layout); None: as given.
LAYOUTS = (None, "NHWC", "NCHW")


@dataclass(frozen=True)
class UserWorkload:
    """A workload of your own.

    - `data(seed)`: the training and test data as numpy arrays, `(x_train, y_train, x_test,
      y_test)`; or `(x, y)` / an iterable of `(x, y)` batches, which mpbench concatenates and
      splits, the last fifth of the samples held out as the test set. It is read once per
      cell, before anything is timed (mpbench preloads every dataset). `x` may be a dict of
      arrays by the model's keyword arguments (`{"input_ids": ..., "decoder_input_ids": ...}`,
      every array with the samples first): torch cells then call `model(**x)`
      (workloads/inputs.py); Keras cells are skipped, with the reason. `y` is one array.
    - `torch(device)`: `(model, optimizer, loss)` with the model on `device`, the optimizer
      over its parameters, `loss(output, y)` a mean loss (it gets the model's output cast to
      float32, as the built-ins' losses do). None: the workload has no torch version.
    - `keras()`: `(model, optimizer, loss)`, built under the dtype policy mpbench has already
      set; mpbench compiles it (adding the loss scaling mixed_float16 needs). None: no Keras
      version.
    - `flops_per_step(batch_size)`: the training FLOPs of one step of `batch_size` samples,
      or a number (for the reference batch size only). None: measured with torch's
      FlopCounterMode in torch cells, and from the TensorFlow graph of one step in Keras
      cells (backends/tensorflow/flops.py; unknown, with the reason, where it cannot).
    - `output`: which tensor of the torch model's output mpbench trains, counts and evaluates
      on, where the forward returns more than a tensor: a key of a `ModelOutput` or dict
      (None: "logits"), or an index of a tuple (None: 0). Models as their libraries return
      them (Hugging Face's) need no wrapper.
    - `layout`: "NHWC" or "NCHW", the layout of the 4-d image arrays `data` returns; mpbench
      transposes them for the framework that wants the other (torch NCHW, Keras NHWC). None:
      every framework gets them as they are.
    - `torch_policy(model, policy)`: called in each torch cell with the built model and the
      cell's precision policy (mpbench.policies.Policy: `name`, `compute_dtype`, `fp8`),
      before anything is counted or timed, to choose how the model computes under it (an
      hf: mixture of experts picks its experts' implementation: zoo/hf_experts.py), never
      what it trains. What it returns (a dict, or None) is the record's
      `config.chosen_for_policy`: chosen per policy, so no part of the cell's identity
      (results/identity.py). None: the model runs as built.
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
    torch_policy: Callable[[Any, Any], dict[str, Any] | None] | None = None
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
    # A zoo model's, counted by the probe's one build: what training it holds at least.
    params: int | None = None
    optimizer: str | None = None
    optimizer_states: int | None = None  # float32 tensors the optimizer keeps per parameter
    kind = "user"
    convolutional = False  # unknown: a rule for convolutions never guesses them

    def default_units(self, device_kind: str) -> None:
        return None

    def default_sizes(self, device_kind: str) -> dict[str, int]:
        return {}

    def no_version(self, framework: str) -> str | None:
        """Why `framework` cannot train this workload, in its user's words (the skipped
        cell's reason, and the refusal where no cell can train); None where it can."""
        if framework in self.frameworks:
            return None
        trains_in = " and ".join(FRAMEWORK_NAMES[f] for f in self.frameworks)
        if self.source.get("zoo"):  # named without its query: the cell's id has it whole
            model = self.name.partition("?")[0]
            said = f"{model} has no {FRAMEWORK_NAMES[framework]} version"
            return f"{said}: it trains in {trains_in} only"
        said = f"{self.name} has no {FRAMEWORK_NAMES[framework]} version"
        return (
            f"{said}: its UserWorkload has no {FRAMEWORK_FIELDS[framework]} builder, so it "
            f"trains in {trains_in} only"
        )

    def training_bytes(self) -> int | None:
        """The least memory training this model holds: its float32 weights and gradients
        and the optimizer's float32 states, 4 bytes each per parameter. Activations,
        workspace, autocast's 16-bit weight copies and the data come on top, so what this
        says cannot fit cannot. None where the parameters are unknown (a module's workload:
        its model is built in the cells only)."""
        if self.params is None or self.optimizer_states is None:
            return None
        return self.params * BYTES_PER_FLOAT32 * (2 + self.optimizer_states)


# --- the model zoos' names -----------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """What the probe's one build of a zoo model found: its description, and what training it
    holds at least (UserWorkloadInfo.training_bytes): its parameters (None where it was not
    built, its framework missing) and its optimizer's float32 states per parameter."""

    description: str
    params: int | None = None
    optimizer: str = "Adam"
    optimizer_states: int = 2  # Adam's and AdamW's two moments


@dataclass(frozen=True)
class Resolved:
    """A zoo name, resolved: the workload, its record (`source`), and `check`, which builds
    the model once (on torch's meta device where it can) to refuse what the library refuses
    and to count its parameters; the probe runs it, a cell does not."""

    workload: UserWorkload
    source: dict[str, Any]
    check: Callable[[], Built]


# A zoo's prefix ("hf", "keras", ...) -> what resolves a name with it. Filled by
# mpbench.workloads.zoo.registry, which mpbench.workloads imports: so it is full before
# anything here is imported, and this module imports no zoo (the zoo imports it).
ZOOS: dict[str, Callable[[str], Resolved]] = {}
# prefix -> the framework its resolver imports (the probe is forked from that framework's
# warm server where there is one: runner/launchers/helper.py)
ZOO_FRAMEWORKS: dict[str, str] = {}


def register_zoo(prefix: str, resolve: Callable[[str], Resolved], framework: str) -> None:
    ZOOS[prefix] = resolve
    ZOO_FRAMEWORKS[prefix] = framework


def zoo_framework(name: str) -> str | None:
    """The framework a zoo name's model is built in; None for any other name (a user's
    module may import either framework, or both)."""
    return ZOO_FRAMEWORKS.get(name.strip().partition(":")[0]) if is_zoo(name) else None


def is_zoo(name: str) -> bool:
    """Whether `name` is a zoo name: it starts with a zoo's prefix and a colon. A zoo takes
    such a name before the `module:attr` path would."""
    prefix, colon, _ = name.strip().partition(":")
    return bool(colon) and prefix in ZOOS


def _zoo_model(name: str) -> Resolved:
    return ZOOS[name.strip().partition(":")[0]](name)


def is_reference(name: str) -> bool:
    """Whether `name` names a workload itself (a zoo name, or `module:attr`), not an entry
    point's name."""
    return is_zoo(name) or ":" in name


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
    if is_zoo(name):
        return _checked(name, _zoo_model(name).workload)
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


# --- the data ---------------------------------------------------------------------------

TEST_FRACTION = 0.2  # of a workload's samples, when its data gives no test set
ROLES = ("x_train", "y_train", "x_test", "y_test")
FORMS = (
    "return (x_train, y_train, x_test, y_test) or (x, y) as a tuple of numpy arrays (x may be "
    "a dict of them by the model's keyword arguments), or an iterable of (x, y) batches"
)
_PAIRS = "each sample needs its target: x and y must have the same length"


@dataclass
class UserData:
    """A user workload's data as every cell trains on it: the four arrays; how they came from
    what `data(seed)` returned (the record's data.origin); and the arrays mpbench cast to
    float32, said once before the run."""

    arrays: tuple[Any, Any, Any, Any]  # x_train, y_train, x_test, y_test
    how: str
    cast: list[str] = field(default_factory=list)  # "x_train (float64)", ...

    @property
    def train_size(self) -> int:
        return samples(self.arrays[0])

    @property
    def test_size(self) -> int:
        return samples(self.arrays[2])


def user_data(workload: UserWorkload, seed: int, name: str | None = None) -> UserData:
    """`workload.data(seed)`, checked and made what a cell trains on: four arrays as they
    are; two arrays, or an iterable of (x, y) batches concatenated, with the last fifth of
    the samples held out as the test set. InvalidInput, one line in the user's terms (the
    form, a role's dtype, mismatched lengths), where it is not data a cell can train on.

    Floating-point arrays reach the model as float32, as the built-ins' data does: numpy makes
    float64 by default, and a float64 batch meets a float32 model in every torch cell ("mat1
    and mat2 must have the same dtype"); the precision policy, not the data, sets the compute
    dtype. The cast is said once before the run and kept in the record's data.origin.
    `name`: the workload as the user named it (`--workload`), for the messages."""
    said = f"--workload {name or workload.name!r}: data({seed})"
    arrays, how = _four_arrays(workload.data(seed), said)
    for role, array in zip(ROLES, arrays, strict=True):
        _check_values(role, array, said)
    _check_samples(arrays, said)
    arrays, cast = _as_float32(arrays)
    if cast:
        how += f"; {', '.join(cast)} cast to float32"
    return UserData(tuple(arrays), how, cast)


def _four_arrays(given: Any, said: str) -> tuple[list[Any], str]:
    """(x_train, y_train, x_test, y_test) from any of the forms data() may return, and how."""
    if isinstance(given, tuple) and len(given) == 4:
        return [_role_array(a, role, said) for a, role in zip(given, ROLES, strict=True)], (
            "the workload's train and test arrays"
        )
    if isinstance(given, tuple) and len(given) == 2:
        x, y = (_role_array(a, role, said) for a, role in zip(given, ("x", "y"), strict=True))
        how = "the workload's arrays"
    else:
        batches = _batches(given, said)
        x = _joined([_role_array(b[0], "x", said) for b in batches], "x", said)
        y = _concatenated([_role_array(b[1], "y", said) for b in batches], "y", said)
        how = f"the workload's {len(batches)} batches, concatenated"
    if _single(x) or y.ndim == 0 or samples(x) != len(y):
        raise InvalidInput(f"{said} returned x and y of {_samples(x)} and {_samples(y)}; " + _PAIRS)
    held = max(1, int(samples(x) * TEST_FRACTION))
    if samples(x) <= held:
        raise InvalidInput(
            f"{said} returned {_samples(x)}: too few to hold out a fifth as the test set and "
            "train on the rest"
        )
    how += f", the last {held} samples held out as the test set"
    train, test = slice(None, -held), slice(-held, None)
    return [rows(x, train), y[train], rows(x, test), y[test]], how


def _role_array(value: Any, role: str, said: str) -> Any:
    """An x (one array, or a mapping of the model's keyword arguments to arrays) or a y (one
    array) as data() gave it; InvalidInput where it is neither."""
    if role.startswith("x"):
        return _inputs(value, role, said)
    if isinstance(value, Mapping):
        raise InvalidInput(
            f"{said}: {role} is a {type(value).__name__}; the targets are one array (x alone "
            "may be a dict of the model's inputs by keyword)"
        )
    return _array(value, role, said)


def _inputs(value: Any, role: str, said: str) -> Any:
    """x as one array, or as a dict of arrays by the model's keyword arguments, each with a
    sample per row and as many samples as the others (a batch takes the same rows of each)."""
    if not isinstance(value, Mapping):
        return _array(value, role, said)
    if not value:
        raise InvalidInput(
            f"{said}: {role} is an empty {type(value).__name__}; a dict x gives each of the "
            "model's inputs under its keyword argument"
        )
    arrays = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise InvalidInput(
                f"{said}: {role} has the key {key!r}; a dict x's keys are the model's keyword "
                "arguments (torch cells call model(**x))"
            )
        arrays[key] = _array(item, f"{role}[{key!r}]", said)
    for part, array in parts(arrays, role):
        if array.ndim == 0:
            raise InvalidInput(f"{said}: {part} is a single number, not one per sample")
    lengths = {part: len(array) for part, array in parts(arrays, role)}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{part} {n:,}" for part, n in lengths.items())
        raise InvalidInput(
            f"{said}: the inputs of {role} differ in samples ({shown}); every input needs one "
            "row per sample, as a batch takes the same rows of each"
        )
    return arrays


def _single(x: Any) -> bool:
    """Whether x is one number rather than one per sample (a dict x's inputs are checked as
    they are read: _inputs)."""
    return not named(x) and x.ndim == 0


def _batches(given: Any, said: str) -> list[tuple[Any, Any]]:
    """An iterable of (x, y) pairs as a list; InvalidInput naming what came instead."""
    # An array is iterable too, row by row: never a list of batches.
    array = hasattr(given, "shape") and hasattr(given, "dtype")
    if array or isinstance(given, str | bytes | dict) or not hasattr(given, "__iter__"):
        raise InvalidInput(f"{said} returned {_what(given)}; {FORMS}")
    batches = list(given)
    if not batches:
        raise InvalidInput(f"{said} returned {_what(given)}: no batches; {FORMS}")
    for batch in batches:
        if not (isinstance(batch, tuple | list) and len(batch) == 2):
            raise InvalidInput(f"{said} returned {_what(given, batches)}; {FORMS}")
    return batches


def _what(given: Any, items: list[Any] | None = None) -> str:
    """What data() returned, in a few words: 'a list of 4 ints', 'a numpy array of shape (8,)'."""
    if given is None:
        return "None"
    if hasattr(given, "shape") and hasattr(given, "dtype"):
        return f"a numpy array of shape {tuple(given.shape)}"
    kind = type(given).__name__
    if items is None and isinstance(given, tuple | list):
        items = list(given)
    if items is None:
        return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"
    if not items:
        return f"an empty {kind}"
    kinds = sorted({"array" if hasattr(i, "dtype") else type(i).__name__ for i in items})
    return f"a {kind} of {len(items)} {' and '.join(k + 's' for k in kinds)}"


def _array(value: Any, role: str, said: str) -> Any:
    """`value` as a numpy array; InvalidInput where it is not one of numbers."""
    import numpy as np

    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise InvalidInput(f"{said}: {role} is not an array ({one_line(exc)})") from None
    if array.dtype.kind not in "biuf":
        what = {"O": "Python objects", "U": "text", "S": "bytes"}.get(array.dtype.kind)
        what = f"{what or 'values'} ({array.dtype})"
        raise InvalidInput(f"{said}: {role} holds {what}, not numbers")
    return array


def _joined(batches: list[Any], role: str, said: str) -> Any:
    """The batches' x concatenated: one array, or a dict x input by input (every batch naming
    the same inputs)."""
    if not any(named(x) for x in batches):
        return _concatenated(batches, role, said)
    keys = [tuple(x) if named(x) else None for x in batches]
    if len(set(keys)) > 1:
        shown = "; ".join(sorted({", ".join(k) if k else "one array" for k in keys}))
        raise InvalidInput(
            f"{said}: its batches' {role} differ in their inputs ({shown}); each batch's "
            f"{role} must name the same inputs"
        )
    return {
        key: _concatenated([x[key] for x in batches], f"{role}[{key!r}]", said)
        for key in batches[0]
    }


def _concatenated(arrays: list[Any], role: str, said: str) -> Any:
    import numpy as np

    shapes = sorted({array.shape[1:] for array in arrays if array.ndim})
    if any(array.ndim == 0 for array in arrays) or len(shapes) > 1:
        shown = ", ".join(str(s) for s in shapes) or "single numbers"
        raise InvalidInput(
            f"{said}: its batches' {role} samples differ in shape ({shown}); each batch's "
            f"{role} must have the samples as its first axis and the same shape after it"
        )
    return np.concatenate(arrays)


def _check_values(role: str, given: Any, said: str) -> None:
    import numpy as np

    for part, array in parts(given, role):
        if array.ndim == 0:
            raise InvalidInput(f"{said}: {part} is a single number, not one per sample")
        if array.dtype.kind == "f":
            bad = array.size - np.count_nonzero(np.isfinite(array))
            if bad:
                raise InvalidInput(f"{said}: {part} holds {bad:,} NaN or infinite values")


def _check_samples(arrays: list[Any], said: str) -> None:
    """Each x with as many samples as its y, a sample of the test set shaped as one of the
    training set's, and neither set empty."""
    x_train, y_train, x_test, y_test = arrays
    for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if samples(x) != len(y):
            raise InvalidInput(
                f"{said}: x_{split} has {samples(x):,} samples and y_{split} {len(y):,}; {_PAIRS}"
            )
        if not samples(x):
            raise InvalidInput(f"{said}: x_{split} has no samples")
    _check_same_inputs(x_train, x_test, said)
    for role, train, test in (("x", x_train, x_test), ("y", y_train, y_test)):
        pairs = zip(parts(train, f"{role}_train"), parts(test, f"{role}_test"), strict=True)
        for (trained, a), (tested, b) in pairs:
            if a.shape[1:] != b.shape[1:]:
                raise InvalidInput(
                    f"{said}: a sample of {trained} has shape {a.shape[1:]} and one of "
                    f"{tested} {b.shape[1:]}; the model sees both"
                )


def _check_same_inputs(x_train: Any, x_test: Any, said: str) -> None:
    """x_train and x_test in the same form: one array each, or dicts of the same inputs (the
    same keys, in the same order)."""
    names = [list(x) if named(x) else None for x in (x_train, x_test)]
    if names[0] != names[1]:
        shown = [", ".join(n) if n is not None else "one array" for n in names]
        raise InvalidInput(
            f"{said}: x_train is {shown[0]} and x_test {shown[1]}; the model sees both, so "
            "they name the same inputs"
        )


def _samples(given: Any) -> str:
    if _single(given):
        return "a single number"
    count = samples(given)
    return f"{count:,} sample{'' if count == 1 else 's'}"


def _as_float32(arrays: list[Any]) -> tuple[list[Any], list[str]]:
    """The arrays (each input of a dict x alike), each floating-point one other than float32
    cast to float32; and which."""
    import numpy as np

    cast: list[str] = []
    for role, given in zip(ROLES, arrays, strict=True):
        for part, array in parts(given, role):
            if array.dtype.kind == "f" and array.dtype != np.float32:
                cast.append(f"{part} ({array.dtype})")

    def float32(array: Any) -> Any:
        wider = array.dtype.kind == "f" and array.dtype != np.float32
        return array.astype(np.float32) if wider else array

    return [each(given, float32) for given in arrays], cast


def source(name: str) -> dict[str, Any]:
    """Where the workload came from: module, attribute, file and its sha256, and the
    installed distribution and version that holds the module, where one does. A zoo name's:
    the zoo, the model, its full configuration and the library's version."""
    if is_zoo(name):
        return _zoo_model(name).source
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
    found = {
        "name": name,
        "frameworks": workload.frameworks,
        "batch_size": workload.batch_size,
        "epochs": workload.epochs,
        "description": workload.description or workload.name,
        "source": source(name),
    }
    if is_zoo(name):
        # A zoo model is built once here (the probe), so a configuration the library refuses
        # is one line before anything runs, not an error in every cell; and its parameters
        # are counted, so a model that cannot fit is refused before a cell allocates it.
        built = _zoo_model(name).check()
        found["description"] = built.description
        found["params"] = built.params
        found["optimizer"] = built.optimizer
        found["optimizer_states"] = built.optimizer_states
    return found


_PROBED: dict[str, UserWorkloadInfo] = {}
PROBE_MAIN = "mpbench.workloads.user:main"  # what the probe's process runs, with the name
# How the probe's process is run: (main, argv, timeout, framework) -> a CompletedProcess
# (runner/launchers/helper.py's run_main: a fork of a warm server where there is one).
RunJob = Callable[[str, list[str], float, "str | None"], "subprocess.CompletedProcess[str]"]


def probe(name: str, run_job: RunJob | None = None) -> UserWorkloadInfo:
    """The workload `name` names, imported in a process of its own (the parent imports no
    framework): `run_job`'s, else a new interpreter; InvalidInput with the process's one line
    where it is not a workload."""
    if name in _PROBED:
        return _PROBED[name]
    run = run_job or run_in_new_interpreter
    ran = run(PROBE_MAIN, [name], PROBE_TIMEOUT_S, zoo_framework(name))
    lines = ran.stdout.strip().splitlines()
    if ran.returncode != 0 or not lines:
        said = lines[-1] if lines else (ran.stderr.strip().splitlines() or ["no output"])[-1]
        raise InvalidInput(said)
    info = UserWorkloadInfo(**json.loads(lines[-1]))
    _PROBED[name] = info
    return info


def run_in_new_interpreter(
    target: str, argv: list[str], timeout: float, framework: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`target`'s main ("module:function", called with `argv`; its return the exit status) in
    a new interpreter in this working directory, its output captured (`framework` unused: a
    RunJob's signature)."""
    module, _, function = target.partition(":")
    # Not `-m module`: run as __main__, its UserWorkload would be another class.
    code = f"import sys; from {module} import {function}; sys.exit({function}(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=os.getcwd(),
    )


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
