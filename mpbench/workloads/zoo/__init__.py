"""A model zoo by name (docs/workloads.md, "A model zoo by name"): `-w hf:gpt2?n_layer=4`,
`-w keras:MobileNetV2`, `-w torchvision:resnet50`, `-w timm:resnet18` name a library's model,
built from its code with random weights, with synthetic data of the right kind.

A zoo name resolves to an ordinary `UserWorkload` built in code, so that everything mpbench
does for a user's workload (the probe, the cells, the record) it does for these. Nothing is
downloaded: configurations are built locally, no pretrained weights are asked for. Importing
this module imports no library (the CLI's process imports it); a zoo imports its package when
one of its names is resolved, in the probe's child process or in a cell.

This package sits above workloads/user.py: here, what every zoo builds with (a name taken
apart, its query's options, the library imported, `resolved`, where each zoo's resolve
ends); in registry.py, which module resolves which prefix, registered in user.py's ZOOS.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from mpbench.errors import InvalidInput, one_line
from mpbench.workloads.user import ZOOS, Built, Resolved, UserWorkload
from mpbench.workloads.user import is_zoo as is_zoo  # the runner asks the zoo by this name

# prefix -> the mpbench extra that installs its package (registry.py says which module of
# this package resolves each prefix's names)
EXTRAS = {"hf": "hf", "keras": "tensorflow", "torchvision": "vision", "timm": "vision"}


@dataclass(frozen=True)
class ZooName:
    """`zoo:model?key=value&...` taken apart; values read as int, float, bool or None where
    they look like one (`n_layer=4`, `lr=3e-4`, `use_cache=false`, `n_inner=none`)."""

    text: str  # the name as given (stripped): what messages quote
    zoo: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)

    def invalid(self, said: str) -> InvalidInput:
        return InvalidInput(f"--workload {self.text!r}: {said}")


def parse(name: str) -> ZooName:
    text = name.strip()
    zoo, _, rest = text.partition(":")
    model, _, query = rest.partition("?")
    parsed = ZooName(text, zoo, model.strip())
    if zoo not in ZOOS:
        raise parsed.invalid(f"not a zoo name ({', '.join(p + ':' for p in ZOOS)})")
    if not parsed.model:
        raise parsed.invalid(f"name a model after '{zoo}:'")
    options: dict[str, Any] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError as exc:
        raise parsed.invalid(f"the query must be key=value&key=value ({exc})") from None
    for key, value in pairs:
        if not key:
            raise parsed.invalid(f"a query value without a key: ={value}")
        if not value:
            raise parsed.invalid(f"{key} has no value")
        if key in options:
            raise parsed.invalid(f"{key} is given twice")
        options[key] = query_value(value)
    return ZooName(text, zoo, parsed.model, options)


_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_WORDS = {"true": True, "false": False, "none": None, "null": None}


def query_value(text: str) -> Any:
    """A query's value as what it looks like: an int, a float, a bool, None, else the text."""
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return _WORDS.get(text.lower(), text)


def resolved(
    name: ZooName,
    library: Any,
    workload: UserWorkload,
    check: Callable[[], Built],
    record: dict[str, Any],
) -> Resolved:
    """Where every zoo's resolve ends: the workload, its check, and its record (the
    `config.workload_source`: enough to build the same model again), which names the zoo and
    the name as given first, then the model's own `record`, then the imported library and
    its version."""
    source = {"zoo": name.zoo, "name": name.text, **record}
    source.update(package=library.__name__, version=version(library))
    return Resolved(workload, source, check)


def test_samples(samples: int) -> int:
    """The test set beside `samples` training samples: a fifth as many again, at least one."""
    return max(1, samples // 5)


def held_out(samples: int, make: Callable[[int], tuple[Any, Any]]) -> tuple[Any, ...]:
    """(x_train, y_train, x_test, y_test) from `make(n)`'s (x, y) of n samples: `samples` to
    train on, and the test set (test_samples) held out after them."""
    x, y = make(samples + test_samples(samples))
    return x[:samples], y[:samples], x[samples:], y[samples:]


class Options:
    """A name's query values, taken key by key by the zoo; what is left goes to the library
    (the model's configuration, or its factory's keyword arguments)."""

    def __init__(self, name: ZooName) -> None:
        self.name = name
        self.left = dict(name.options)

    def integer(self, key: str, default: int, minimum: int = 1) -> int:
        value = self.left.pop(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.name.invalid(f"{key} must be an integer >= {minimum}, not {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        value = self.left.pop(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise self.name.invalid(f"{key} must be a positive number, not {value!r}")
        return float(value)

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.left.pop(key, default)
        if value not in choices:
            raise self.name.invalid(f"{key} {value!r} is not one of {', '.join(choices)}")
        return value

    def refuse(self, keys: dict[str, str]) -> None:
        """Keys that mpbench sets itself, each refused with what to do instead."""
        for key, instead in keys.items():
            if key in self.left:
                raise self.name.invalid(f"{key} is not a query key: {instead}")


# Keys the CLI owns for every workload, refused in a query with the option to use.
CLI_KEYS = {
    "batch_size": "use --batch-size",
    "epochs": "use --epochs",
    "seed": "use --seed",
}


def import_package(name: ZooName, package: str, install: str | None = None) -> Any:
    """`package`, imported; else one line saying how to install it: `install` where the zoo
    gives one (torchvision and timm: from the index the installed torch came from), else the
    mpbench extra. Any exception counts, not only ImportError: a torchvision built for
    another torch raises RuntimeError (`operator torchvision::nms does not exist`)."""
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if exc.name == package:
            how = install or f"pip install 'mpbench[{EXTRAS[name.zoo]}]'"
            raise name.invalid(f"{package} is not installed: {how}") from None
        failed = exc
    except Exception as exc:
        failed = exc
    said = f"importing {package} failed ({type(failed).__name__}: {one_line(failed)})"
    if "torchvision" in f"{failed} {_traceback_modules(failed)}":
        said += "; " if package == "torchvision" else f"; {package} imports torchvision: "
        said += (
            f"install the torchvision built for torch {_torch_version() or '(none installed)'}"
            f", from the same index: {torchvision_install()}"
        )
    raise name.invalid(said) from None


def _traceback_modules(exc: BaseException) -> str:
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    return " ".join(frames)


# Where torch publishes its builds (cpu, cu128, ...), each with the torchvision made for it.
PYTORCH_INDEX = "https://download.pytorch.org/whl/"


def _torch_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def torchvision_install() -> str:
    """The pip command that installs the torchvision made for the installed torch: the
    registry's newest torchvision wants another torch, and the default index's wheel (CUDA)
    beside a CPU-only torch dies on import. torch 2.N pairs with torchvision 0.(N+15), from
    the index the torch build came from (its local version: `+cpu` is .../whl/cpu)."""
    torch_version = _torch_version()
    if torch_version is None:
        return (
            f"pip install torch torchvision --index-url {PYTORCH_INDEX}cpu (with an NVIDIA "
            "GPU: pip install 'mpbench[torch,vision]')"
        )
    release, _, local = torch_version.partition("+")
    parts = release.split(".")
    if len(parts) >= 2 and parts[0] == "2" and parts[1].isdigit():
        wanted = f"'torchvision==0.{int(parts[1]) + 15}.*'"
    else:
        wanted = "torchvision"
    index = f" --index-url {PYTORCH_INDEX}{local}" if local else ""
    return f"pip install {wanted}{index}"


def torchvision_missing() -> str:
    """How to install torchvision where it is not installed: the command first, then why
    not the extra where the torch is a CPU build (the default index's wheel links CUDA)."""
    torch_version = _torch_version()
    if torch_version is None:
        return torchvision_install()
    if torch_version.endswith("+cpu"):
        return (
            f"{torchvision_install()} (the build for torch {torch_version}: the default "
            "index's torchvision, which pip install 'mpbench[vision]' brings, links CUDA and "
            "fails to import beside a CPU torch)"
        )
    return f"{torchvision_install()} (the build for torch {torch_version})"


def timm_missing() -> str:
    """How to install timm: after a torchvision made for the installed torch (timm imports
    torchvision; installed after it, pip keeps that build)."""
    if importlib.util.find_spec("torchvision") is not None:
        return "pip install timm"
    return f"{torchvision_missing()}, then pip install timm (timm imports torchvision)"


def close_matches(value: str, choices: list[str], count: int = 3) -> str:
    """' (did you mean a, b?)' where some choices are close to `value`, else ''."""
    import difflib

    found = difflib.get_close_matches(value, choices, n=count, cutoff=0.6)
    lowered = {c.lower(): c for c in choices}
    if value.lower() in lowered and lowered[value.lower()] not in found:
        found.insert(0, lowered[value.lower()])
    return f" (did you mean {', '.join(found)}?)" if found else ""


def version(module: Any) -> str | None:
    """The imported package's version: its `__version__`, else its distribution's."""
    found = getattr(module, "__version__", None)
    if isinstance(found, str):
        return found
    try:
        return importlib.metadata.version(module.__name__)
    except importlib.metadata.PackageNotFoundError:
        return None


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
