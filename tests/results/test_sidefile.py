"""The telemetry side file: written atomically next to results.jsonl, read back strictly, and
refused with one line (InvalidInput) when it or the record's reference to it is bad."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from mpbench.errors import InvalidInput
from mpbench.results.sidefile import (
    FORMAT,
    VERSION,
    SideFile,
    read_side_file,
    side_file_name,
    side_file_path,
    write_side_file,
)
from mpbench.results.writer import ResultsWriteError
from mpbench.telemetry.numerics import NumericsLog

RUN_ID = "20260101-120000-abcd"
CELL_ID = "torch/mnist_dense/mixed_float16/r0"


def numerics() -> dict:
    log = NumericsLog(max_points=8)
    for step in range(1, 21):
        log.record(
            step,
            loss=2.3 / step,
            loss_scale=65536.0 / 2 ** min(step, 3),
            skipped=step <= 3,
            grad_norm=math.inf if step <= 3 else 0.1 * step,
            nonfinite_grads=5 if step <= 3 else 0,
        )
    return log.to_dict()


DEVICE = {
    "interval_s": 0.1,
    "series": {"t_s": [0.0, 0.1, 0.2], "power_w": [71.5, 250.25, None]},
    "unavailable": {"rapl": "no /sys/class/powercap here"},
}


def written(tmp_path: Path, device: dict | None = DEVICE) -> tuple[str, dict]:
    relative = write_side_file(tmp_path, RUN_ID, CELL_ID, 0, numerics(), device)
    return relative, json.loads((tmp_path / relative).read_text())


def test_round_trip(tmp_path):
    relative, _ = written(tmp_path)
    assert relative.startswith("telemetry/") and relative.endswith(".json")
    side = read_side_file(relative, run_dir=tmp_path)
    assert isinstance(side, SideFile)
    assert side.identity == (RUN_ID, CELL_ID, 0)
    expected = numerics()
    assert side.numerics.stride == expected["stride"]
    assert side.numerics.columns == expected["columns"]
    assert side.numerics.totals == expected["totals"]
    assert side.numerics.totals["skipped_steps"] == 3
    assert side.device is not None and side.device.interval_s == 0.1
    assert side.device.series == DEVICE["series"]
    assert side.device.unavailable == DEVICE["unavailable"]
    # The same file read by its own path gives the same content.
    direct = read_side_file(tmp_path / relative)
    assert direct.numerics == side.numerics and direct.path == side.path


def test_the_file_is_one_strict_json_object_and_no_temporary_file_is_left(tmp_path):
    relative, document = written(tmp_path, device=None)
    assert document["format"] == FORMAT and document["version"] == VERSION
    assert document["device"] is None
    assert (tmp_path / relative).read_text().count("\n") == 1  # compact, one line
    assert sorted(os.listdir(tmp_path / "telemetry")) == [Path(relative).name]
    # Writing again replaces it whole.
    write_side_file(tmp_path, RUN_ID, CELL_ID, 0, numerics(), DEVICE)
    assert sorted(os.listdir(tmp_path / "telemetry")) == [Path(relative).name]
    assert read_side_file(relative, run_dir=tmp_path).device is not None


def test_names_are_safe_deterministic_and_distinct():
    ids = [
        "torch/mnist_dense/mixed_float16/r0",
        "torch/mnist_dense/mixed_float16/r0@ls1024",
        "torch__mnist_dense__mixed_float16__r0",
        "torch/mnist dense/mixed_float16/r0",
        "torch/mnist?dense/mixed_float16/r0",
        "../../etc/passwd",
        "..",
        "",
        "x" * 500,
        "x" * 501,
    ]
    names = {side_file_name(RUN_ID, cell, 0) for cell in ids}
    assert len(names) == len(ids)
    for name in names:
        assert "/" not in name and "\\" not in name and not name.startswith(".")
        assert len(name) < 120
        assert all(c.isalnum() or c in "._-" for c in name)
    assert side_file_name(RUN_ID, ids[0], 0) == side_file_name(RUN_ID, ids[0], 0)
    assert side_file_name(RUN_ID, ids[0], 0) != side_file_name(RUN_ID, ids[0], 1)
    assert side_file_name(RUN_ID, ids[0], 0) != side_file_name("other-run", ids[0], 0)
    assert side_file_name(RUN_ID, ids[1], 0).startswith(
        "torch__mnist_dense__mixed_float16__r0_ls1024."
    )


def test_writing_refuses_content_the_reader_would_refuse(tmp_path):
    bad = numerics()
    bad["columns"]["loss"].append(1.0)
    with pytest.raises(ValueError, match="differ in length"):
        write_side_file(tmp_path, RUN_ID, CELL_ID, 0, bad, None)
    assert not (tmp_path / "telemetry").exists()


def test_a_disk_that_refuses_the_file_is_one_line(tmp_path):
    (tmp_path / "telemetry").write_text("a file where the folder should be")
    with pytest.raises(ResultsWriteError, match="cannot write"):
        write_side_file(tmp_path, RUN_ID, CELL_ID, 0, numerics(), None)


def _corrupt(tmp_path: Path, edit) -> Path:
    relative, document = written(tmp_path)
    path = tmp_path / relative
    result = edit(document)
    path.write_text(result if isinstance(result, str) else json.dumps(document))
    return path


def _set(path: list, value):
    def edit(document):
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set(["version"], 2), "version 2 is not supported; this mpbench reads version 1"),
        (_set(["version"], True), "version True is not supported"),
        (_set(["format"], "something-else"), "not an mpbench telemetry file"),
        (_set(["numerics", "columns", "loss"], [1.0]), "numerics.columns differ in length"),
        (_set(["numerics", "columns", "skipped", 0], 1), "numerics.columns.skipped[0] is 1"),
        (_set(["numerics", "columns", "step", 1], 1), "step is not increasing at [1]"),
        (_set(["numerics", "stride"], 0), "numerics.stride must be >= 1"),
        (_set(["numerics", "totals", "skipped_steps"], -1), "numerics.totals.skipped_steps"),
        (_set(["numerics", "columns", "extra"], []), "unknown column(s) extra"),
        (_set(["repeat"], "0"), 'repeat is "0", not an integer'),
        (_set(["numerics"], None), "numerics is null, not an object"),
        (_set(["device", "interval_s"], 0), "device.interval_s must be a positive number"),
        (_set(["device", "series", "power_w"], [1.0]), "device.series differ in length"),
        (_set(["device", "series", "t_s", 0], "0"), "device.series.t_s[0]"),
        (_set(["device", "unavailable", "nvml"], 3), "device.unavailable.nvml is 3"),
        (lambda d: json.dumps(d).replace("2.3", "NaN", 1), "NaN is not a number"),
        (lambda d: json.dumps(d).replace("2.3", "Infinity", 1), "Infinity is not a number"),
        (lambda d: json.dumps(d)[:-10], "not valid JSON"),
        (lambda d: "[1, 2]", "expected a JSON object, found an array"),
        (lambda d: "", "not valid JSON"),
    ],
)
def test_malformed_files_are_refused_in_one_line_naming_the_file(tmp_path, edit, message):
    path = _corrupt(tmp_path, edit)
    with pytest.raises(InvalidInput) as caught:
        read_side_file(path)
    text = str(caught.value)
    assert message in text
    assert text.startswith(str(path)) and "\n" not in text


def test_bytes_that_are_not_utf8_and_missing_files_are_refused(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b'{"format": "\xff"}')
    with pytest.raises(InvalidInput, match="not UTF-8"):
        read_side_file(path)
    with pytest.raises(InvalidInput, match="no such telemetry side file"):
        read_side_file(tmp_path / "missing.json")
    with pytest.raises(InvalidInput, match="a directory"):
        read_side_file(tmp_path)


@pytest.mark.parametrize(
    "reference",
    [
        "../outside.json",
        "telemetry/../../outside.json",
        "/etc/passwd",
        "C:/Windows/win.ini",
        "..\\outside.json",
        "",
    ],
)
def test_references_that_leave_the_run_directory_are_refused(tmp_path, reference):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (tmp_path / "outside.json").write_text("{}")
    with pytest.raises(InvalidInput) as caught:
        read_side_file(reference, run_dir=run_dir)
    assert "\n" not in str(caught.value)


def test_a_link_out_of_the_run_directory_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "telemetry").mkdir(parents=True)
    relative, _ = written(tmp_path / "elsewhere")
    (run_dir / "telemetry" / "link.json").symlink_to(tmp_path / "elsewhere" / relative)
    with pytest.raises(InvalidInput, match="through a link"):
        side_file_path(run_dir, "telemetry/link.json")
    # a link that stays inside is fine
    inside, _ = written(run_dir)
    (run_dir / "telemetry" / "inner.json").symlink_to(run_dir / inside)
    assert read_side_file("telemetry/inner.json", run_dir=run_dir).cell_id == CELL_ID
