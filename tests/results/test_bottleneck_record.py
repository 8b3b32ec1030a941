"""The record's `bottleneck` (schema version 11): written and read back, refused in an older
record, and older records read without it."""

from __future__ import annotations

import dataclasses
import json

import pytest
from builders import record

from mpbench.results import SCHEMA_VERSION, BottleneckStats, SchemaError, load_record


def bottleneck() -> BottleneckStats:
    return BottleneckStats(
        kind="launch-bound",
        evidence="device busy 14 % of the step (kernels 0.25 of 1.78 ms); 2.5 % of the peak",
        remedy="a larger batch, --compile (CUDA graphs on a GPU), fewer small kernels",
        source="torch.profiler CUDA kernel time over 5 steps",
        device_busy_fraction=0.14,
        host_busy_fraction=1.0,
        achieved_tflops=1.7,
        peak_tflops=67.0,
        bytes_per_step=2e8,
        arithmetic_intensity=15.2,
        ridge_point=13.96,
        bandwidth_gbps=4800.0,
        input_share=0.0,
        unavailable={"x": "why"},
    )


def round_trip(cell) -> object:
    return load_record(json.loads(json.dumps(cell.to_dict())))


def test_a_record_with_a_bottleneck_reads_back_the_same():
    assert SCHEMA_VERSION == 14
    cell = record("torch", "mnist_dense", "float32", median_ms=10.0)
    cell.bottleneck = bottleneck()
    assert round_trip(cell) == cell
    assert round_trip(cell).bottleneck.kind == "launch-bound"


def test_a_record_without_one_reads_back_with_none():
    cell = record("torch", "mnist_dense", "float32", median_ms=10.0)
    raw = cell.to_dict()
    del raw["bottleneck"]
    assert load_record(raw).bottleneck is None


def test_a_version_10_record_reads_without_it_and_may_not_hold_it():
    raw = record("torch", "mnist_dense", "float32", median_ms=10.0).to_dict()
    raw["schema_version"] = 10
    del raw["bottleneck"]
    assert load_record(raw).bottleneck is None
    raw["bottleneck"] = dataclasses.asdict(bottleneck())
    with pytest.raises(SchemaError, match="bottleneck is a field of schema version 11"):
        load_record(raw)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("kind", "slow", "bottleneck.kind must be one of compute-bound"),
        ("input_share", 1.5, "bottleneck.input_share must be a finite number in"),
        ("device_busy_fraction", -0.1, "bottleneck.device_busy_fraction must be"),
        ("evidence", None, "bottleneck.evidence must be a string"),
    ],
)
def test_a_malformed_bottleneck_is_refused(field, value, words):
    raw = record("torch", "mnist_dense", "float32", median_ms=10.0).to_dict()
    raw["bottleneck"] = {**dataclasses.asdict(bottleneck()), field: value}
    with pytest.raises(SchemaError, match=words):
        load_record(raw)
