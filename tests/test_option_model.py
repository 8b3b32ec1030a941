"""One option model for every command (mpbench/options.py): each command is built from its
table, an option several commands take is declared once, and a bad value is worded one way
whichever command was given it (mpbench/parsers.py): `--OPTION: unknown KIND 'x'; valid
choices: ...` for a value that is none of the valid ones, `--OPTION 'x': ...` otherwise, one
line and exit 2."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
import typer.core
import typer.main
from cli import run_mpbench

# Imported once here: each fork that runs `mpbench run` inherits it (1-2 s of imports each).
import mpbench.runner.loop  # noqa: F401
from mpbench.cli import app
from mpbench.errors import InvalidInput
from mpbench.history.store_cli import ADD_OPTIONS, LIST_OPTIONS, REMOVE_OPTIONS
from mpbench.options import DATA_OPTIONS, DETECT_OPTIONS, STORE, Option
from mpbench.parsers import parse_device, parse_number, parse_path
from mpbench.result_options import COMPARE_OPTIONS, HISTORY_OPTIONS
from mpbench.settings import RUN_OPTIONS

PACKAGE = Path(__file__).resolve().parents[1] / "mpbench"
TABLES: dict[str, tuple[Option, ...]] = {
    "detect": DETECT_OPTIONS,
    "data": DATA_OPTIONS,
    "run": RUN_OPTIONS,
    "compare": COMPARE_OPTIONS,
    "history": HISTORY_OPTIONS,
    "store add": ADD_OPTIONS,
    "store list": LIST_OPTIONS,
    "store remove": REMOVE_OPTIONS,
}


def _commands() -> dict[str, typer.core.TyperCommand]:
    """Every command of `mpbench` by its name as typed ("store add")."""
    found = {}
    for name, command in typer.main.get_command(app).commands.items():
        for sub, leaf in getattr(command, "commands", {"": command}).items():
            found[f"{name} {sub}".strip()] = leaf
    return found


def test_every_command_is_built_from_its_table() -> None:
    commands = _commands()
    assert sorted(commands) == sorted(TABLES)
    for name, table in TABLES.items():
        parameters = commands[name].params
        assert [p.name for p in parameters] == [o.name for o in table], name
        for parameter, option in zip(parameters, table, strict=True):
            if option.flags:
                flags = (*parameter.opts, *parameter.secondary_opts)
                assert flags == tuple(f for s in option.flags for f in s.split("/")), option.name
            assert getattr(parameter, "help", None) == option.help, (name, option.name)


# Options more than one command takes.
SHARED = ("--store", "--format", "--output", "--json")


def _spelled(node: ast.AST) -> tuple[str | None, ...]:
    """The flags a declaration spells: a tuple of flags, `("--output", "-o")`, or those given
    to typer itself, `typer.Option(None, "--output")`; () for anything else (a message's
    `("--output", output)`)."""
    if isinstance(node, ast.Tuple):
        spelled = tuple(e.value if isinstance(e, ast.Constant) else None for e in node.elts)
        return spelled if all(isinstance(s, str) and s[:1] == "-" for s in spelled) else ()
    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("Option", "Argument"):
        return tuple(a.value for a in node.args if isinstance(a, ast.Constant))
    return ()


@functools.cache
def _declarations(package: Path = PACKAGE) -> list[tuple[str, tuple[str | None, ...]]]:
    """Every declaration of flags in the package, with its module."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        if not any(f'"{flag}"' in text for flag in SHARED):
            continue  # parsed only where one is spelled at all
        for node in ast.walk(ast.parse(text)):
            if spelled := _spelled(node):
                found.append((str(path.relative_to(package)), spelled))
    return found


@pytest.mark.parametrize("flag", SHARED)
def test_an_option_several_commands_take_is_declared_once(flag: str) -> None:
    assert [module for module, flags in _declarations() if flag in flags] == ["options.py"]


def test_every_store_option_is_the_one_declaration() -> None:
    stores = [o for table in TABLES.values() for o in table if "--store" in o.flags]
    assert len(stores) == 4  # store add, list, remove; run --on's
    assert all(o.flags == STORE.flags and o.name == STORE.name for o in stores)


# (command line, the one line said on stderr after "mpbench: error: ")
DEVICE = "--device: unknown device 'tpu'; valid choices: auto, cpu, cuda, cuda:N, mps"
FORMAT = "--format: unknown format 'xml'; valid choices: table, json"
POLICY = "--policy: unknown policy 'bogus'; valid choices: float32, tf32, "
BAD_VALUES = [
    (["run", "--data", "x"], "--data: unknown mode 'x'; valid choices: auto, real, synthetic"),
    (["run", "--loop", "eager"], "--loop: unknown value 'eager'; valid choices: fit, custom"),
    (["run", "--jit", "maybe"], "--jit: unknown value 'maybe'; valid choices: on, off"),
    (["run", "--device", "tpu"], DEVICE),
    (["detect", "--device", "tpu"], DEVICE),
    (["detect", "--format", "xml"], FORMAT),
    (["data", "--format", "xml"], FORMAT),
    (["history", "--by", "x"], "--by: unknown value 'x'; valid choices: commit, date, device"),
    (["run", "-p", "bogus"], POLICY),
    (["compare", "-p", "bogus"], POLICY),
    (["history", "-p", "bogus"], POLICY),
    (["run", "--epochs", "abc"], "--epochs 'abc': must be a whole number"),
    (["history", "--penalty", "x"], "--penalty 'x': must be a number"),
    (["run", "--config", ""], "--config '': empty path"),
    (["data", "--data-dir", ""], "--data-dir '': empty path"),
    (["store", "list", "--store", ""], "--store '': empty path"),
    (["store", "add", "--store", "", "run"], "--store '': empty path"),
]


@pytest.mark.parametrize(
    ("argv", "said"), BAD_VALUES, ids=[" ".join(a or "''" for a in argv) for argv, _ in BAD_VALUES]
)
def test_a_bad_value_is_one_line_worded_one_way_by_every_command(
    argv: list[str], said: str, tmp_path: Path
) -> None:
    done = run_mpbench(*argv, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, ""), done
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"mpbench: error: {said}"), line
    if "unknown" in said:  # the one shape of a value that is none of the valid ones
        shape = r"mpbench: error: --[a-z0-9-]+: unknown \w+ '.*'; valid choices: .+"
        assert re.fullmatch(shape, line), line
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


@pytest.mark.parametrize(
    ("text", "device"), [("cuda:3", "cuda:3"), (" CPU ", "cpu"), ("Auto", "auto"), ("mps", "mps")]
)
def test_a_device_is_read_in_any_case(text: str, device: str) -> None:
    assert parse_device("--device", text) == device


@pytest.mark.parametrize("text", ["cpu:1", "cuda:x", "cuda:", "gpu", ""])
def test_a_malformed_device_names_the_choices(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"^--device: unknown device .*cuda:N, mps$"):
        parse_device("--device", text)


def test_numbers_and_paths_typed_on_the_command_line() -> None:
    assert parse_number("--epochs", " 3 ", whole=True) == 3
    assert parse_number("--timeout", "1.5") == 1.5
    with pytest.raises(InvalidInput, match=r"^--epochs '3\.5': must be a whole number$"):
        parse_number("--epochs", "3.5", whole=True)
    assert parse_path("--store", "a/b.sqlite") == Path("a/b.sqlite")
    with pytest.raises(InvalidInput, match=r"^--store '': empty path$"):
        parse_path("--store", "  ")
