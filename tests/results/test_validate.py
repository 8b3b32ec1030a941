"""Every way a results file can lie or break, refused where it is read: file, line and field."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_schema import DRIFT, make_record

from mpbench.compare.summary.cells import summarize_all
from mpbench.errors import InvalidInput
from mpbench.results import (
    EndToEndStats,
    MemoryStats,
    SchemaError,
    append_record,
    load_record,
    read_records,
)
from mpbench.results.io import read_runs
from mpbench.results.sources import read_sources
from mpbench.results.store import Store, read_run_dir

Edit = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Edit:
    """An edit of the parsed record: `path` is dotted ("step_time.median_s")."""

    def edit(raw: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for name in parents:
            raw = raw[name]
        raw[last] = value

    return edit


def _written(tmp_path: Path, edit: Edit | None = None, text: str | None = None) -> Path:
    """A real results.jsonl of two records (the real writer), the second edited: through the
    parsed JSON (`edit`), or by replacing the placeholder "@@" in its text with `text`."""
    first = make_record()
    second = make_record("torch/mnist_dense/mixed_bfloat16/r0")
    second.policy = "mixed_bfloat16"
    second.end_to_end = EndToEndStats(1000.0, 10, 0.5, "preloaded tensors")
    append_record(tmp_path, first)
    append_record(tmp_path, second)
    path = tmp_path / "results.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    raw = json.loads(lines[1])
    if edit is not None:
        edit(raw)
    line = json.dumps(raw)  # allow_nan: NaN and Infinity come out as the tokens Python reads
    if text is not None:
        line = line.replace('"@@"', text)
    path.write_text(f"{lines[0]}\n{line}\n", encoding="utf-8")
    return path


def _refused(path: Path, *fragments: str) -> str:
    with pytest.raises(SchemaError) as caught:
        read_records(path.parent)
    message = str(caught.value)
    assert message.startswith(f"{path} line 2: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


MEDIAN = "step_time.median_s must be a finite number > 0 or null"


@pytest.mark.parametrize(
    ("edit", "text", "expected"),
    [
        # Not finite: as Python's json tokens, and as a literal that overflows to inf.
        (_set("step_time.median_s", math.nan), None, f"{MEDIAN}, got NaN"),
        (_set("step_time.median_s", math.inf), None, f"{MEDIAN}, got Infinity"),
        (_set("step_time.median_s", -math.inf), None, f"{MEDIAN}, got -Infinity"),
        (_set("step_time.median_s", "@@"), "1e999", f"{MEDIAN}, got Infinity"),
        (_set("throughput_samples_per_s", "@@"), "NaN", "throughput_samples_per_s must be a"),
        # Out of range.
        (_set("step_time.median_s", -0.02), None, f"{MEDIAN}, got -0.02"),
        (_set("step_time.median_s", 0), None, f"{MEDIAN}, got 0"),
        (
            _set("step_time.raw_s", [0.01, 0.0]),
            None,
            "step_time.raw_s[1] must be a finite number > 0",
        ),
        (_set("step_time.raw_s", [0.01, -1.0]), None, "step_time.raw_s[1] must be"),
        (
            _set("memory.host_peak_rss_bytes", -1),
            None,
            "memory.host_peak_rss_bytes must be a whole",
        ),
        (_set("end_to_end.seconds", 0.0), None, "end_to_end.seconds must be a finite number > 0"),
        (
            _set("accuracy.test_accuracy", 1.5),
            None,
            "test_accuracy must be a finite number in [0, 1]",
        ),
        (_set("accuracy.train_loss_per_epoch", [-0.1]), None, "train_loss_per_epoch[0] must be"),
        (_set("mfu", -0.5), None, "mfu must be a finite number >= 0 or null, got -0.5"),
        # Wrong types.
        (_set("step_time.median_s", "fast"), None, f'{MEDIAN}, got "fast"'),
        (_set("step_time.raw_s", [0.01, None]), None, "step_time.raw_s[1] must be a finite number"),
        (_set("step_time.raw_s", "0.01"), None, 'step_time.raw_s must be a list, got "0.01"'),
        (_set("config", "string"), None, 'config must be an object, got "string"'),
        (_set("config", None), None, "config must be an object, got null"),
        (_set("config", {"lr": "@@"}), "NaN", "config.lr must be a finite number, got NaN"),
        (_set("precision", {"a": [1, "@@"]}), "1e999", "precision.a[1] must be a finite number"),
        (_set("schema_version", True), None, "unknown schema version true"),
        (_set("schema_version", "2"), None, 'unknown schema version "2"'),
        (_set("repeat", "zero"), None, 'repeat must be a whole number >= 0, got "zero"'),
        (_set("repeat", True), None, "repeat must be a whole number >= 0, got true"),
        (_set("repeat", 1.5), None, "repeat must be a whole number >= 0, got 1.5"),
        (_set("repeat", -1), None, "repeat must be a whole number >= 0, got -1"),
        (_set("params", "@@"), "1" + "0" * 400, "params must be a whole number >= 0 or null"),
        (_set("device", 3), None, "device must be an object, got 3"),
        (_set("step_time", [1, 2]), None, "step_time must be an object or null, got a list"),
        (_set("status", "fine"), None, "status must be one of ok, skipped, diverged, oom"),
        (_set("run_id", 7), None, "run_id must be a string, got 7"),
        (_set("reason", False), None, "reason must be a string or null, got false"),
        (_set("step_time.drifting", "yes"), None, 'drifting must be a boolean or null, got "yes"'),
        (_set("data.sha256", {"x.npz": 3}), None, "data.sha256.x.npz must be a string, got 3"),
        # Shape.
        (_set("step_time.surprise", 1), None, "unknown fields: step_time.surprise"),
        (lambda raw: raw["device"].pop("name"), None, "missing fields: device.name"),
        (lambda raw: raw.pop("run_id"), None, "missing fields: run_id"),
    ],
)
def test_a_bad_value_names_file_line_and_field(tmp_path, edit, text, expected) -> None:
    _refused(_written(tmp_path, edit, text), expected)


def test_nan_in_a_field_that_does_not_exist_is_refused(tmp_path) -> None:
    # The parser refuses the token; the validator then names what is wrong with the line.
    path = _written(tmp_path, _set("surprise", "@@"), "NaN")
    _refused(path, "unknown fields: surprise")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"[1, 2]\n", "a record must be a JSON object"),
        (b'{"schema_version": 2, "name": "AMD \xff EPYC"}\n', "not UTF-8 (byte 0xff at column"),
        (b"\xef\xbb\xbf{}\n", "not valid JSON"),  # a byte-order mark is not JSON either
        (b'{"schema_version": NaN, }\n', "not valid JSON"),  # NaN, then broken further on
    ],
)
def test_bytes_that_are_no_record(tmp_path, content: bytes, expected: str) -> None:
    good = tmp_path / "good"
    append_record(good, make_record())
    path = tmp_path / "results.jsonl"
    path.write_bytes((good / "results.jsonl").read_bytes() + content)
    _refused(path, expected)


def test_a_full_record_and_an_old_one_read_back_unchanged(tmp_path) -> None:
    record = make_record()
    record.memory = MemoryStats(1, 2, 3, 4, 5, 9, "process RSS sampled", 0.01, 120, 7)
    record.end_to_end = EndToEndStats(1000.0, 10, 0.5, "preloaded tensors")
    record.data.sha256 = {"mnist.npz": "ab" * 32}
    record.threads = {"intra_op": 2, "omp_num_threads": None}
    record.mfu = record.mfu_measured = 0.5
    old = make_record("torch/mnist_dense/tf32/r0").to_dict()
    old["schema_version"] = 1
    old["step_time"].update(dict.fromkeys(DRIFT))  # a version 1 record has no drift
    append_record(tmp_path, record)
    append_record(tmp_path, load_record(old))
    back = read_records(tmp_path)
    assert [r.to_dict() for r in back] == [record.to_dict(), old]


def _run(directory: Path, fingerprint: str = "fp-a") -> Path:
    record = make_record()
    record.hardware_fingerprint = fingerprint
    append_record(directory, record)
    return directory / "results.jsonl"


def test_two_different_records_of_one_repeat_name_both_places(tmp_path) -> None:
    first, second = _run(tmp_path / "a"), _run(tmp_path / "b", "fp-b")
    with pytest.raises(SchemaError) as caught:
        read_runs([first, second])
    message = str(caught.value)
    assert f"{first} line 1 and {second} line 1" in message
    assert "cell torch/mnist_dense/float32/r0, repeat 0" in message
    assert "differ in hardware_fingerprint" in message


def test_a_conflict_inside_one_file_is_refused_too(tmp_path) -> None:
    # The writer never writes a second copy of a record (results/writer.py); a file edited by
    # hand or by another tool can still hold one, and the reader refuses it.
    path = _run(tmp_path)
    changed = json.loads(path.read_text().splitlines()[0])
    changed["step_time"]["median_s"] = 0.5
    with path.open("a") as file:
        file.write(json.dumps(changed) + "\n")
    with pytest.raises(SchemaError, match=r"line 1 and .*line 2: .*differ in step_time"):
        read_records(path)


def test_identical_copies_are_read_once(tmp_path) -> None:
    path = _run(tmp_path)
    assert len(read_runs([path, tmp_path, path])) == 1


def test_an_unreadable_path_is_one_line(tmp_path) -> None:
    (tmp_path / "results.jsonl").mkdir()  # the run directory's results file is a folder
    with pytest.raises(SchemaError, match=r"results\.jsonl: cannot read"):
        read_records(tmp_path)


def test_a_record_found_twice_is_held_to_one_rule_in_one_wording(tmp_path) -> None:
    """One duplicate rule (results/identity.py's same_record_or_reason) for the reader of
    files, the reader of stores beside directories and compare's summary of records handed
    over: an identical copy is read once, a different one refused in the same words."""
    first, second = _run(tmp_path / "a"), _run(tmp_path / "b", "fp-b")
    store = tmp_path / "store.sqlite"
    with Store.create(store) as db:
        db.add(read_run_dir(first)[0])
    assert len(read_sources([store, first.parent]).records) == 1
    (record,) = read_records(first)
    reason = (
        f"two different records of run {record.run_id}, cell {record.cell_id}, repeat 0 "
        "(they differ in hardware_fingerprint)"
    )
    with pytest.raises(SchemaError) as files:
        read_runs([first, second])
    with pytest.raises(InvalidInput) as mixed:
        read_sources([second.parent, store])
    with pytest.raises(InvalidInput) as handed:
        summarize_all([record, *read_records(second)])
    assert str(files.value) == f"{first} line 1 and {second} line 1: {reason}; pass each run once"
    assert str(mixed.value) == f"{second.parent} and {store}: {reason}; pass each run once"
    assert str(handed.value) == reason
