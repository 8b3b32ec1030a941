"""Run configuration: a TOML file (configs/*.toml) plus command-line overrides.

The file has a `[run]` table (the matrix and its defaults), one table per workload under
`[workloads.<name>]` (batch size, epochs, step cap, units), `[tensorflow]` (loop, jit),
`[torch]` (compile) and `[distributed]`. Command-line options override the file; the file
overrides the workload's reference values.

Every setting is one entry in mpbench/settings.py's SETTINGS. The dataclasses here (RunOptions,
WorkloadSettings, RunConfig), the check of a file, the merge and the check of a stored run.json
are built from it, so the same check applies whichever way a value came: a TOML
`timeout = -5` is refused exactly as `--timeout -5` is.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path, PurePath
from typing import Any

from mpbench.errors import InvalidInput, unknown_choice
from mpbench.parsers import endpoint_parts
from mpbench.runner.launchers.helper import describe_workload
from mpbench.settings import (
    ADAPTIVE,
    BY_NAME,
    COMMAND_LINE,
    REFERENCE,
    SEED_MAX,
    SETTINGS,
    TABLES,
    WHOLE_NUMBER,
    Setting,
    choice,
    kind_name,
)
from mpbench.workloads import WORKLOADS
from mpbench.workloads import user as user_workloads
from mpbench.workloads.spec import SELECTORS, workload_choices
from mpbench.workloads.zoo import is_zoo

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

# Where `mpbench run` looks for configs/default.toml: the working directory, then the checkout.
PACKAGE_CONFIGS = Path(__file__).resolve().parents[2] / "configs"

RUN = tuple(s for s in SETTINGS if s.home == "run")
WORKLOAD = tuple(s for s in SETTINGS if s.home == "workload")
# The settings each TOML table takes ([workloads.<name>] takes those of "workloads").
IN_TABLE = {table: {s.name: s for s in SETTINGS if table in s.toml} for table in TABLES}
# The recipe settings that are matrix axes: a value or a list of values, each its own cell.
AXES = {s.name: s for s in SETTINGS if s.axis}
MAX_AXIS_VALUES = 16
# A static loss scale: float32 holds the scaled loss, so the scale must stay well inside its
# range (3.4e38); below 1 it would shrink gradients instead of protecting them.
LOSS_SCALE_LIMITS = Setting("loss_scale", (int, float), low=1, high=1e38, why="(float32's range)")
# Said on the command line without --repeat auto, they would change nothing.
_ADAPTIVE_ONLY = ("precision", "max_repeats", "time_budget")
_SOURCE = Setting("source")  # run.json's record of the config file the run read
# The workload settings that size a built-in's model or its synthetic data. A user workload
# builds its own model and data (a zoo model's sizes and samples are keys of its name), so
# they change none of its cells: refused in its TOML table, never applied to it from the
# command line, and --units where no workload of the run has a width is refused.
BUILT_IN_ONLY = (
    "units",
    "heads",
    "layers",
    "seq_len",
    "synthetic_train_size",
    "synthetic_test_size",
)
# The built-ins whose width --units sets (cifar10_cnn has none).
WITH_UNITS = tuple(name for name, w in WORKLOADS.items() if w.default_units("cpu") is not None)


def _dataclass(name: str, settings: tuple[Setting, ...], first=(), last=()) -> type:
    """A dataclass with one field per setting: those every run.json holds first (they have
    no default), then the others with theirs."""
    required = [(s.target, Any) for s in settings if s.required]
    optional = [
        (s.target, Any, dataclasses.field(default_factory=s.initial))
        for s in settings
        if not s.required
    ]
    return dataclasses.make_dataclass(name, [*first, *required, *last, *optional])


def _option_default(setting: Setting) -> Any:
    if setting.axis or setting.kind is list:
        return dataclasses.field(default_factory=list)  # [] : not given
    return False if setting.home == "command" and setting.kind is bool else None


class RunOptions(
    dataclasses.make_dataclass(
        "RunOptions",
        [(s.name, Any, _option_default(s)) for s in COMMAND_LINE] + [("command_line", str, "")],
    )
):
    """Everything `mpbench run` was asked on the command line, a field per option in
    SETTINGS (None or []: not given); axes as typed ("1,4"), paths as Paths."""


class WorkloadSettings(_dataclass("WorkloadSettings", WORKLOAD)):
    """One workload's settings (units None: the workload's default for the device)."""


class RunConfig(_dataclass("RunConfig", RUN, first=[("source", Any)], last=[("workloads", Any)])):
    """The merged configuration a run executes; stored with the run (run.json) for --resume.

    A field per setting of SETTINGS whose home is the run, plus `source` (the config file,
    absolute) and `workloads` (every known workload's WorkloadSettings). The recipe axes
    (docs/recipes.md) and nproc hold lists: every value a cell of its own (runner/matrix.py).
    """

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


def command_line_options(given: dict[str, Any], command_line: str) -> RunOptions:
    """What typer parsed (a value per option in COMMAND_LINE) -> RunOptions: paths made Paths,
    lists left out made [], and --compile with --also-eager made the compile axis."""
    values = {}
    for setting in COMMAND_LINE:
        value = given[setting.name]
        if setting.path:
            value = path_option(setting.option, value)
        elif value is None and (setting.kind is list or setting.axis):
            value = []
        values[setting.name] = value
    values["compile"] = compile_axis(given["compile"], given["also_eager"])
    return RunOptions(**values, command_line=command_line)


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
        at = f"config {path}: [{where}] {key} ="
        if key in AXES:  # a value or a list of them
            table[key] = axis_values(key, at, value)
        else:
            table[key] = settings[key].check(at, value)
    return table


def parse_file(path: Path) -> dict[str, Any]:
    """The file's tables, every key known and every value checked (choices are checked when
    the file is resolved, file_config)."""
    raw = read_toml(path)
    unknown = set(raw) - set(TABLES)
    if unknown:
        raise unknown_choice(f"table in {path}:", sorted(unknown)[0], TABLES)
    parsed = {}
    for table in TABLES:
        if table != "workloads":
            parsed[table] = _check_table(path, table, raw.get(table, {}), IN_TABLE[table])
            continue
        parsed[table] = workloads = raw.get(table, {})
        if not isinstance(workloads, dict):
            raise InvalidInput(f"config {path}: [workloads] must be a table")
        for name, settings in workloads.items():
            if name not in WORKLOADS and user_workloads.reference(name) is None:
                raise unknown_choice(f"workload in {path}:", name, workload_choices(False))
            _check_table(path, f"workloads.{name}", settings, IN_TABLE[table])
            if name not in WORKLOADS:
                _check_user_table(path, name, settings)
    return parsed


def _check_user_table(path: Path, name: str, table: dict[str, Any]) -> None:
    """A user or zoo workload's table takes the settings of its run (batch_size, epochs,
    max_steps, warmup_steps), not those that size a built-in (BUILT_IN_ONLY)."""
    for key in table:
        if key in BUILT_IN_ONLY:
            raise InvalidInput(
                f"config {path}: [workloads.{json.dumps(name)}] {key}: sizes a built-in "
                f"workload only; {_own_sizes(name)}"
            )


def _own_sizes(name: str) -> str:
    """Where a user or zoo workload's sizes are set instead, for a message."""
    if is_zoo(name):
        return f"a zoo model's sizes and samples are keys of its name: {name.split('?')[0]}?KEY=N"
    return f"{name} builds its own model and data (its UserWorkload)"


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
            if name == "compile" or not WHOLE_NUMBER.fullmatch(item.strip()):
                raise InvalidInput(f"{where} {item!r}: must be {kind_name(AXES[name])}")
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


def file_config(path: Path | None) -> RunConfig:
    """The workloads' reference values < the config file (already checked by parse_file)."""
    parsed = parse_file(path) if path else {table: {} for table in TABLES}
    # Every built-in, and each user or zoo workload the file has a table for (its reference
    # values from the probe, under the table's).
    names = [*WORKLOADS, *(n for n in parsed["workloads"] if n not in WORKLOADS)]
    workloads = {
        name: WorkloadSettings(**{s.name: _file_value(s, parsed, name) for s in WORKLOAD})
        for name in names
    }
    return _resolved(
        {
            "source": path.resolve() if path else None,  # absolute: a resume may start elsewhere
            "workloads": workloads,
            **{s.target: _file_value(s, parsed) for s in RUN},
        }
    )


def add_user_workloads(config: RunConfig, names: list[str]) -> None:
    """Settings for each user workload of `names` (package.module:name, an entry point) that
    has none yet: its reference batch size and epochs (described by a child process that
    imports it, workloads/user.py), every other setting's default."""
    for name in names:
        if name in config.workloads or name.strip().lower() in (*WORKLOADS, *SELECTORS):
            continue
        workload = describe_workload(name)  # InvalidInput: one line naming the value
        config.workloads[name] = WorkloadSettings(
            **{
                s.name: getattr(workload, s.name) if s.default == REFERENCE else s.initial()
                for s in WORKLOAD
            }
        )


def _file_value(setting: Setting, parsed: dict[str, Any], workload: str | None = None) -> Any:
    """A setting's value from the file: a workload's own table first, then the setting's
    tables ([run] warmup_steps is every workload's), then its default."""
    tables = [parsed["workloads"].get(workload, {})] if workload else []
    tables += [parsed[table] for table in setting.toml if table != "workloads"]
    found = [table[setting.name] for table in tables if setting.name in table]
    if found:
        value = found[0]
    elif setting.default == REFERENCE:
        value = getattr(WORKLOADS.get(workload) or describe_workload(workload), setting.name)
    else:
        value = setting.initial()
    if setting.choices:
        name = " ".join(filter(None, (setting.name, setting.noun)))
        value = choice(f"{name} in [{setting.toml[0]}]", value, setting.choices)
    return value


def _resolved(values: dict[str, Any]) -> RunConfig:
    """A RunConfig from its fields; run.json and TOML hold its paths as text."""
    values["source"] = Path(values["source"]) if values["source"] else None
    values["out_dir"] = Path(values["out_dir"])
    return RunConfig(**values)


def apply_options(config: RunConfig, options: RunOptions) -> RunConfig:
    """`config` with every option given on the command line applied (a new object)."""
    merged = dataclasses.replace(
        config,
        workloads={name: dataclasses.replace(w) for name, w in config.workloads.items()},
    )
    add_user_workloads(merged, options.workloads or merged.workload_names)
    for setting in COMMAND_LINE:
        given = getattr(options, setting.name)
        if setting.home == "command" or given is None or given == []:
            continue
        if setting.axis:
            values = [v for t in given for v in axis_values(setting.name, setting.option, t, True)]
            setattr(merged, setting.name, list(dict.fromkeys(values)))
        elif setting.home == "workload":
            value = typed_value(setting, given)
            for name, settings in merged.workloads.items():
                if setting.name in BUILT_IN_ONLY and name not in WORKLOADS:
                    continue  # a user workload's record never claims a size it ignored
                setattr(settings, setting.name, value)
        else:
            setattr(merged, setting.target, typed_value(setting, given))
    given = [
        s.option
        for s in COMMAND_LINE
        if s.name in _ADAPTIVE_ONLY and getattr(options, s.name) is not None
    ]
    if given and not merged.adaptive:
        raise InvalidInput(
            f"{given[0]}: applies to --repeat auto only (this run has --repeat {merged.repeat})"
        )
    if options.data is not None:
        check_data_mode(merged)
    if options.units is not None:
        check_units(merged, options.units)
    check_combination(merged)
    return merged


def check_units(config: RunConfig, units: int) -> None:
    """--units sets the width of the built-ins that have one (WITH_UNITS). Given where no
    workload of the run has one (a zoo model, a user workload, cifar10_cnn), it would change
    nothing and still be recorded as the cells' units: refused rather than ignored."""
    names = config.workload_names
    keys = [name.strip().lower() for name in names]
    if not names or any(key in (*WITH_UNITS, *SELECTORS) for key in keys):
        return
    listed = ", ".join(names)
    hint = "; ".join(dict.fromkeys(_own_sizes(n) for n in names if n not in WORKLOADS))
    raise InvalidInput(
        f"--units {units}: {listed} {'has' if len(names) == 1 else 'have'} no width for it to "
        f"set{f' ({hint})' if hint else ''}; --units sets {', '.join(WITH_UNITS)} only"
    )


def check_data_mode(config: RunConfig) -> None:
    """--data chooses the built-in workloads' data (real, or the synthetic stand-in); a user
    workload trains on its own (data(seed)) and its records say "user" (runner/matrix.py
    cell_data). Given on the command line where every workload of the run is a user's, a
    mode other than the default would change nothing: refused rather than ignored. A config
    file's mode is a default for the built-ins it may name, and is not refused."""
    if config.data == BY_NAME["data"].default:
        return
    names = config.workload_names
    built_in = (*WORKLOADS, *SELECTORS)
    if not names or any(
        n.strip().lower() in built_in or describe_workload(n).kind != "user" for n in names
    ):
        return
    listed = ", ".join(names)
    raise InvalidInput(
        f"--data {config.data}: {listed} {'trains' if len(names) == 1 else 'train'} on "
        "the workload's own data (its data(seed)); --data chooses the built-in workloads' "
        "data only, so leave it out"
    )


def typed_value(setting: Setting, value: Any) -> Any:
    """A value given on the command line (its text, a Path) -> the setting's value, checked;
    InvalidInput naming the option."""
    if isinstance(value, PurePath):
        value = str(value)
    if setting.from_text is not None and isinstance(value, str):
        value = setting.from_text(setting.option, value)
    value = setting.check(setting.option, value)
    if setting.choices:
        name = " ".join(filter(None, (setting.option, setting.noun)))
        value = choice(name, value, setting.choices)
    return value


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


# run.json's `config` (RunConfig.to_dict) field -> the Setting of the option or TOML key that
# sets it: a stored run meets the rules a new one does, and a hand-edited or damaged run.json
# is one line naming the key, not a traceback or a cell that dies later.
_STORED = {"source": _SOURCE, **{s.target: s for s in RUN}}


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
        else:
            values[key] = _stored_value(_STORED[key], at, value)
    missing = [name for name in _required(RunConfig) if name not in values]
    if missing:
        raise InvalidInput(f"{where}: config has no {', '.join(missing)}")
    lacking = [
        n for n in values["workload_names"] if n in WORKLOADS and n not in values["workloads"]
    ]
    if lacking:
        raise InvalidInput(f"{where}: config.workloads has no settings for {lacking[0]}")
    return _resolved(values)


def _stored_value(setting: Setting, at: str, value: Any) -> Any:
    if setting.axis:
        # None is how to_dict writes a dynamic loss scale; a run.json of a run started
        # before the axes took lists holds one value.
        items = value if isinstance(value, list) else [value]
        items = [
            "dynamic" if item is None and setting.name == "loss_scale" else item for item in items
        ]
        return axis_values(setting.name, at, items)
    if value is None and (setting.default is None or setting.off):
        return None
    value = setting.check(at, value)
    if setting.choices and value not in setting.choices:
        raise InvalidInput(f"{at} {value!r}: must be one of {', '.join(setting.choices)}")
    return value


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
    settings = {s.name: s for s in WORKLOAD}
    out = {}
    for name, table in raw.items():
        if name not in WORKLOADS and ":" not in name:  # a user workload: module:name
            raise unknown_choice(f"workload in {where}: config.workloads", name, WORKLOADS)
        if not isinstance(table, dict):
            raise InvalidInput(f"{where}: config.workloads.{name} must be an object")
        values = {}
        for key, value in table.items():
            if key not in fields:
                raise unknown_choice(f"key in {where}: config.workloads.{name}", key, fields)
            at = f"{where}: config.workloads.{name}.{key} ="
            values[key] = _stored_value(settings[key], at, value)
        lacking = [k for k in _required(WorkloadSettings) if k not in values]
        if lacking:
            raise InvalidInput(f"{where}: config.workloads.{name} has no {', '.join(lacking)}")
        out[name] = WorkloadSettings(**values)
    return out


def build_config(options: RunOptions) -> RunConfig:
    """Merge reference defaults < config file < command line into one RunConfig."""
    return apply_options(file_config(options.config or default_config_path()), options)


def contradictions(stored: RunConfig, options: RunOptions) -> list[str]:
    """The options that would change a stored run's configuration (for --resume)."""
    resumed = apply_options(stored, options)
    found = []
    for setting in (s for s in COMMAND_LINE if s.home == "workload"):
        value = getattr(options, setting.name)
        before = {
            getattr(w, setting.name)
            for name, w in stored.workloads.items()
            if setting.name not in BUILT_IN_ONLY or name in WORKLOADS
        }
        if value is not None and before != {value}:
            shown = ", ".join(str(v) for v in sorted(before, key=str))
            found.append(f"{setting.option} {value} (the run has {shown})")
    # Then the run's own settings, the matrix axes last; where this node is may change.
    changed = [
        s
        for s in sorted(COMMAND_LINE, key=lambda s: s.axis)
        if s.home == "run" and s.measured
        if getattr(resumed, s.target) != getattr(stored, s.target)
    ]
    for setting in changed:
        asked, had = getattr(resumed, setting.target), getattr(stored, setting.target)
        if setting.axis:
            asked, had = axis_text(setting.name, asked), axis_text(setting.name, had)
        else:
            asked, had = setting.shown(asked), setting.shown(had)
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
