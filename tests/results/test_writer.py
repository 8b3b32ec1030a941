"""results.jsonl's one writer (results/writer.py) writes a record once: an identical second
copy is not written, a different record of one identity is refused in one line naming it,
and nothing on disk is changed by either. Records another mpbench wrote (a fleet node's
lines) enter by the same rule, as they were written, once each is read as a reader reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_schema import make_record

from mpbench.results import SchemaError, read_records
from mpbench.results.writer import (
    DuplicateRecordError,
    ResultsWriteError,
    append_lines,
    append_record,
    drop_torn_tail,
)


def _file(run_dir: Path) -> Path:
    return run_dir / "results.jsonl"


def test_an_identical_second_copy_is_not_written(tmp_path) -> None:
    first, other = make_record(), make_record("torch/mnist_dense/tf32/r0")
    assert append_record(tmp_path, first) is True
    assert append_record(tmp_path, other) is True
    written = _file(tmp_path).read_bytes()
    assert append_record(tmp_path, make_record()) is False  # the same record, built again
    assert _file(tmp_path).read_bytes() == written
    assert [r.cell_id for r in read_records(tmp_path)] == [first.cell_id, other.cell_id]


def test_a_different_record_of_one_identity_is_refused_naming_it(tmp_path) -> None:
    append_record(tmp_path, make_record())
    written = _file(tmp_path).read_bytes()
    changed = make_record()
    changed.step_time.median_s = 0.5
    with pytest.raises(DuplicateRecordError) as refused:
        append_record(tmp_path, changed)
    assert isinstance(refused.value, ResultsWriteError)  # one line, exit 2, the run stops
    assert str(refused.value) == (
        f"{_file(tmp_path)}: two different records of run run-1, cell "
        "torch/mnist_dense/float32/r0, repeat 0 (they differ in step_time): a record is "
        "written once, so the one the file holds is kept and the other is not written"
    )
    assert _file(tmp_path).read_bytes() == written  # the measured one is kept as it was
    # Another repeat of the cell is another record.
    again = make_record()
    again.repeat = 1
    assert append_record(tmp_path, again) is True


def test_what_the_writer_knows_of_a_file_follows_other_writers(tmp_path) -> None:
    append_record(tmp_path, make_record())
    # A resume cuts a torn tail, and here the record with it: written again, not skipped.
    path = _file(tmp_path)
    path.write_bytes(path.read_bytes()[:-1])
    assert drop_torn_tail(tmp_path) is not None and path.read_bytes() == b""
    assert append_record(tmp_path, make_record()) is True
    # Another process appends a record this one never wrote: its copy is held to the rule.
    other = make_record("torch/mnist_dense/tf32/r0")
    line = json.dumps(other.to_dict())
    code = f"open({str(path)!r}, 'a').write({line!r} + '\\n')"
    subprocess.run([sys.executable, "-c", code], check=True)
    other.step_time.median_s = 0.5
    with pytest.raises(DuplicateRecordError, match=r"tf32/r0, repeat 0 .*differ in step_time"):
        append_record(tmp_path, other)


def test_a_node_s_lines_are_written_as_they_are_once_each(tmp_path) -> None:
    node = tmp_path / "node"
    for cell in ("torch/mnist_dense/float32/r0", "torch/mnist_dense/tf32/r0"):
        append_record(node, make_record(cell))
    lines = _file(node).read_text().splitlines()
    driver = tmp_path / "driver"
    assert append_lines(driver, lines[:1]) == 1
    assert append_lines(driver, ["", *lines]) == 1  # the first is held: not written again
    assert _file(driver).read_bytes() == _file(node).read_bytes()


@pytest.mark.parametrize(
    "line, said",
    [
        ('{"run_id": "run-1", ', "not JSON (Expecting property name"),
        ('{"schema_version": 6}', "a line to append is no record: "),
    ],
    ids=["torn", "not-a-record"],
)
def test_a_line_that_is_no_record_is_one_line_and_nothing_is_written(tmp_path, line, said):
    append_record(tmp_path, make_record())
    written = _file(tmp_path).read_bytes()
    with pytest.raises(SchemaError) as refused:
        append_lines(tmp_path, [line])
    message = str(refused.value)
    assert message.startswith(f"{_file(tmp_path)}: a line to append is no record: ")
    assert said in message and "\n" not in message
    assert _file(tmp_path).read_bytes() == written


def test_a_node_s_record_that_contradicts_a_held_one_is_refused(tmp_path) -> None:
    append_record(tmp_path, make_record())
    changed = make_record()
    changed.hardware_fingerprint = "another"
    with pytest.raises(DuplicateRecordError, match="differ in hardware_fingerprint"):
        append_lines(tmp_path, [json.dumps(changed.to_dict())])
    assert [r.hardware_fingerprint for r in read_records(tmp_path)] == [""]
