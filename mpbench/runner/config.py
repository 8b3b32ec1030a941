"""Run configuration: a TOML file (configs/*.toml) plus command-line overrides.

The file has a `[run]` table (the matrix and its defaults), one table per workload under
`[workloads.<name>]` (batch size, epochs, step cap, units), and `[tensorflow]` (loop, jit).
Command-line options override the file; the file overrides the workload's reference values.

Every setting has one entry in `SETTINGS` (its type and limits), and the same check applies
whether the value came from the file or the command line: a TOML `timeout = -5` is refused
exactly as `--timeout -5` is.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput, unknown_choice
from mpbench.workloads import WORKLOADS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# Where `mpbench run` looks for configs/default.toml: the working directory, then the checkout.
PACKAGE_CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DATA_MODES = ("auto", "real", "synthetic")
LOOPS = ("fit", "custom")
ON_DIVERGE = ("stop", "fallback")  # docs/telemetry.md
GRAD_COMMS = ("fp32", "fp16", "bf16")  # docs/distributed.md: the DDP communication hook
# numpy's legacy seeding (and so the data order of every cell) takes 0 .. 2**32 - 1; each
# repeat runs with seed + repeat, which must stay inside that range too.
SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class Setting:
    """One configurable value: the type it must have and the range it must lie in."""

    kind: type | tuple[type, ...]
    option: str  # the command-line spelling, for messages
    low: float | None = None
    high: float | None = None
    items: type | None = None  # element type of a list
    why: str = ""  # said when the upper limit is hit
    # Text that means a value ("auto", "5%", "10m"): (where, value) -> the value, or
    # InvalidInput; the limits then apply to what it gives.
    parse: Callable[[str, Any], Any] | None = None
    expects: str = ""  # what a value must be, where the kind alone says it badly

    def check(self, where: str, value: Any) -> Any:
        """The value, or InvalidInput naming `where` (an option or a TOML key)."""
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        # bool is an int in Python; a TOML `true` is never a valid count.
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise InvalidInput(f"{where} {value!r}: must be {_kind_name(self)}")
        if self.items is not None:
            for item in value:
                if not isinstance(item, self.items) or isinstance(item, bool):
                    raise InvalidInput(f"{where} {value!r}: must be {_kind_name(self)}")
        if isinstance(value, str) and not value.strip():
            raise InvalidInput(f"{where}: must not be empty")
        if self.parse is not None:
            value = self.parse(where, value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise InvalidInput(f"{where} {value!r}: must be a finite number")
            if self.low is not None and value < self.low:
                raise InvalidInput(f"{where} {value!r}: must be at least {self.low:g}")
            if self.high is not None and value > self.high:
                raise InvalidInput(
                    f"{where} {value!r}: must be at most {self.high:g}{self.why and ' ' + self.why}"
                )
        return value


def _kind_name(setting: Setting) -> str:
    if setting.expects:
        return setting.expects
    if setting.items is not None:
        return "a list of strings"  # the only lists in a config are lists of names
    kinds = setting.kind if isinstance(setting.kind, tuple) else (setting.kind,)
    if kinds == (int,) and setting.low is not None:
        # "-3" is a whole number too: say the range, or the message reads as a contradiction.
        return f"a whole number, at least {setting.low:g}"
    names = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}
    if float in kinds:
        return "a number"
    return " or ".join(names.get(k, k.__name__) for k in kinds)


_NUMBER = (int, float)
ADAPTIVE = "auto"  # --repeat auto: the rounds are decided by runner/adaptive.py
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(s|m|h)?", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def repeat_value(where: str, value: int | str) -> int | str:
    """A repeat count, or "auto". The command line's digits are made a number before this
    (apply_options); in a file, `repeat = "3"` is a string where a number belongs."""
    if isinstance(value, int):
        return value
    if value.strip().lower() == ADAPTIVE:
        return ADAPTIVE
    raise InvalidInput(f"{where} {value!r}: must be a whole number or 'auto'")


def fraction_value(where: str, value: float | str) -> float:
    """`5%` or 0.05 -> 0.05, as compare's percentage options take them; above 0."""
    from mpbench.compare.options import parse_fraction

    fraction = parse_fraction(where, value)
    assert fraction is not None
    if fraction <= 0:
        raise InvalidInput(f"{where} {value!r}: must be above 0")
    return fraction


def seconds_value(where: str, value: float | str) -> float:
    """Seconds, or text with a unit: 600, "600s", "10m", "1.5h"; above 0."""
    seconds = value
    if isinstance(value, str):
        found = _DURATION.fullmatch(value.strip())
        if found is None:
            raise InvalidInput(f"{where} {value!r}: must be seconds, or a number with s, m or h")
        seconds = float(found[1]) * _SECONDS[(found[2] or "s").lower()]
    if not seconds > 0:  # a NaN too
        raise InvalidInput(f"{where} {value!r}: must be above 0 seconds")
    return float(seconds)


# The [run] table and the options that override it.
RUN_SETTINGS = {
    "frameworks": Setting(list, "--framework", items=str),
    "workloads": Setting(list, "--workload", items=str),
    "policies": Setting(list, "--policy", items=str),
    "device": Setting(str, "--device"),
    "repeat": Setting(
        (int, str),
        "--repeat",
        1,
        1000,
        why="(repeats are separate processes)",
        parse=repeat_value,
        expects="a whole number or 'auto'",
    ),
    # --repeat auto (runner/adaptive.py): the target half-width of every speed-up interval,
    # the most rounds, and the time the rounds may take (None: no limit).
    "precision": Setting(
        (int, float, str),
        "--precision",
        high=1,
        why="(100 %)",
        parse=fraction_value,
        expects="a percentage like 5% or 0.05",
    ),
    "max_repeats": Setting(int, "--max-repeats", 2, 1000, why="(repeats are separate processes)"),
    "time_budget": Setting(
        (int, float, str),
        "--time-budget",
        high=7 * 24 * 3600,
        why="seconds (a week)",
        parse=seconds_value,
        expects="seconds, or a number with s, m or h (10m)",
    ),
    "seed": Setting(int, "--seed", 0, SEED_MAX, why="(numpy's seed range)"),
    "data": Setting(str, "--data"),
    "data_dir": Setting(str, "--data-dir"),
    "timeout": Setting(_NUMBER, "--timeout", 1, 7 * 24 * 3600, why="seconds (a week)"),
    "warmup_steps": Setting(int, "--warmup-steps", 0, 10**9),
    "out_dir": Setting(str, "--out"),
    "allow_download": Setting(bool, "allow_download"),
    "threads": Setting(int, "--threads", 1, 4096),
    "on_diverge": Setting(str, "--on-diverge"),
    # Training recipes (docs/recipes.md): matrix axes, so each also takes a list of values
    # (one cell per value; see AXES). A loss scale is a number or "dynamic" (loss_scale_value).
    "loss_scale": Setting((str, int, float), "--loss-scale"),
    "accumulate": Setting(int, "--accumulate", 1, 4096, why="micro-batches per optimizer step"),
    "batch_scale_16bit": Setting(int, "--batch-scale-16bit", 1, 1024),
}
# A static loss scale: float32 holds the scaled loss, so the scale must stay well inside its
# range (3.4e38); below 1 it would shrink gradients instead of protecting them.
LOSS_SCALE_LIMITS = Setting(_NUMBER, "--loss-scale", 1, 1e38, why="(float32's range)")
# A [workloads.<name>] table; the command-line options apply to every workload. Synthetic set
# sizes are range-checked by mpbench.data, which owns what a valid stand-in is.
WORKLOAD_SETTINGS = {
    "batch_size": Setting(int, "--batch-size", 1, 2**24),
    "epochs": Setting(int, "--epochs", 1, 10**6),
    "max_steps": Setting(int, "--max-steps", 1, 10**9),
    "warmup_steps": Setting(int, "--warmup-steps", 0, 10**9),
    "units": Setting(int, "--units", 1, 2**16),
    "synthetic_train_size": Setting(int, "synthetic_train_size"),
    "synthetic_test_size": Setting(int, "synthetic_test_size"),
}
TENSORFLOW_SETTINGS = {"loop": Setting(str, "--loop"), "jit": Setting(bool, "--jit")}
TORCH_SETTINGS = {"compile": Setting(bool, "--compile")}
# Data-parallel cells (docs/distributed.md). nproc is a matrix axis (`--nproc 1,2`: the same
# cell at each world size); the rest say where the job's other nodes are.
DISTRIBUTED_SETTINGS = {
    "nproc": Setting(int, "--nproc", 1, 1024, why="processes (replicas) per node"),
    "grad_comm": Setting(str, "--grad-comm"),
    "nnodes": Setting(int, "--nnodes", 1, 4096),
    "node_rank": Setting(int, "--node-rank", 0, 4095),
    "rdzv_endpoint": Setting(str, "--rdzv-endpoint"),
}
TABLES = ("run", "workloads", "tensorflow", "torch", "distributed")
# The recipe settings that are matrix axes: a value or a list of values, each its own cell.
AXES = {
    "loss_scale": RUN_SETTINGS["loss_scale"],
    "accumulate": RUN_SETTINGS["accumulate"],
    "batch_scale_16bit": RUN_SETTINGS["batch_scale_16bit"],
    "compile": TORCH_SETTINGS["compile"],
    "nproc": DISTRIBUTED_SETTINGS["nproc"],
}
MAX_AXIS_VALUES = 16
AXIS_DEFAULTS: dict[str, Any] = {
    "loss_scale": None,
    "accumulate": 1,
    "batch_scale_16bit": 1,
    "compile": False,
    "nproc": 1,
}


@dataclass
class RunOptions:
    """Everything `mpbench run` was asked on the command line (None: not given)."""

    config: Path | None = None
    frameworks: list[str] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    device: str | None = None
    epochs: int | None = None
    max_steps: int | None = None
    warmup_steps: int | None = None
    batch_size: int | None = None
    units: int | None = None
    repeat: int | str | None = None  # a count, or "auto"
    precision: str | float | None = None  # --repeat auto: "5%" or 0.05
    max_repeats: int | None = None
    time_budget: str | float | None = None  # seconds, or "10m"
    seed: int | None = None
    data: str | None = None
    data_dir: Path | None = None
    loop: str | None = None
    jit: str | None = None
    out: Path | None = None
    timeout: float | None = None
    threads: int | None = None
    on_diverge: str | None = None
    # Recipe axes, as typed: each value (or comma-separated list) its own cell; [] not given.
    loss_scale: list[str] = field(default_factory=list)  # "dynamic" or numbers
    accumulate: list[str] = field(default_factory=list)
    batch_scale_16bit: list[str] = field(default_factory=list)
    compile: list[bool] = field(default_factory=list)  # [True], [False] or [False, True]
    nproc: list[str] = field(default_factory=list)  # replicas per node, each its own cell
    grad_comm: str | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    measure_peak: bool = False
    resume: bool = False
    verbose: bool = False
    command_line: str = ""


@dataclass
class WorkloadSettings:
    batch_size: int
    epochs: int
    max_steps: int | None
    warmup_steps: int
    units: int | None  # None: the workload's default for the device
    synthetic_train_size: int | None = None
    synthetic_test_size: int | None = None


@dataclass
class RunConfig:
    """The merged configuration a run executes; stored with the run (run.json) for --resume."""

    source: Path | None
    frameworks: list[str]  # as asked: names, "all", or empty for the installed ones
    workload_names: list[str]  # the workloads to run, as asked
    workloads: dict[str, WorkloadSettings]  # settings for every known workload
    policies: list[str]
    device: str
    repeat: int | str  # a count, or "auto" (runner/adaptive.py decides the rounds)
    seed: int
    data: str
    data_dir: str | None
    allow_download: bool
    timeout: float
    loop: str
    jit: bool
    out_dir: Path
    threads: int | None = None  # intra- and inter-op threads per cell; None: the cores available
    # Training recipes (docs/recipes.md), matrix axes: every value is a cell of its own
    # (runner/cells.py). The defaults are what runs before them did.
    loss_scale: list[float | None] = field(default_factory=lambda: [None])  # None: dynamic
    accumulate: list[int] = field(default_factory=lambda: [1])  # micro-batches per step
    batch_scale_16bit: list[int] = field(default_factory=lambda: [1])  # 16-bit batch factor
    compile: list[bool] = field(default_factory=lambda: [False])  # torch.compile (torch only)
    # A diverged cell: "stop" there, or "fallback": run it again one step down the precision
    # ladder the device supports (runner/fallback.py), as a cell of its own.
    on_diverge: str = "stop"
    # Data parallelism (docs/distributed.md): replicas per node, each value its own cell, and
    # the gradient all-reduce's precision. nnodes > 1 needs the rendezvous endpoint; node_rank
    # and rdzv_endpoint say where this node is, not what is measured (a resume may change them).
    nproc: list[int] = field(default_factory=lambda: [1])
    grad_comm: str = "fp32"
    nnodes: int = 1
    node_rank: int | None = None
    rdzv_endpoint: str | None = None
    # --repeat auto: target half-width of each speed-up interval (0.05: ±5 %), the most
    # rounds, and the seconds the rounds may take (None: no limit).
    precision: float = 0.05
    max_repeats: int = 10
    time_budget: float | None = None

    @property
    def adaptive(self) -> bool:
        return self.repeat == ADAPTIVE

    @property
    def rounds(self) -> int:
        """The most rounds the run may take: --repeat N, or --max-repeats under auto."""
        return self.max_repeats if self.repeat == ADAPTIVE else int(self.repeat)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["source"] = str(self.source) if self.source else None
        out["out_dir"] = str(self.out_dir)
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str = "stored configuration") -> RunConfig:
        """A configuration stored by to_dict (run.json), every value held to the Setting its
        option and TOML key meet; InvalidInput naming `where` and the key otherwise."""
        return stored_config(raw, where)


def path_option(option: str, text: str | None) -> Path | None:
    """A path given on the command line; an empty one is refused rather than read as '.'."""
    if text is None:
        return None
    if not text.strip():
        raise InvalidInput(f"{option} '': empty path")
    return Path(text)


def compile_axis(compile_model: bool | None, also_eager: bool) -> list[bool]:
    """`--compile` / `--no-compile` / `--compile --also-eager` -> the compile axis ([] when
    neither was given: the config file decides)."""
    if also_eager and not compile_model:
        raise InvalidInput("--also-eager: runs the eager cells beside compiled ones; add --compile")
    if compile_model is None:
        return []
    return [False, True] if also_eager else [compile_model]


def default_config_path() -> Path | None:
    for folder in (Path.cwd() / "configs", PACKAGE_CONFIGS):
        candidate = folder / "default.toml"
        if candidate.is_file():
            return candidate
    return None


def read_toml(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise InvalidInput(f"config {path}: is a directory; name a TOML file")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise InvalidInput(f"config {path}: no such file") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"config {path}: not a TOML file (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"config {path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise InvalidInput(f"config {path}: cannot read it ({exc.strerror or exc})") from None


def _check_table(
    path: Path, where: str, table: Any, settings: dict[str, Setting]
) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InvalidInput(f"config {path}: [{where}] must be a table")
    for key, value in table.items():
        if key not in settings:
            raise unknown_choice(f"key in [{where}] of {path}:", key, settings)
        if key not in AXES:  # a recipe axis may be a list: parse_file checks it (axis_values)
            table[key] = settings[key].check(f"config {path}: [{where}] {key} =", value)
    return table


def parse_file(path: Path) -> dict[str, Any]:
    raw = read_toml(path)
    unknown = set(raw) - set(TABLES)
    if unknown:
        raise unknown_choice(f"table in {path}:", sorted(unknown)[0], TABLES)
    run = _check_table(path, "run", raw.get("run", {}), RUN_SETTINGS)
    workloads = raw.get("workloads", {})
    if not isinstance(workloads, dict):
        raise InvalidInput(f"config {path}: [workloads] must be a table")
    for name, table in workloads.items():
        if name not in WORKLOADS:
            raise unknown_choice(f"workload in {path}:", name, WORKLOADS)
        _check_table(path, f"workloads.{name}", table, WORKLOAD_SETTINGS)
    tensorflow = _check_table(path, "tensorflow", raw.get("tensorflow", {}), TENSORFLOW_SETTINGS)
    torch = _check_table(path, "torch", raw.get("torch", {}), TORCH_SETTINGS)
    distributed = _check_table(
        path, "distributed", raw.get("distributed", {}), DISTRIBUTED_SETTINGS
    )
    for name in ("loss_scale", "accumulate", "batch_scale_16bit"):
        if name in run:
            run[name] = axis_values(name, f"config {path}: [run] {name} =", run[name])
    if "compile" in torch:
        torch["compile"] = axis_values(
            "compile", f"config {path}: [torch] compile =", torch["compile"]
        )
    if "nproc" in distributed:
        distributed["nproc"] = axis_values(
            "nproc", f"config {path}: [distributed] nproc =", distributed["nproc"]
        )
    return {
        "run": run,
        "workloads": workloads,
        "tensorflow": tensorflow,
        "torch": torch,
        "distributed": distributed,
    }


_WHOLE_NUMBER = re.compile(r"[+-]?\d+")


def axis_values(name: str, where: str, value: Any, text: bool = False) -> list[Any]:
    """A recipe axis as given (one value or a list from TOML or run.json; with `text`, what
    was typed on the command line: "1,4") -> its distinct values in order, each checked
    against AXES; InvalidInput naming `where`.

    Only command-line text is read as numbers: in a file, `accumulate = "4"` is a string
    where a number belongs, and refusing it is how a typo (or a quoted list) gets noticed."""
    items = value if isinstance(value, list) else [value]
    if text and isinstance(value, str):
        items = value.split(",")
    if not items:
        raise InvalidInput(f"{where} []: give at least one value")
    if len(items) > MAX_AXIS_VALUES:
        raise InvalidInput(
            f"{where} {len(items)} values: at most {MAX_AXIS_VALUES} "
            "(each value multiplies the cells)"
        )
    checked = []
    for item in items:
        if name == "loss_scale":
            checked.append(loss_scale_value(where, item, text))
            continue
        if text and isinstance(item, str):
            if name == "compile" or not _WHOLE_NUMBER.fullmatch(item.strip()):
                raise InvalidInput(f"{where} {item!r}: must be {_kind_name(AXES[name])}")
            item = int(item)
        checked.append(AXES[name].check(where, item))
    return list(dict.fromkeys(checked))


def loss_scale_value(where: str, value: Any, text: bool = False) -> float | None:
    """A loss-scale setting ("dynamic", 1024, 1e30; with `text`, "1024" as typed) -> None
    (dynamic) or the static scale, within LOSS_SCALE_LIMITS; InvalidInput naming `where`."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word == "dynamic":
            return None
        refused = InvalidInput(f"{where} {value!r}: must be 'dynamic' or a number (a static scale)")
        if not text:  # in a file, a number is written as a number
            raise refused
        try:
            value = float(word)
        except ValueError:
            raise refused from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return float(LOSS_SCALE_LIMITS.check(where, value))


def _choice(kind: str, value: str, choices: tuple[str, ...]) -> str:
    value = value.strip().lower()
    if value not in choices:
        raise unknown_choice(kind, value, choices)
    return value


def _jit(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    return _choice("--jit value", value, ("on", "off")) == "on"


def file_config(path: Path | None) -> RunConfig:
    """The workloads' reference values < the config file (already checked by parse_file)."""
    parsed = parse_file(path) if path else {table: {} for table in TABLES}
    run, tensorflow, distributed = parsed["run"], parsed["tensorflow"], parsed["distributed"]
    workloads: dict[str, WorkloadSettings] = {}
    for name, spec in WORKLOADS.items():
        table = parsed["workloads"].get(name, {})
        workloads[name] = WorkloadSettings(
            batch_size=table.get("batch_size", spec.batch_size),
            epochs=table.get("epochs", spec.epochs),
            max_steps=table.get("max_steps"),
            warmup_steps=table.get("warmup_steps", run.get("warmup_steps", 5)),
            units=table.get("units"),
            synthetic_train_size=table.get("synthetic_train_size"),
            synthetic_test_size=table.get("synthetic_test_size"),
        )
    return RunConfig(
        source=path.resolve() if path else None,  # absolute: a resume may start elsewhere
        frameworks=run.get("frameworks", []),
        workload_names=run.get("workloads", list(WORKLOADS)),
        workloads=workloads,
        policies=run.get("policies", ["auto"]),
        device=run.get("device", "auto").strip().lower(),
        repeat=run.get("repeat", 1),
        precision=run.get("precision", 0.05),
        max_repeats=run.get("max_repeats", 10),
        time_budget=run.get("time_budget"),
        seed=run.get("seed", 0),
        data=_choice("data mode in [run]", run.get("data", "auto"), DATA_MODES),
        data_dir=run.get("data_dir"),
        allow_download=run.get("allow_download", True),
        timeout=float(run.get("timeout", 900)),
        loop=_choice("loop in [tensorflow]", tensorflow.get("loop", "fit"), LOOPS),
        jit=tensorflow.get("jit", False),
        out_dir=Path(run.get("out_dir", "results")),
        threads=run.get("threads"),
        loss_scale=run.get("loss_scale", [None]),
        accumulate=run.get("accumulate", [1]),
        batch_scale_16bit=run.get("batch_scale_16bit", [1]),
        compile=parsed["torch"].get("compile", [False]),
        on_diverge=_choice("on_diverge in [run]", run.get("on_diverge", "stop"), ON_DIVERGE),
        nproc=distributed.get("nproc", [1]),
        grad_comm=_choice(
            "grad_comm in [distributed]", distributed.get("grad_comm", "fp32"), GRAD_COMMS
        ),
        nnodes=distributed.get("nnodes", 1),
        node_rank=distributed.get("node_rank"),
        rdzv_endpoint=distributed.get("rdzv_endpoint"),
    )


# Command-line option -> the workload setting it overrides in every workload.
_WORKLOAD_OPTIONS = ("batch_size", "epochs", "max_steps", "warmup_steps", "units")
# Command-line option -> the RunConfig field it overrides.
_RUN_OPTIONS = {
    "frameworks": "frameworks",
    "workloads": "workload_names",
    "policies": "policies",
    "device": "device",
    "repeat": "repeat",
    "precision": "precision",
    "max_repeats": "max_repeats",
    "time_budget": "time_budget",
    "seed": "seed",
    "timeout": "timeout",
    "threads": "threads",
}
_ADAPTIVE_ONLY = ("precision", "max_repeats", "time_budget")


def apply_options(config: RunConfig, options: RunOptions) -> RunConfig:
    """`config` with every option given on the command line applied (a new object)."""
    merged = dataclasses.replace(
        config,
        workloads={name: dataclasses.replace(w) for name, w in config.workloads.items()},
    )
    for name in _WORKLOAD_OPTIONS:
        value = getattr(options, name)
        if value is not None:
            WORKLOAD_SETTINGS[name].check(WORKLOAD_SETTINGS[name].option, value)
            for settings in merged.workloads.values():
                setattr(settings, name, value)
    for name, target in _RUN_OPTIONS.items():
        value = getattr(options, name)
        if value is not None and value != []:
            setting = RUN_SETTINGS[name]
            value = float(value) if name == "timeout" else value
            if (
                name == "repeat"
                and isinstance(value, str)
                and _WHOLE_NUMBER.fullmatch(value.strip())
            ):
                value = int(value)  # typed on the command line, where all is text
            setattr(merged, target, setting.check(setting.option, value))
    given = [RUN_SETTINGS[n].option for n in _ADAPTIVE_ONLY if getattr(options, n) is not None]
    if given and not merged.adaptive:
        raise InvalidInput(
            f"{given[0]}: applies to --repeat auto only (this run has --repeat {merged.repeat})"
        )
    merged.device = merged.device.strip().lower()
    if options.data is not None:
        merged.data = _choice(
            "--data mode", RUN_SETTINGS["data"].check("--data", options.data), DATA_MODES
        )
    if options.data_dir is not None:
        merged.data_dir = RUN_SETTINGS["data_dir"].check("--data-dir", str(options.data_dir))
    if options.loop is not None:
        merged.loop = _choice("--loop", options.loop, LOOPS)
    if options.on_diverge is not None:
        merged.on_diverge = _choice("--on-diverge", options.on_diverge, ON_DIVERGE)
    if options.jit is not None:
        merged.jit = _jit(options.jit)
    if options.grad_comm is not None:
        merged.grad_comm = _choice("--grad-comm", options.grad_comm, GRAD_COMMS)
    for name in ("nnodes", "node_rank", "rdzv_endpoint"):
        value = getattr(options, name)
        if value is not None:
            setattr(
                merged, name, DISTRIBUTED_SETTINGS[name].check(f"--{name.replace('_', '-')}", value)
            )
    for name, setting in AXES.items():
        given = getattr(options, name)
        if given:
            values = [v for t in given for v in axis_values(name, setting.option, t, text=True)]
            setattr(merged, name, list(dict.fromkeys(values)))
    check_combination(merged)
    return merged


def check_combination(config: RunConfig) -> None:
    """Rules across settings, whichever layer each came from."""
    last_seed = config.seed + config.rounds - 1
    if last_seed > SEED_MAX:
        raise InvalidInput(
            f"--seed {config.seed} with {config.rounds} repeats reaches {last_seed}: each repeat "
            f"runs with seed + repeat, and seeds must stay at most {SEED_MAX} (numpy's range)"
        )
    if config.data_dir:
        if not Path(config.data_dir).exists():
            raise InvalidInput(f"--data-dir {config.data_dir}: no such file or directory")
        config.data_dir = str(Path(config.data_dir).resolve())  # as above
    check_nodes(config)


def check_nodes(config: RunConfig) -> None:
    """Several nodes need a rendezvous endpoint (HOST:PORT) every node can reach; a node rank
    must name one of the nodes."""
    if config.nnodes > 1 and not config.rdzv_endpoint:
        raise InvalidInput(
            f"--nnodes {config.nnodes}: the nodes meet at a rendezvous endpoint; pass "
            "--rdzv-endpoint HOST:PORT (the same on every node, e.g. the first node's name)"
        )
    if config.node_rank is not None and config.node_rank >= config.nnodes:
        raise InvalidInput(
            f"--node-rank {config.node_rank}: must be below --nnodes ({config.nnodes})"
        )
    if config.rdzv_endpoint is not None:
        endpoint_parts(config.rdzv_endpoint)


def endpoint_parts(endpoint: str) -> tuple[str, int]:
    """HOST:PORT -> (host, port); InvalidInput unless the port is 1-65535."""
    host, _, port = endpoint.strip().rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidInput(
            f"--rdzv-endpoint {endpoint!r}: must be HOST:PORT with a port from 1 to 65535"
        )
    return host, int(port)


# run.json's `config` (RunConfig.to_dict) field -> the Setting of the option or TOML key that
# sets it: a stored run meets the rules a new one does, and a hand-edited or damaged run.json
# is one line naming the key, not a traceback or a cell that dies later.
_STORED_SETTINGS = {
    "source": Setting(str, "source"),
    "frameworks": RUN_SETTINGS["frameworks"],
    "workload_names": RUN_SETTINGS["workloads"],
    "policies": RUN_SETTINGS["policies"],
    "device": RUN_SETTINGS["device"],
    "repeat": RUN_SETTINGS["repeat"],
    "seed": RUN_SETTINGS["seed"],
    "data": RUN_SETTINGS["data"],
    "data_dir": RUN_SETTINGS["data_dir"],
    "allow_download": RUN_SETTINGS["allow_download"],
    "timeout": RUN_SETTINGS["timeout"],
    "loop": TENSORFLOW_SETTINGS["loop"],
    "jit": TENSORFLOW_SETTINGS["jit"],
    "out_dir": RUN_SETTINGS["out_dir"],
    "threads": RUN_SETTINGS["threads"],
    "on_diverge": RUN_SETTINGS["on_diverge"],
    "grad_comm": DISTRIBUTED_SETTINGS["grad_comm"],
    "nnodes": DISTRIBUTED_SETTINGS["nnodes"],
    "node_rank": DISTRIBUTED_SETTINGS["node_rank"],
    "rdzv_endpoint": DISTRIBUTED_SETTINGS["rdzv_endpoint"],
    "precision": RUN_SETTINGS["precision"],
    "max_repeats": RUN_SETTINGS["max_repeats"],
    "time_budget": RUN_SETTINGS["time_budget"],
}
_STORED_NULLABLE = ("source", "data_dir", "threads", "node_rank", "rdzv_endpoint", "time_budget")
_STORED_CHOICES = {
    "data": DATA_MODES,
    "loop": LOOPS,
    "on_diverge": ON_DIVERGE,
    "grad_comm": GRAD_COMMS,
}
# WorkloadSettings fields that may be null (None: the workload's default).
_WORKLOAD_NULLABLE = ("max_steps", "units", "synthetic_train_size", "synthetic_test_size")


def stored_config(raw: Any, where: str) -> RunConfig:
    """RunConfig.from_dict: see there."""
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where}: config must be an object")
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in fields:
            raise unknown_choice(f"key in {where}: config", key, fields)
        at = f"{where}: config.{key} ="
        if key == "workloads":
            values[key] = _stored_workloads(value, where)
        elif key in AXES:
            # None is how to_dict writes a dynamic loss scale; a run.json of a run started
            # before the axes took lists holds one value.
            items = value if isinstance(value, list) else [value]
            items = ["dynamic" if item is None and key == "loss_scale" else item for item in items]
            values[key] = axis_values(key, at, items)
        elif value is None and key in _STORED_NULLABLE:
            values[key] = None
        else:
            values[key] = _STORED_SETTINGS[key].check(at, value)
            if key in _STORED_CHOICES and values[key] not in _STORED_CHOICES[key]:
                choices = ", ".join(_STORED_CHOICES[key])
                raise InvalidInput(f"{at} {value!r}: must be one of {choices}")
    missing = [name for name in _required(RunConfig) if name not in values]
    if missing:
        raise InvalidInput(f"{where}: config has no {', '.join(missing)}")
    lacking = [
        n for n in values["workload_names"] if n in WORKLOADS and n not in values["workloads"]
    ]
    if lacking:
        raise InvalidInput(f"{where}: config.workloads has no settings for {lacking[0]}")
    values["source"] = Path(values["source"]) if values["source"] else None
    values["out_dir"] = Path(values["out_dir"])
    return RunConfig(**values)


def _required(cls: type) -> list[str]:
    """The fields of a dataclass that have no default."""
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


def _stored_workloads(raw: Any, where: str) -> dict[str, WorkloadSettings]:
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where}: config.workloads must be an object")
    fields = {f.name: f for f in dataclasses.fields(WorkloadSettings)}
    out = {}
    for name, table in raw.items():
        if name not in WORKLOADS:
            raise unknown_choice(f"workload in {where}: config.workloads", name, WORKLOADS)
        if not isinstance(table, dict):
            raise InvalidInput(f"{where}: config.workloads.{name} must be an object")
        settings = {}
        for key, value in table.items():
            if key not in fields:
                raise unknown_choice(f"key in {where}: config.workloads.{name}", key, fields)
            at = f"{where}: config.workloads.{name}.{key} ="
            nullable = value is None and key in _WORKLOAD_NULLABLE
            settings[key] = None if nullable else WORKLOAD_SETTINGS[key].check(at, value)
        lacking = [k for k in _required(WorkloadSettings) if k not in settings]
        if lacking:
            raise InvalidInput(f"{where}: config.workloads.{name} has no {', '.join(lacking)}")
        out[name] = WorkloadSettings(**settings)
    return out


def build_config(options: RunOptions) -> RunConfig:
    """Merge reference defaults < config file < command line into one RunConfig."""
    return apply_options(file_config(options.config or default_config_path()), options)


def contradictions(stored: RunConfig, options: RunOptions) -> list[str]:
    """The options that would change a stored run's configuration (for --resume)."""
    resumed = apply_options(stored, options)
    found = []
    for name in _WORKLOAD_OPTIONS:
        value = getattr(options, name)
        before = {getattr(w, name) for w in stored.workloads.values()}
        if value is not None and before != {value}:
            shown = ", ".join(str(v) for v in sorted(before, key=str))
            found.append(f"{WORKLOAD_SETTINGS[name].option} {value} (the run has {shown})")
    for name, target in {**_RUN_OPTIONS, "data": "data", "data_dir": "data_dir"}.items():
        if getattr(resumed, target) != getattr(stored, target):
            option = RUN_SETTINGS[name].option
            found.append(
                f"{option} {getattr(resumed, target)} (the run has {getattr(stored, target)})"
            )
    for name in ("loop", "jit", "on_diverge", "grad_comm", "nnodes"):
        if getattr(resumed, name) != getattr(stored, name):
            option = "--" + name.replace("_", "-")
            found.append(f"{option} {getattr(options, name)} (the run has {getattr(stored, name)})")
    for name, setting in AXES.items():
        if getattr(resumed, name) != getattr(stored, name):
            asked, had = (
                axis_text(name, getattr(resumed, name)),
                axis_text(name, getattr(stored, name)),
            )
            found.append(f"{setting.option} {asked} (the run has {had})")
    return found


def axis_text(name: str, values: list[Any]) -> str:
    """A recipe axis as a user would type it: `dynamic,1024`, `1,4`, `on,off`."""

    def one(value: Any) -> str:
        if name == "loss_scale":
            return "dynamic" if value is None else f"{value:g}"
        if name == "compile":
            return "on" if value else "off"
        return str(value)

    return ",".join(one(v) for v in values)
