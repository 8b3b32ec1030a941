"""Every entry of mpbench/settings.py's SETTINGS is reachable every way it is declared: its
option through `mpbench run`'s own parser to the resolved configuration, its TOML key through
the file's check to the same value, and that value through run.json and back, where a resume
with the same options finds nothing changed. A setting added to the table but dropped on one
of these ways fails here, instead of doing nothing."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer

from mpbench.cli import app, main
from mpbench.runner.config import (
    RunConfig,
    RunOptions,
    WorkloadSettings,
    build_config,
    contradictions,
)
from mpbench.settings import COMMAND_LINE, SETTINGS, TABLES, Setting

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = "mnist_dense"
# Rules across settings (runner/config.py's check_combination): what an option needs beside it.
COMPANIONS = {
    "precision": ["--repeat", "auto"],
    "max_repeats": ["--repeat", "auto"],
    "time_budget": ["--repeat", "auto"],
    "nnodes": ["--rdzv-endpoint", "host:1"],
    "node_rank": ["--nnodes", "2", "--rdzv-endpoint", "host:1"],
}
SETTABLE = [s for s in SETTINGS if s.home != "command"]


@pytest.fixture
def parsed(monkeypatch):
    """RunOptions as `mpbench run ARGV` makes them: the real command, up to the runner."""

    def parse(argv: list[str]) -> RunOptions:
        seen: list[RunOptions] = []
        monkeypatch.setattr(
            "mpbench.runner.loop.run_matrix", lambda options, summary=None: seen.append(options)
        )
        assert main(["run", *argv]) == 0
        return seen[0]

    return parse


def resolved(config: RunConfig, setting: Setting) -> Any:
    """The setting's value in `config`, as run.json holds it."""
    stored = config.to_dict()
    if setting.home == "workload":
        return stored["workloads"][WORKLOAD][setting.name]
    return stored[setting.target]


def toml_literal(setting: Setting, value: Any) -> str:
    """A value as run.json holds it, written as TOML (a dynamic loss scale is a word there)."""
    if setting.name == "loss_scale":
        value = ["dynamic" if v is None else v for v in value]
    return json.dumps(value)


@pytest.mark.parametrize("setting", SETTABLE, ids=lambda s: s.name)
def test_every_setting_reaches_the_config_from_each_way_it_is_declared(setting, parsed, tmp_path):
    assert setting.flags or setting.toml, "a setting nothing can set"
    assert setting.example, "an example value (used here) for every setting"
    companions = COMPANIONS.get(setting.name, [])
    default = resolved(build_config(parsed(companions)), setting)
    value = None
    if setting.flags:
        flag = setting.flags[0].split("/")[0]
        typed = [flag] if setting.cli is bool else [flag, setting.example]
        options = parsed([*typed, *companions])
        config = build_config(options)
        value = resolved(config, setting)
        assert value != default, f"{flag} {setting.example} changed nothing"
        stored = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
        assert stored == config
        assert contradictions(stored, options) == []
    if value is None:  # a key of the file only: its example, as TOML
        value = setting.example if setting.kind in (int, bool) else json.dumps(setting.example)
        value = json.loads(value)
    for table in setting.toml:
        header = f"workloads.{WORKLOAD}" if table == "workloads" else table
        path = tmp_path / f"{table}.toml"
        path.write_text(f"[{header}]\n{setting.name} = {toml_literal(setting, value)}\n")
        config = build_config(parsed(["--config", str(path), *companions]))
        assert resolved(config, setting) == value != default, f"[{header}] {setting.name}"
        assert RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_the_dataclasses_and_the_parser_hold_exactly_the_table():
    run_fields = {f.name for f in dataclasses.fields(RunConfig)} - {"source", "workloads"}
    assert run_fields == {s.target for s in SETTINGS if s.home == "run"}
    workload_fields = {f.name for f in dataclasses.fields(WorkloadSettings)}
    assert workload_fields == {s.name for s in SETTINGS if s.home == "workload"}
    option_fields = {f.name for f in dataclasses.fields(RunOptions)} - {"command_line"}
    assert option_fields == {s.name for s in COMMAND_LINE}
    command = typer.main.get_command(app).commands["run"]
    assert [p.name for p in command.params] == [s.name for s in COMMAND_LINE]
    assert all(s.help for s in COMMAND_LINE)
    assert all(set(s.toml) <= set(TABLES) for s in SETTINGS)
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)


def test_every_setting_has_its_line_in_the_docs():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    text = "".join(path.read_text() for path in docs)
    named = [s.option for s in SETTINGS if re.search(rf"(?<![\w-]){s.option}(?![\w-])", text)]
    assert [s.option for s in SETTINGS if s.option not in named] == []
