"""`--data` and a user workload (issue 41): the workload's data is its own, so `--data` chooses
the built-ins' data only. Asked where every workload is a user's it is refused (one line, exit
2); beside a built-in it applies to the built-in, and the user workload's records say
`config.data: "user"`, as compare does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import tiny_toml, torch_only_workload
from cli import run_mpbench
from frameworks import needs_torch

from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.matrix import cell_data
from mpbench.workloads import describe_workload

# A torch-only user workload: its module imports no framework until a cell builds it.
TABULAR = torch_only_workload("tabular")
USER = "tabular_workload:WORKLOAD"


@pytest.fixture
def workload_dir(tmp_path: Path) -> Path:
    (tmp_path / "tabular_workload.py").write_text(TABULAR, encoding="utf-8")
    (tmp_path / "tiny.toml").write_text(tiny_toml(), encoding="utf-8")  # [run] data synthetic
    return tmp_path


@pytest.mark.parametrize("mode", ["synthetic", "real"])
def test_data_asked_for_user_workloads_alone_is_one_line_and_exit_2(
    workload_dir: Path, mode: str
) -> None:
    out = workload_dir / "run"
    done = run_mpbench(
        "run", "-w", USER, "-f", "torch", "--data", mode, "--out", out, cwd=workload_dir
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"mpbench: error: --data {mode}: {USER} trains on the workload's own data "
        "(its data(seed)); --data chooses the built-in workloads' data only, so leave it out"
    ]
    assert not out.exists()


def test_the_default_mode_and_a_config_files_mode_are_no_refusal(
    workload_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--data auto` asks for nothing, and a config file's mode is a default for whatever
    built-ins it may name: neither is refused, and the user workload's cells say "user"."""
    monkeypatch.chdir(workload_dir)  # where the probe finds the module
    for options in (
        RunOptions(workloads=[USER], data="auto"),
        RunOptions(config=workload_dir / "tiny.toml", workloads=[USER]),
    ):
        config = build_config(options)
        assert cell_data(config, describe_workload(USER)) == "user"
    assert config.data == "synthetic"  # the file's, for the built-ins
    assert cell_data(config, describe_workload("mnist_dense")) == "synthetic"


@needs_torch
def test_beside_a_built_in_data_is_the_built_ins_and_the_user_workload_records_user(
    workload_dir: Path,
) -> None:
    out = workload_dir / "run"
    done = run_mpbench(
        "run", "--config", workload_dir / "tiny.toml", "-w", "mnist_dense", "-w", USER,
        "-f", "torch", "-p", "fp32", "--data", "synthetic", "--repeat", "1", "--device", "cpu",
        "--threads", "1", "--max-steps", "6", "--warmup-steps", "2", "--out", out, cwd=workload_dir,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_workload = {record["workload"]: record for record in records}
    assert {w: r["status"] for w, r in by_workload.items()} == {"mnist_dense": "ok", USER: "ok"}
    built_in, user = by_workload["mnist_dense"], by_workload[USER]
    assert (built_in["config"]["data"], built_in["data"]["source"]) == ("synthetic", "synthetic")
    assert (user["config"]["data"], user["data"]["source"]) == ("user", "user")
