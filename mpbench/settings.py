"""The run settings: one entry per setting in SETTINGS, and everything else is built from it.

`mpbench run`'s options (cli.py), the check of a TOML config, the resolved configuration and
the check of a stored run.json (runner/config.py) all read this one table, so a value meets
the same rules whichever way it came in, and a new setting is one entry here plus its line in
the docs (docs/architecture.md, "Where a new thing goes").

Each setting with flags makes its option of `mpbench run` (`command_line`: an Option of
mpbench/options.py, the one option model every command is built from), and its value is read
by the value parsers every command shares (mpbench/parsers.py), so a bad value is worded the
same by `run` as by every other command, and by a config file as by the command line.

The CLI builds its options from this module at start-up: it stays light (no framework, no
numpy, nothing of mpbench.runner).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpbench.errors import InvalidInput
from mpbench.fp8_rules import FP8_MODES, TORCH_RECIPES
from mpbench.options import STORE, Option
from mpbench.parsers import (
    WHOLE_NUMBER,
    parse_choice,
    parse_device,
    parse_fraction,
    parse_policy,
    parse_seconds,
)
from mpbench.policies import SELECTORS as POLICY_SELECTORS
from mpbench.policies import help_names

DATA_MODES = ("auto", "real", "synthetic")
# What a user workload's cells record as their data mode: the workload's own data(seed),
# whatever --data says (--data chooses the built-ins' data: runner/matrix.py, runner/config.py).
USER_DATA = "user"
LOOPS = ("fit", "custom")
ON_DIVERGE = ("stop", "fallback")  # docs/telemetry.md
GRAD_COMMS = ("fp32", "fp16", "bf16")  # docs/distributed.md: the DDP communication hook
# numpy's legacy seeding (and so the data order of every cell) takes 0 .. 2**32 - 1; each
# repeat runs with seed + repeat, which must stay inside that range too.
SEED_MAX = 2**32 - 1
ADAPTIVE = "auto"  # --repeat auto: the rounds are decided by runner/adaptive.py
WEEK_S = 7 * 24 * 3600
# The tables of a TOML config, in the order they are read.
TABLES = ("run", "workloads", "tensorflow", "torch", "distributed")
# `default` of a workload setting whose value, when nothing sets it, is the workload's own
# reference value (workloads/spec.py: batch_size, epochs).
REFERENCE = "the workload's reference value"

_NUMBER = (int, float)


@dataclass(frozen=True)
class Setting:
    """One setting: what the command line, a TOML file and run.json may say about it, and
    the rules its value meets whichever of them said it.

    `home` is where the resolved value lives: "run" (a RunConfig field), "workload" (a field of
    every workload's WorkloadSettings; the command line sets it for all of them) or "command"
    (only this invocation's RunOptions: --config, --resume, ...). `cell` marks a setting whose
    value every cell takes as it is: runner/matrix.py copies it into the CellSpec field of the
    same name (`target`), and tests/runner/test_cell_answer.py holds every CellSpec field to
    being either such a setting or one runner/matrix.py works out per cell.
    """

    name: str  # the RunOptions field, the TOML key and (unless `field`) the RunConfig field
    kind: type | tuple[type, ...] = str  # what a TOML or run.json value must be
    default: Any = None  # when nothing sets it; a callable makes it; REFERENCE: see above
    flags: tuple[str, ...] = ()  # the command-line spellings; () : not an option
    help: str = ""  # the option's --help text
    cli: Any = None  # the type typer parses, where it is not `kind` (text for numbers, ...)
    home: str = "run"
    cell: bool = False  # copied as it is into every cell's CellSpec (see above)
    toml: tuple[str, ...] = ()  # the TOML tables it may be set in
    field: str = ""  # the RunConfig field, where it is not `name`
    required: bool = False  # every run.json holds it (older ones may lack the others)
    axis: bool = False  # a matrix axis: a value or a list of values, each its own cell
    choices: tuple[str, ...] = ()
    noun: str = ""  # what a bad choice is called: "--data: unknown mode 'x'; ..."
    measured: bool = True  # False: says where this node is; a resume may change it
    off: bool = False  # the text "off" is a value, None (run.json holds it as null)
    path: bool = False  # the command line's text is a path (RunOptions holds a Path)
    example: str = ""  # a valid value as typed, other than the default (tests/runner)
    # The checks of the value: its limits, the element type of a list, what is said when the
    # upper limit is hit, what a value must be where `kind` alone says it badly.
    low: float | None = None
    high: float | None = None
    items: type | None = None
    why: str = ""
    expects: str = ""
    # Text that means a value ("auto", "5%", "10m"): (where, value) -> the value, or
    # InvalidInput; the limits then apply to what it gives.
    parse: Callable[[str, Any], Any] | None = None
    # The command line's text -> the value, before the checks (its digits, "on"/"off").
    from_text: Callable[[str, Any], Any] | None = None
    shown: Callable[[Any], str] = str  # a value as a user would type it, for messages

    @property
    def option(self) -> str:
        """The name messages use: the first command-line spelling, or the TOML key."""
        return self.flags[0].split("/")[0] if self.flags else self.name

    @property
    def target(self) -> str:
        return self.field or self.name

    @property
    def command_line(self) -> Option:
        """Its option of `mpbench run` (it has flags). Left out, it is None (a flag: False),
        so that the config file decides; a list is repeatable, text where `cli` says so."""
        typed = self.cli or self.kind
        if typed is list:
            typed = list[str]
        flag = self.home == "command" and typed is bool
        return Option(self.name, self.flags, self.help, kind=typed, default=False if flag else None)

    def initial(self) -> Any:
        """The value when nothing sets it (a new list each time)."""
        return self.default() if callable(self.default) else _copy(self.default)

    def check(self, where: str, value: Any) -> Any:
        """The value, or InvalidInput naming `where` (an option or a TOML key)."""
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        # bool is an int in Python; a TOML `true` is never a valid count.
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise InvalidInput(f"{where} {value!r}: must be {kind_name(self)}")
        if self.items is not None:
            for item in value:
                if not isinstance(item, self.items) or isinstance(item, bool):
                    raise InvalidInput(f"{where} {value!r}: must be {kind_name(self)}")
        if isinstance(value, str) and not value.strip():
            raise InvalidInput(f"{where}: must not be empty")
        if self.choices:
            value = parse_choice(where, value, self.choices, self.noun or "value")
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


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def kind_name(setting: Setting) -> str:
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


# --- what text means --------------------------------------------------------------------


def repeat_value(where: str, value: int | str) -> int | str:
    """A repeat count, or "auto". The command line's digits are made a number before this
    (repeat_text); in a file, `repeat = "3"` is a string where a number belongs."""
    if isinstance(value, int):
        return value
    if value.strip().lower() == ADAPTIVE:
        return ADAPTIVE
    raise InvalidInput(f"{where} {value!r}: must be a whole number or 'auto'")


def repeat_text(where: str, text: str) -> int | str:
    """--repeat as typed: digits are a count (on the command line all is text)."""
    return int(text) if WHOLE_NUMBER.fullmatch(text.strip()) else text


def fraction_value(where: str, value: float | str) -> float:
    """`5%` or 0.05 -> 0.05, as compare's percentage options take them; above 0."""
    fraction = parse_fraction(where, value)
    assert fraction is not None
    if fraction <= 0:
        raise InvalidInput(f"{where} {value!r}: must be above 0")
    return fraction


def policy_names(where: str, value: list[str]) -> list[str]:
    """A list of policies: each a name, an alias or a selector (auto, all), in any case, kept
    as given; InvalidInput naming `where` (an option, a TOML key, run.json's key) and the bad
    one."""
    for name in value:
        parse_policy(where, name, POLICY_SELECTORS)
    return value


def choice(kind: str, value: str, choices: tuple[str, ...]) -> str:
    """One of `choices`, whatever its case and spaces (runner/config.py's last word on a value
    Setting.check has held to its choices already)."""
    return parse_choice(kind, value, choices)


def on_off(where: str, value: str | bool) -> bool:
    """--jit's text: on or off."""
    if isinstance(value, bool):
        return value
    return parse_choice(where, value, ("on", "off")) == "on"


def times_or_off(where: str, value: float | str) -> float | None:
    """--stop-slower-than: a number of times float32's step, or off (None)."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "off":
            return None
        try:
            value = float(text)
        except ValueError:
            raise InvalidInput(f"{where} {value!r}: must be a number, or off") from None
    return float(value)


def _seconds(where: str, value: float) -> float:
    return float(value)


def _all_workloads() -> list[str]:
    from mpbench.workloads import WORKLOADS

    return list(WORKLOADS)


# --- the table ----------------------------------------------------------------------------
# In the order `mpbench run --help` lists them. A new setting: one entry here, its line in
# the docs (README's options, or the docs/*.md page of its feature), and the code that uses
# config.<name> (tests/runner/test_settings.py checks it is reachable every way).

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "config",
        flags=("--config", "-c"),
        help="TOML run configuration (default: configs/default.toml).",
        home="command",
        path=True,
    ),
    Setting(
        "frameworks",
        list,
        [],
        ("--framework", "-f"),
        "torch, tensorflow or all (default: installed ones).",
        toml=("run",),
        required=True,
        items=str,
        example="torch",
    ),
    Setting(
        "workloads",
        list,
        _all_workloads,
        ("--workload", "-w"),
        "mnist_dense, cifar10_cnn, transformer_lm, auto (the first two on a CPU, all three on "
        "an accelerator), all, or your own as package.module:name or an installed entry "
        "point's name (docs/workloads.md) (repeatable) (default: the config's).",
        toml=("run",),
        field="workload_names",
        required=True,
        items=str,
        example="mnist_dense",
    ),
    Setting(
        "policies",
        list,
        ["auto"],
        ("--policy", "-p"),
        f"{help_names()}, auto (float32 and the policies rated fast on the device; the run "
        "says which it left out), all (repeatable) (default: auto).",
        toml=("run",),
        required=True,
        items=str,
        parse=policy_names,
        example="bf16",
    ),
    Setting(
        "device",
        str,
        "auto",
        ("--device",),
        "auto, cpu, cuda, cuda:N, mps.",
        toml=("run",),
        required=True,
        parse=parse_device,
        example="cpu",
    ),
    Setting(
        "epochs",
        int,
        REFERENCE,
        ("--epochs",),
        "Epochs of timed steps per cell (at most --max-steps of them); the end-to-end "
        "window then trains about as many again (docs/measurement.md, 'Steps trained').",
        home="workload",
        cell=True,
        toml=("workloads",),
        required=True,
        low=1,
        high=10**6,
        example="3",
    ),
    Setting(
        "max_steps",
        int,
        None,
        ("--max-steps",),
        "Cap on the timed steps per cell (warm-up included). After them the end-to-end "
        "window trains about as many again, in whole epochs (rounded up) once that is an "
        "epoch or more: the record's end_to_end.steps.",
        home="workload",
        cell=True,
        toml=("workloads",),
        required=True,
        low=1,
        high=10**9,
        example="7",
    ),
    Setting(
        "warmup_steps",
        int,
        5,
        ("--warmup-steps",),
        "Leading steps left out of the timing statistics.",
        home="workload",
        # [run] warmup_steps is every workload's, [workloads.<name>] one workload's.
        cell=True,
        toml=("run", "workloads"),
        required=True,
        low=0,
        high=10**9,
        example="2",
    ),
    Setting(
        "batch_size",
        int,
        REFERENCE,
        ("--batch-size",),
        "Samples per step.",
        home="workload",
        toml=("workloads",),
        required=True,
        low=1,
        high=2**24,
        example="64",
    ),
    Setting(
        "units",
        int,
        None,  # the workload's default for the device
        ("--units",),
        "Dense width (mnist_dense); model width d_model (transformer_lm).",
        home="workload",
        toml=("workloads",),
        required=True,
        low=1,
        high=2**16,
        example="32",
    ),
    Setting(
        "repeat",
        (int, str),
        1,
        ("--repeat",),
        "Runs of each cell, each its own process, interleaved across policies; "
        "intervals come from them (3 or more for gates that mean something). auto: a pilot "
        "of 5 rounds sizes the run for --precision (Stein's two-stage rule).",
        cli=str,
        toml=("run",),
        required=True,
        low=1,
        high=1000,
        why="(repeats are separate processes)",
        parse=repeat_value,
        from_text=repeat_text,
        expects="a whole number or 'auto'",
        example="auto",
    ),
    # --repeat auto (runner/adaptive.py): the target half-width of every speed-up interval,
    # the most rounds, and the time the rounds may take (None: no limit).
    Setting(
        "precision",
        (int, float, str),
        0.05,
        ("--precision",),
        "--repeat auto: target half-width of every speed-up's 95 % interval, 5% or "
        "0.05 (default: 5%).",
        cli=str,
        toml=("run",),
        high=1,
        why="(100 %)",
        parse=fraction_value,
        expects="a percentage like 5% or 0.05",
        example="2.5%",
    ),
    # The accuracy rule of the verdicts (docs/compare.md, "Accuracy"): the points a policy may
    # lose against float32 and still be "no worse". Decided before the run, as a margin must
    # be; run.json keeps it, and compare takes it unless --accuracy-margin says otherwise.
    Setting(
        "accuracy_margin",
        (int, float),
        1.0,
        ("--accuracy-margin",),
        "Points of test accuracy a policy may lose against float32 and still be 'no worse' "
        "(its whole 95 % interval above -X; default: 1).",
        cli=float,
        toml=("run",),
        low=0,
        high=100,
        why="(points of accuracy)",
        example="0.5",
    ),
    Setting(
        "max_repeats",
        int,
        10,
        ("--max-repeats",),
        "--repeat auto: the most rounds (default: 10).",
        toml=("run",),
        low=2,
        high=1000,
        why="(repeats are separate processes)",
        example="8",
    ),
    Setting(
        "time_budget",
        (int, float, str),
        None,
        ("--time-budget",),
        "--repeat auto: no round starts that would end past this, in seconds or with a "
        "unit: 600, 10m, 1.5h (default: none).",
        cli=str,
        toml=("run",),
        high=WEEK_S,
        why="seconds (a week)",
        parse=parse_seconds,
        expects="seconds, or a number with s, m or h (10m)",
        example="10m",
    ),
    Setting(
        "seed",
        int,
        0,
        ("--seed",),
        "Seed for data, weights and order.",
        toml=("run",),
        required=True,
        low=0,
        high=SEED_MAX,
        why="(numpy's seed range)",
        example="7",
    ),
    Setting(
        "data",
        str,
        "auto",
        ("--data",),
        "auto, real or synthetic (the built-in workloads' data; yours brings its own).",
        toml=("run",),
        required=True,
        choices=DATA_MODES,
        noun="mode",
        example="synthetic",
    ),
    Setting(
        "data_dir",
        str,
        None,
        ("--data-dir",),
        "Look for datasets here first (a folder or the file itself).",
        cell=True,
        toml=("run",),
        required=True,
        path=True,
        example=".",
    ),
    Setting(
        "loop",
        str,
        "fit",
        ("--loop",),
        "TensorFlow training loop: fit|custom.",
        cell=True,
        toml=("tensorflow",),
        required=True,
        choices=LOOPS,
        example="custom",
    ),
    Setting(
        "jit",
        bool,
        False,
        ("--jit",),
        "TensorFlow XLA jit_compile: on|off.",
        cli=str,
        cell=True,
        toml=("tensorflow",),
        required=True,
        from_text=on_off,
        shown=lambda on: "on" if on else "off",
        example="on",
    ),
    # Training recipes (docs/recipes.md): matrix axes, so each also takes a list of values
    # (one cell per value; runner/config.py's axis_values). A loss scale is a number or
    # "dynamic" (loss_scale_value).
    Setting(
        "loss_scale",
        (str, int, float),
        [None],  # None: dynamic
        ("--loss-scale",),
        "mixed_float16 loss scale: dynamic, or a number for a static scale (steps with "
        "non-finite gradients are skipped and counted; more than half skipped: diverged). "
        "Several (dynamic,1024 or repeated): one fp16 cell each (default: dynamic).",
        cli=list[str],
        toml=("run",),
        axis=True,
        example="dynamic,1024",
    ),
    Setting(
        "accumulate",
        int,
        [1],
        ("--accumulate",),
        "Micro-batches per optimizer step (gradient accumulation); --batch-size stays "
        "the micro-batch, the effective batch is N times it. Several (1,4): one cell each "
        "(default: 1).",
        cli=list[str],
        toml=("run",),
        axis=True,
        low=1,
        high=4096,
        why="micro-batches per optimizer step",
        example="1,4",
    ),
    Setting(
        "batch_scale_16bit",
        int,
        [1],
        ("--batch-scale-16bit",),
        "Run the 16-bit policies (fp16, bf16) at K times the batch size; float32 and "
        "tf32 stay at 1x, and compare shows the speed-ups at the larger batch. Several (1,2): "
        "one 16-bit cell each (default: 1).",
        cli=list[str],
        toml=("run",),
        axis=True,
        low=1,
        high=1024,
        example="2",
    ),
    Setting(
        "compile",
        bool,
        [False],
        ("--compile/--no-compile",),
        "PyTorch: torch.compile the model (compile time and recompiles recorded, the "
        "compiling step left out of the statistics). TensorFlow's switch is --jit.",
        cli=bool,  # with --also-eager: [False, True] (runner/config.py's compile_axis)
        toml=("torch",),
        axis=True,
        example="true",
    ),
    Setting(
        "also_eager",
        bool,
        False,
        ("--also-eager",),
        "With --compile: run every torch cell eager too, as its own cell, so compare shows both.",
        home="command",
    ),
    Setting(
        "on_diverge",
        str,
        "stop",
        ("--on-diverge",),
        "A cell that diverges (non-finite loss, loss scale below 1, most steps skipped): "
        "stop there, or fallback: run it again one step down the precision ladder the device "
        "supports (fp16 -> bf16 -> fp32), recorded as a fallback of it (default: stop).",
        toml=("run",),
        choices=ON_DIVERGE,
        example="fallback",
    ),
    # The float8 policy (docs/policies.md, "fp8"; the rules: mpbench/fp8_rules.py).
    Setting(
        "fp8_mode",
        str,
        "auto",
        ("--fp8-mode",),
        "float8 cells: auto (fp8 GEMMs in hardware on NVIDIA sm_89+, emulated elsewhere, "
        "labelled either way), hardware (skip the cell where there are none) or emulated "
        "(fp8 numerics only, also on sm_89+).",
        cell=True,
        toml=("run",),
        choices=FP8_MODES,
        noun="mode",
        example="emulated",
    ),
    Setting(
        "fp8_recipe",
        str,
        "tensorwise",
        ("--fp8-recipe",),
        "torch float8 cells: torchao's recipe, tensorwise|rowwise|rowwise_with_gw_hp "
        "(default: tensorwise; Keras has one: delayed scaling).",
        cell=True,
        toml=("torch",),
        choices=TORCH_RECIPES,
        noun="recipe",
        example="rowwise",
    ),
    Setting(
        "fp8_eager",
        bool,
        False,
        ("--fp8-eager/--fp8-compile",),
        "torch float8 cells: run the converted model eager, or torch.compile it, as torchao's "
        "float8 training is meant to run (the default; compile time recorded, kept out of the "
        "step times). --compile compiles every cell, the float32 and bf16 ones too.",
        cli=bool,
        cell=True,
        toml=("torch",),
        example="true",
    ),
    # Data-parallel cells (docs/distributed.md). nproc is a matrix axis (`--nproc 1,2`: the
    # same cell at each world size); the rest say where the job's other nodes are.
    Setting(
        "nproc",
        int,
        [1],
        ("--nproc",),
        "Data-parallel replicas per node: torch runs the cell as a torchrun job (DDP; "
        "gloo on CPU, nccl on CUDA), TensorFlow under MirroredStrategy (logical CPUs on a "
        "CPU). Several (1,2): one cell each, scaling efficiency against 1 (default: 1).",
        cli=list[str],
        toml=("distributed",),
        axis=True,
        low=1,
        high=1024,
        why="processes (replicas) per node",
        example="1,2",
    ),
    Setting(
        "grad_comm",
        str,
        "fp32",
        ("--grad-comm",),
        "torch DDP gradient all-reduce precision: fp32 (no hook), fp16 or bf16 "
        "(compression hooks) (default: fp32).",
        toml=("distributed",),
        choices=GRAD_COMMS,
        example="bf16",
    ),
    Setting(
        "nnodes",
        int,
        1,
        ("--nnodes",),
        "torch: nodes of each data-parallel job (needs --rdzv-endpoint).",
        cell=True,
        toml=("distributed",),
        low=1,
        high=4096,
        example="2",
    ),
    Setting(
        "node_rank",
        int,
        None,
        ("--node-rank",),
        "torch: this node's rank among --nnodes (static rendezvous).",
        cell=True,
        toml=("distributed",),
        low=0,
        high=4095,
        measured=False,
        example="0",
    ),
    Setting(
        "rdzv_endpoint",
        str,
        None,
        ("--rdzv-endpoint",),
        "torch: HOST:PORT where the nodes meet (every node the same).",
        cell=True,
        toml=("distributed",),
        measured=False,
        example="localhost:29500",
    ),
    Setting(
        "out",
        flags=("--out", "-o"),
        help="Run directory (default: results/<run-id>).",
        home="command",
        path=True,
    ),
    Setting(
        "timeout",
        _NUMBER,
        900.0,
        ("--timeout",),
        "Seconds per cell; a cell whose projected time passes it stops early, its steps kept "
        "(docs/measurement.md).",
        cli=float,
        cell=True,
        toml=("run",),
        required=True,
        low=1,
        high=WEEK_S,
        why="seconds (a week)",
        parse=_seconds,
        example="60",
    ),
    # A cell that cannot pay stops early (docs/measurement.md; backends/stopping.py).
    Setting(
        "stop_slower_than",
        (int, float, str),
        10.0,
        ("--stop-slower-than",),
        "Stop a cell, after its warm-up and 3 timed steps, whose step is more than N times "
        "its float32 twin's in this run, recorded as stopped with the ratio; off: run on "
        "(a cell that would pass its --timeout stops all the same) (default: 10).",
        cli=str,
        cell=True,
        toml=("run",),
        low=1,
        high=1e6,
        parse=times_or_off,
        off=True,
        expects="a number of times float32's step (10), or off",
        example="20",
    ),
    Setting(
        "threads",
        int,
        None,  # the cores available
        ("--threads",),
        "Intra/inter-op threads per cell (default: the cores).",
        toml=("run",),
        low=1,
        high=4096,
        example="2",
    ),
    Setting(
        "measure_peak",
        bool,
        False,
        ("--measure-peak",),
        "Measure the device's matmul peak (detect --measure) if not cached, for mfu_measured.",
        home="command",
    ),
    Setting(
        "resume",
        bool,
        False,
        ("--resume",),
        "Skip cells already done in --out.",
        home="command",
    ),
    Setting(
        "verbose",
        bool,
        False,
        ("--verbose", "-v"),
        "Show framework logs.",
        home="command",
    ),
    # The fleet (docs/fleet.md): the same matrix on each kind of machine of a cluster. Checked
    # by mpbench/fleet/options.py, the one place that knows the engines.
    Setting(
        "on",
        str,
        None,
        ("--on",),
        "Run on a cluster, the whole matrix once on each kind of machine: ray (RAY_ADDRESS), "
        "ray://HOST:PORT, or slurm.",
        home="command",
    ),
    Setting(
        "fleet",
        str,
        None,
        ("--fleet",),
        "With --on: the machine kinds, comma-separated (Ray accelerator types such as "
        "H100,A100, or Slurm partitions); default: every kind the cluster has.",
        home="command",
    ),
    Setting(
        "fleet_timeout",
        str,
        None,
        ("--fleet-timeout",),
        "With --on: how long a machine may wait for a node before it is reported (10m).",
        home="command",
    ),
    Setting(
        "store",
        flags=STORE.flags,
        help="With --on: add each machine's run to this store as it finishes.",
        home="command",
        path=True,
    ),
    # Set in a TOML file only.
    Setting("out_dir", str, "results", toml=("run",), required=True, example="elsewhere"),
    Setting("allow_download", bool, True, cell=True, toml=("run",), required=True, example="false"),
    # Synthetic set sizes are range-checked by mpbench.data, which owns what a valid
    # stand-in is.
    Setting(
        "synthetic_train_size",
        int,
        None,
        home="workload",
        cell=True,
        toml=("workloads",),
        example="512",
    ),
    Setting(
        "synthetic_test_size",
        int,
        None,
        home="workload",
        cell=True,
        toml=("workloads",),
        example="128",
    ),
    # transformer_lm's sizes beyond its width (`units`); None: the workload's preset for the
    # device (workloads/spec.py). Other workloads have none.
    Setting(
        "heads", int, None, home="workload", toml=("workloads",), low=1, high=2**10, example="2"
    ),
    Setting(
        "layers", int, None, home="workload", toml=("workloads",), low=1, high=2**10, example="1"
    ),
    Setting(
        "seq_len", int, None, home="workload", toml=("workloads",), low=2, high=2**20, example="16"
    ),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
# What `mpbench run` takes on its command line, in --help's order, and its options.
COMMAND_LINE = tuple(s for s in SETTINGS if s.flags)
RUN_OPTIONS: tuple[Option, ...] = tuple(s.command_line for s in COMMAND_LINE)
