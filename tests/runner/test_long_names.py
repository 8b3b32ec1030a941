"""A cell whose id is too long for a file name (a zoo name with its options, a user's long
workload name) still gets its log: issue 55's "File name too long" ended a run after earlier
cells had finished, and `--resume` failed the same way."""

from __future__ import annotations

import json

from builders import tiny_toml, torch_only_workload
from cli import run_mpbench
from frameworks import needs_torch

from mpbench.runner.rundir import LOG_NAME_BYTES, cell_log

LONG = "tabular_" + "x" * 240
# A module whose file name fits (255 bytes) but whose cell id, `torch/MODULE:WORKLOAD/...`,
# does not: the log name of a cell is longer than its module's file name.
MODULE = "long_" + "x" * 225


def test_a_short_id_keeps_its_readable_log_name_and_a_long_one_is_cut_with_a_hash(tmp_path):
    short = cell_log(tmp_path, "torch/mnist_dense/float32/r0")
    assert short == tmp_path / "logs" / "torch__mnist_dense__float32__r0.log"
    one, two = (cell_log(tmp_path, f"torch/{LONG}{end}/float32/r0") for end in "ab")
    for path in (one, two):
        assert len(path.name.encode("utf-8")) <= LOG_NAME_BYTES
        assert path.name.startswith("torch__tabular_xxx") and path.name.endswith(".log")
    assert one != two  # the cut parts are the same: the hash of the whole id tells them apart
    accented = cell_log(tmp_path, "torch/" + "é" * 150 + "/float32/r0").name
    assert len(accented.encode("utf-8")) <= LOG_NAME_BYTES  # cut on a character, not a byte


@needs_torch
def test_a_run_of_a_workload_named_past_a_file_names_length_finishes_and_resumes(tmp_path):
    (tmp_path / f"{MODULE}.py").write_text(torch_only_workload("tabular"), encoding="utf-8")
    (tmp_path / "tiny.toml").write_text(tiny_toml(), encoding="utf-8")
    out = tmp_path / "run"
    args = ("run", "--config", "tiny.toml", "-w", f"{MODULE}:WORKLOAD", "-f", "torch")
    done = run_mpbench(*args, "-p", "fp32", "--device", "cpu", "--out", out, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and MODULE in record["cell_id"]
    (log,) = (out / "logs").glob("torch__*.log")
    assert len(log.name.encode("utf-8")) <= LOG_NAME_BYTES
    resumed = run_mpbench("run", "--out", out, "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
