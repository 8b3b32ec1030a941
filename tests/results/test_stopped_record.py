"""The `stopped` status and its figures (schema version 14): a record of a cell that could not
pay reads back as written, says why, and an older record cannot hold either."""

from __future__ import annotations

import dataclasses
import json

import pytest
from builders import record, stopped, write_run

from mpbench.results import SCHEMA_VERSION, SchemaError, Status, load_record, read_records


def bf16_stopped():
    cell = record("tensorflow", "mnist_dense", "mixed_float16", median_ms=1198.0, accuracy=0.9)
    return stopped(cell, float32_step_s=0.0053)


def test_a_stopped_record_reads_back_as_written(tmp_path):
    assert SCHEMA_VERSION == 14
    cell = bf16_stopped()
    (read,) = read_records(write_run(tmp_path, [cell]))
    assert read == cell
    assert read.status is Status.STOPPED and read.stopped.steps == 3
    ratio = read.stopped.step_s / 0.0053
    assert read.stopped.slower_than_float32 == pytest.approx(ratio)
    assert read.reason.startswith(f"stopped: {ratio:.0f}× slower than float32 after 3 steps")
    assert read.step_time.count == 3 and read.accuracy.test_accuracy is None


def test_stopped_and_its_figures_go_together():
    raw = bf16_stopped().to_dict()
    without = {**raw, "stopped": None}
    with pytest.raises(SchemaError, match="status is stopped, but the record has no `stopped`"):
        load_record(without)
    ok = {**raw, "status": "ok"}
    with pytest.raises(SchemaError, match="has `stopped` figures, but its status is ok"):
        load_record(ok)


def test_a_version_13_record_cannot_be_stopped_and_reads_without_the_figures():
    raw = bf16_stopped().to_dict()
    raw["schema_version"] = 13
    with pytest.raises(SchemaError, match="status stopped is of schema version 14, but the"):
        load_record(json.loads(json.dumps(raw)))
    raw["status"] = "ok"
    with pytest.raises(SchemaError, match="stopped is a field of schema version 14"):
        load_record(raw)
    older = record("torch", "mnist_dense", "float32", median_ms=2.4, accuracy=0.97).to_dict()
    older["schema_version"] = 13
    del older["stopped"]
    assert load_record(older).stopped is None


def test_a_stopped_ratio_is_a_ratio_of_step_times():
    raw = bf16_stopped().to_dict()
    raw["stopped"] = {**raw["stopped"], "slower_than_float32": 0.0}
    with pytest.raises(SchemaError, match="stopped.slower_than_float32 must be"):
        load_record(raw)
    assert dataclasses.fields(type(bf16_stopped().stopped))  # a dataclass, as the others
