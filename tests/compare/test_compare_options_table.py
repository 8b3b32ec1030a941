"""`mpbench compare`'s option table (mpbench/result_options.py's COMPARE_OPTIONS): every entry is
a parameter of the command and a field of CompareOptions, every field has its entry, and a
value given on the command line reaches its field."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import typer.core
import typer.main

import mpbench.compare
from mpbench.cli import app, main
from mpbench.compare.options import CompareOptions
from mpbench.formats import FORMATS, help_text
from mpbench.options import Option
from mpbench.options import parsed as parsed_values
from mpbench.result_options import COMPARE_OPTIONS

FIELDS = [f.name for f in dataclasses.fields(CompareOptions)]
DECLARED = [option.name for option in COMPARE_OPTIONS]

# Per field: a command line that sets it, and the value CompareOptions then holds. A new entry
# of the table needs its line here (test_every_field_has_an_example).
EXAMPLES: dict[str, tuple[list[str], Any]] = {
    "paths": (["a", "b/c"], [Path("a"), Path("b/c")]),
    "results_dir": (["--results-dir", "elsewhere"], Path("elsewhere")),
    "devices": (["--device", "h200", "--device", "xeon"], ("h200", "xeon")),
    "frameworks": (["-f", "torch"], ("torch",)),
    "workloads": (["-w", "mnist_dense"], ("mnist_dense",)),
    "policies": (["-p", "fp32", "-p", "bf16"], ("float32", "mixed_bfloat16")),
    "commits": (["--commits", "abc123.."], "abc123.."),
    "since": (["--since", "2026-11-01"], "2026-11-01"),
    "until": (["--until", "2026-11-26"], "2026-11-26"),
    "pool": (["--pool"], True),
    "baseline": (["-b", "base"], Path("base")),
    "max_slowdown": (["--max-slowdown", "10%"], 0.1),
    "max_memory_increase": (["--max-memory-increase", "0.2"], 0.2),
    "max_accuracy_drop_pp": (["--max-accuracy-drop", "0.5pp"], 0.5),
    "min_speedup": (
        ["--min-speedup", "bf16=1.5", "--min-speedup", "fp16@2=1.1x"],
        {"mixed_bfloat16": 1.5, "mixed_float16@2": 1.1},
    ),
    "min_scaling_efficiency": (
        ["--min-scaling-efficiency", "2=80%", "--min-scaling-efficiency", "bf16@4=0.7"],
        {"2": 0.8, "mixed_bfloat16@4": 0.7},
    ),
    "max_accuracy_delta_pp": (["--max-accuracy-delta", "1"], 1.0),
    "accuracy_margin_pp": (["--accuracy-margin", "0.5"], 0.5),
    "allow_different_hardware": (["--allow-different-hardware"], True),
    "require_conclusive": (["--require-conclusive"], True),
    "format": (["--format", "json"], "json"),
    "output": (["-o", "report.json"], Path("report.json")),
    "plot": (["--plot", "figure.png"], Path("figure.png")),
}


def _command() -> typer.core.TyperCommand:
    # typer 0.29 carries its own click (typer._click): its classes are reached through typer.
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands["compare"]
    assert isinstance(command, typer.core.TyperCommand)
    return command


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[CompareOptions]:
    """The CompareOptions each `main(["compare", ...])` hands over; nothing is compared."""
    seen: list[CompareOptions] = []

    def run_compare(paths: object = None, *, options: CompareOptions) -> int:
        assert paths is None  # the paths travel in the options
        seen.append(options)
        return 0

    monkeypatch.setattr(mpbench.compare, "run_compare", run_compare)
    return seen


def test_every_field_of_compare_options_has_one_entry() -> None:
    assert sorted(DECLARED) == sorted(FIELDS)
    assert len(set(DECLARED)) == len(DECLARED)


def test_every_entry_is_a_parameter_of_the_command() -> None:
    parameters = {p.name: p for p in _command().params}
    assert list(parameters) == DECLARED  # nothing else, in the table's order
    for option in COMPARE_OPTIONS:
        parameter = parameters[option.name]
        if option.flags:
            assert isinstance(parameter, typer.core.TyperOption), option.name
            assert tuple(parameter.opts) == option.flags
            # A list is collected from every time the option is given (to refuse a repeat
            # of a single limit, or to keep each of a repeatable option's values).
            assert parameter.multiple == (option.repeatable or option.once), option.name
        else:
            assert isinstance(parameter, typer.core.TyperArgument), option.name
        assert getattr(parameter, "help", None) == option.help, option.name


def test_exactly_one_positional_argument() -> None:
    assert [option.name for option in COMPARE_OPTIONS if not option.flags] == ["paths"]


def test_left_out_every_option_gives_the_defaults_of_compare_options() -> None:
    given = {option.name: option.default for option in COMPARE_OPTIONS}
    assert CompareOptions(**parsed_values(COMPARE_OPTIONS, given)) == CompareOptions()


def test_nothing_on_the_command_line_gives_the_defaults(parsed: list[CompareOptions]) -> None:
    assert main(["compare"]) == 0
    assert parsed == [CompareOptions()]


def test_every_field_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(FIELDS)


@pytest.mark.parametrize("field", DECLARED)
def test_each_option_reaches_its_field(field: str, parsed: list[CompareOptions]) -> None:
    argv, expected = EXAMPLES[field]
    assert main(["compare", *argv]) == 0
    (options,) = parsed
    assert getattr(options, field) == expected
    # ... and no other field.
    defaults = CompareOptions()
    for other in FIELDS:
        if other != field:
            assert getattr(options, other) == getattr(defaults, other), other


@pytest.mark.parametrize("option", [o for o in COMPARE_OPTIONS if o.once], ids=lambda o: o.option)
def test_a_single_limit_given_twice_exits_2(
    option: Option, parsed: list[CompareOptions], capsys: pytest.CaptureFixture[str]
) -> None:
    value = EXAMPLES[option.name][0][1]
    assert main(["compare", option.option, value, option.option, value]) == 2
    assert parsed == []
    error = capsys.readouterr().err
    assert error.startswith("mpbench: error: ")
    assert f"one limit per option; give {option.option} once" in error


def test_the_formats_come_from_the_registry() -> None:
    (declared,) = [option for option in COMPARE_OPTIONS if option.name == "format"]
    assert declared.help == help_text()
    assert all(name in declared.help for name in FORMATS)
    assert declared.default in FORMATS
