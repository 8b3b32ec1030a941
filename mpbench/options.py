"""The one option model: every command's options are a table of Option, and every command is
built from its table the same way (`takes`), so an option cannot be declared and then dropped
on its way, and a bad value is worded the same whichever command was given it.

The tables: compare's and history's in result_options.py, run's made from settings.py's
SETTINGS (each setting with flags makes its Option: `Setting.command_line`), the store
commands' in history/store_cli.py, detect's and data's here. An option more than one command
takes is declared once, here, and a command that says it in its own words takes it
`.but(help=...)`: --store, --format (with detect's and data's --json, an alias of --format
json) and --output. Each value reaches the command through its entry's parser, one per kind of
value (mpbench/parsers.py).

A leaf under cli.py (it imports errors, formats and parsers only): the CLI builds its commands
from it at start-up; typer is imported only when a command is built.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpbench.formats import DATA, DETECT, help_text, parse_format
from mpbench.parsers import parse_device, parse_number, parse_path, single

# Where `mpbench store add` writes and `mpbench history` reads when no path is given.
DEFAULT_STORE = Path("results") / "store.sqlite"


def _whole_number(option: str, text: str) -> int:
    return int(parse_number(option, text, whole=True))


# The kinds typer is handed as text, parsed here instead (metavar, parser): typer's own words
# for a bad number are "Input should be a valid integer, unable to parse string as an
# integer", and it reads an empty path as the current folder. Options only: an argument's
# metavar would rename it in the usage line.
_AS_TEXT: dict[Any, tuple[str, Callable[[str, Any], Any]]] = {
    Path: ("<path>", parse_path),
    int: ("<int>", _whole_number),
    float: ("<float>", parse_number),
}


@dataclass(frozen=True)
class Option:
    """One parameter of a command, and the field (or keyword) its value fills."""

    name: str  # the field it fills, and the name typer hands the value over under
    flags: tuple[str, ...]  # the command-line spellings; (): the positional argument
    help: str
    kind: Any = str  # the type typer parses; a list collects every time the option is given
    default: Any = None  # what typer gives when it is left out; ...: a required argument
    # A limit given once: typer collects a list only so that a repeat is seen and refused
    # (`single`), where it would keep the last limit and drop the first without a word.
    once: bool = False
    # (option, what typer gave) -> the field's value, or InvalidInput naming the option;
    # None: typer's value as it is (a number or a path already made one).
    parse: Callable[[str, Any], Any] | None = None

    @property
    def option(self) -> str:
        """The name messages use: the first spelling, or the argument's name."""
        return self.flags[0].split("/")[0] if self.flags else self.name

    @property
    def repeatable(self) -> bool:
        """Each time it is given adds a value (a limit per policy, a path)."""
        return typing.get_origin(self.kind) is list and not self.once

    def but(self, **changes: Any) -> Option:
        """This option as one command says it (its own help, its own default)."""
        return dataclasses.replace(self, **changes)

    def value(self, given: Any) -> Any:
        """What typer gave -> the field's value."""
        if self.once:
            given = single(self.option, given)
        if self.flags and given is not None and self.kind in _AS_TEXT:
            given = _AS_TEXT[self.kind][1](self.option, given)
        return given if self.parse is None else self.parse(self.option, given)

    def parameter(self) -> inspect.Parameter:
        """The command's parameter typer reads: an option, or without flags the argument."""
        import typer

        typed, metavar = self.kind, None
        if self.flags and self.kind in _AS_TEXT:
            typed, metavar = str, _AS_TEXT[self.kind][0]
        if self.flags:
            declared = typer.Option(self.default, *self.flags, help=self.help, metavar=metavar)
        else:
            declared = typer.Argument(self.default, help=self.help)
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=declared,
            # It may be None (left out) unless it has a default.
            annotation=typed if self.default is not None else typed | None,
        )


def parsed(table: tuple[Option, ...], given: dict[str, Any]) -> dict[str, Any]:
    """What typer gave -> each option's value through its parser, in the table's order (so the
    first bad option is the one named)."""
    return {option.name: option.value(given[option.name]) for option in table}


def takes(table: tuple[Option, ...]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A function of the table's values (by name) -> the command typer builds: its parameters
    are the table's entries, in order, and the function is called with their parsed values."""

    def command(function: Callable[..., Any]) -> Callable[..., Any]:
        def with_values(**given: Any) -> Any:
            return function(**parsed(table, given))

        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(with_values, name, getattr(function, name))
        with_values.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [option.parameter() for option in table]
        )
        return with_values

    return command


# --- the options several commands take, declared once ------------------------------------

STORE = Option("store", ("--store",), "The store's file.", kind=Path, default=DEFAULT_STORE)
OUTPUT = Option("output", ("--output", "-o"), "Write the report here.", kind=Path)
# detect's and data's --json, kept for the scripts that use it: the same as --format json.
JSON = Option("json", ("--json",), "The same as --format json.", kind=bool, default=False)


def format_option(command: str) -> Option:
    """--format: one of the command's formats (mpbench/formats.py), checked by parse_format."""
    return Option(
        "format",
        ("--format",),
        help_text(command),
        default="table",
        parse=lambda option, text: parse_format(text, command),
    )


def chosen_format(format: str, json: bool) -> str:
    """--format, or json where --json (its alias) was given."""
    return "json" if json else format


# --- detect's and data's tables ----------------------------------------------------------

DETECT_OPTIONS: tuple[Option, ...] = (
    format_option(DETECT).but(help="table or json: machine-readable JSON (schema in docs)."),
    JSON,
    Option(
        "probe",
        ("--probe",),
        "Also import each installed framework in a child process.",
        kind=bool,
        default=False,
    ),
    Option(
        "measure",
        ("--measure",),
        "Also measure matmul TFLOP/s per dtype with torch, and each framework's training step "
        "per policy (child processes; cached, and rated from).",
        kind=bool,
        default=False,
    ),
    Option(
        "device",
        ("--device",),
        "What --measure measures: auto, cpu, cuda, cuda:N, mps.",
        default="auto",
        parse=parse_device,
    ),
)

DATA_OPTIONS: tuple[Option, ...] = (
    Option("data_dir", ("--data-dir",), "Look here first.", kind=Path),
    format_option(DATA).but(help="table or json: machine-readable JSON."),
    JSON,
)
