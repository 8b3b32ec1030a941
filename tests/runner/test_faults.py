"""MPBENCH_FAULT (runner/faults.py): which fault, if any, a cell gets, one fault or a list."""

from __future__ import annotations

import pytest

from mpbench.runner.faults import FAULT_ENV, requested_fault

CELL = "torch/mnist_dense/mixed_bfloat16/r1"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", None),
        ("hang", "hang"),  # no text: every cell
        ("hang@mixed_bfloat16", "hang"),
        ("hang@float32/", None),
        ("hang@#rank1", None),  # a rank's fault spares the cell process
        ("raise@r0,crash@r1", "crash"),  # the first fault whose text the id contains
        ("raise@r0, crash@r1 ,sigkill@r1", "crash"),
        ("raise@r0,crash@r2", None),
        ("raise@r0,hang", "hang"),
    ],
)
def test_a_cell_gets_the_first_fault_whose_text_its_id_contains(monkeypatch, value, expected):
    monkeypatch.setenv(FAULT_ENV, value)
    assert requested_fault(CELL) == expected


def test_an_unknown_kind_anywhere_in_the_list_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "hang@r1,melt@r2")
    with pytest.raises(ValueError, match="'melt': kind must be one of raise, oom, hang"):
        requested_fault(CELL)
