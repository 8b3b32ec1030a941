"""Run configuration: a TOML file (configs/*.toml) plus command-line overrides.

The file has a `[run]` table (the matrix and its defaults), one table per workload under
`[workloads.<name>]` (batch size, epochs, step cap, units), and `[tensorflow]` (loop, jit).
Command-line options override the file; the file overrides the workload's reference values.
"""

from __future__ import annotations

import sys
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

_RUN_KEYS = {
    "frameworks": list,
    "workloads": list,
    "policies": list,
    "device": str,
    "repeat": int,
    "seed": int,
    "data": str,
    "data_dir": str,
    "timeout": (int, float),
    "warmup_steps": int,
    "out_dir": str,
    "allow_download": bool,
    "threads": int,
}
_WORKLOAD_KEYS = {
    "batch_size": int,
    "epochs": int,
    "max_steps": int,
    "warmup_steps": int,
    "units": int,
    "synthetic_train_size": int,
    "synthetic_test_size": int,
}
_TENSORFLOW_KEYS = {"loop": str, "jit": bool}


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
    repeat: int | None = None
    seed: int | None = None
    data: str | None = None
    data_dir: Path | None = None
    loop: str | None = None
    jit: str | None = None
    out: Path | None = None
    timeout: float | None = None
    threads: int | None = None
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
    """The merged configuration a run executes."""

    source: Path | None
    frameworks: list[str]  # as asked: names, "all", or empty for the installed ones
    workload_names: list[str]  # the workloads to run, as asked
    workloads: dict[str, WorkloadSettings]  # settings for every known workload
    policies: list[str]
    device: str
    repeat: int
    seed: int
    data: str
    data_dir: str | None
    allow_download: bool
    timeout: float
    loop: str
    jit: bool
    out_dir: Path
    threads: int | None = None  # intra- and inter-op threads per cell; None: the cores available


def default_config_path() -> Path | None:
    for folder in (Path.cwd() / "configs", PACKAGE_CONFIGS):
        candidate = folder / "default.toml"
        if candidate.is_file():
            return candidate
    return None


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise InvalidInput(f"config {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"config {path}: not valid TOML ({exc})") from None


def _check_table(path: Path, where: str, table: Any, allowed: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InvalidInput(f"config {path}: [{where}] must be a table")
    for key, value in table.items():
        if key not in allowed:
            raise unknown_choice(f"key in [{where}] of {path}:", key, allowed)
        kind = allowed[key]
        # bool is an int in Python; a TOML `true` is never a valid count.
        wrong_bool = isinstance(value, bool) and kind is not bool
        if wrong_bool or not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "number"
            raise InvalidInput(f"config {path}: [{where}] {key} must be a {names}, got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise InvalidInput(f"config {path}: [{where}] {key} must not be negative")
    return table


def parse_file(path: Path) -> dict[str, Any]:
    raw = read_toml(path)
    unknown = set(raw) - {"run", "workloads", "tensorflow"}
    if unknown:
        raise unknown_choice(
            f"table in {path}:", sorted(unknown)[0], ["run", "workloads", "tensorflow"]
        )
    run = _check_table(path, "run", raw.get("run", {}), _RUN_KEYS)
    for key in ("repeat", "threads"):
        if run.get(key) == 0:
            raise InvalidInput(f"config {path}: [run] {key} must be at least 1")
    workloads = raw.get("workloads", {})
    if not isinstance(workloads, dict):
        raise InvalidInput(f"config {path}: [workloads] must be a table")
    for name, table in workloads.items():
        if name not in WORKLOADS:
            raise unknown_choice(f"workload in {path}:", name, WORKLOADS)
        _check_table(path, f"workloads.{name}", table, _WORKLOAD_KEYS)
    tensorflow = _check_table(path, "tensorflow", raw.get("tensorflow", {}), _TENSORFLOW_KEYS)
    return {"run": run, "workloads": workloads, "tensorflow": tensorflow}


def _choice(kind: str, value: str, choices: tuple[str, ...]) -> str:
    value = value.strip().lower()
    if value not in choices:
        raise unknown_choice(kind, value, choices)
    return value


def _jit(value: str | bool | None) -> bool:
    if isinstance(value, bool) or value is None:
        return bool(value)
    return _choice("--jit value", value, ("on", "off")) == "on"


def build_config(options: RunOptions) -> RunConfig:
    """Merge reference defaults < config file < command line into one RunConfig."""
    path = options.config or default_config_path()
    parsed = parse_file(path) if path else {"run": {}, "workloads": {}, "tensorflow": {}}
    run, tensorflow = parsed["run"], parsed["tensorflow"]

    warmup = (
        options.warmup_steps if options.warmup_steps is not None else run.get("warmup_steps", 5)
    )
    workloads: dict[str, WorkloadSettings] = {}
    for name, spec in WORKLOADS.items():
        table = parsed["workloads"].get(name, {})

        def pick(key: str, cli: Any, reference: Any, table: dict = table) -> Any:
            if cli is not None:
                return cli
            return table.get(key, reference)

        workloads[name] = WorkloadSettings(
            batch_size=pick("batch_size", options.batch_size, spec.batch_size),
            epochs=pick("epochs", options.epochs, spec.epochs),
            max_steps=pick("max_steps", options.max_steps, None),
            warmup_steps=options.warmup_steps
            if options.warmup_steps is not None
            else table.get("warmup_steps", warmup),
            units=pick("units", options.units, None),
            synthetic_train_size=table.get("synthetic_train_size"),
            synthetic_test_size=table.get("synthetic_test_size"),
        )

    data = _choice("--data mode", options.data or run.get("data", "auto"), DATA_MODES)
    loop = _choice("--loop", options.loop or tensorflow.get("loop", "fit"), LOOPS)
    data_dir = options.data_dir or run.get("data_dir")
    if data_dir and not Path(data_dir).is_dir():
        raise InvalidInput(f"data directory {data_dir}: no such directory")
    return RunConfig(
        source=path,
        frameworks=options.frameworks or run.get("frameworks", []),
        workload_names=options.workloads or run.get("workloads", list(WORKLOADS)),
        workloads=workloads,
        policies=options.policies or run.get("policies", ["auto"]),
        device=(options.device or run.get("device", "auto")).strip().lower(),
        repeat=options.repeat or run.get("repeat", 1),
        seed=options.seed if options.seed is not None else run.get("seed", 0),
        data=data,
        data_dir=str(data_dir) if data_dir else None,
        allow_download=run.get("allow_download", True),
        timeout=float(options.timeout or run.get("timeout", 900)),
        loop=loop,
        jit=_jit(options.jit if options.jit is not None else tensorflow.get("jit", False)),
        out_dir=Path(run.get("out_dir", "results")),
        threads=options.threads or run.get("threads") or None,
    )
