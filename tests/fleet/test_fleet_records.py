"""The records a node sends its driver enter the machine's results.jsonl through the one
writer (results/writer.py): as the node wrote them, each once. The whole file a node sends
at its run's end adds only what the driver does not hold; a record that contradicts one it
holds fails the machine in one line, and what was measured stays as it was."""

from __future__ import annotations

import dataclasses
import json

import pytest
from builders import cpu_run

from mpbench.fleet import driver
from mpbench.fleet.machines import FleetMachine
from mpbench.fleet.node import Event
from mpbench.results.writer import DuplicateRecordError

FIRST, SECOND = cpu_run()[:2]


def _lines(*records) -> list[str]:
    return [json.dumps(record.to_dict()) for record in records]


def test_a_node_s_records_are_kept_once_as_it_wrote_them(tmp_path):
    machine = FleetMachine("A", tmp_path / "A", "run-1")
    first, second = _lines(FIRST, SECOND)
    machine.receive(Event("records", lines=[first]))
    machine.receive(Event("records", lines=[second]))
    assert machine.records == 2
    whole = f"{first}\n{second}\n".encode()
    # The node's whole file at the end: both held already, nothing doubled.
    machine.receive(Event("done", exit_code=0, files={"results.jsonl": whole}))
    assert (machine.run_dir / "results.jsonl").read_bytes() == whole
    assert machine.status == "done" and machine.records == 2


def test_the_node_s_whole_file_adds_what_it_did_not_stream_and_no_torn_line(tmp_path):
    machine = FleetMachine("A", tmp_path / "A", "run-1")
    first, second = _lines(FIRST, SECOND)
    machine.receive(Event("records", lines=[first]))
    torn = f"{first}\n{second}\n{second[:40]}".encode()  # a last line cut short is left out
    machine.receive(Event("done", exit_code=0, files={"results.jsonl": torn}))
    assert (machine.run_dir / "results.jsonl").read_text() == f"{first}\n{second}\n"
    assert machine.records == 2


def test_a_node_s_record_that_contradicts_a_held_one_fails_the_machine(tmp_path):
    machine = FleetMachine("A", tmp_path / "A", "run-1")
    (held,) = _lines(FIRST)
    machine.receive(Event("records", lines=[held]))
    other = dataclasses.replace(FIRST, step_time=dataclasses.replace(FIRST.step_time, median_s=9.0))
    with pytest.raises(DuplicateRecordError, match="differ in step_time"):
        machine.receive(Event("records", lines=[json.dumps(other.to_dict())]))
    assert (machine.run_dir / "results.jsonl").read_text() == held + "\n"

    class _Contradicting:  # an engine whose node sends that record
        def run(self, machine, seed, receive):
            receive(Event("records", lines=[json.dumps(other.to_dict())]))
            return True

    driver._serve(_Contradicting(), machine, lambda m, event: m.receive(event), None)
    assert machine.status == "failed"
    assert machine.why.startswith("DuplicateRecordError: ") and "differ in step_time" in machine.why
