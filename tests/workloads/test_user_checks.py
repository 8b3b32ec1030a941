"""A user workload checked once before the first cell (runner/user_check.py): data() in a form
no cell can train on, x and y of different lengths and a model returning one number for the
batch are one line and exit 2 before anything runs (they used to fail in every cell with the
framework's traceback line); float64 data is cast to float32, said once and recorded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli import run_mpbench
from frameworks import needs_torch
from refusals import refusal_line

from mpbench.errors import InvalidInput
from mpbench.workloads import UserWorkload
from mpbench.workloads.user import user_data

TESTS = Path(__file__).resolve().parents[1]  # user_models.py's folder: the runs' working dir
TINY = ("-f", "torch", "-p", "fp32", "--max-steps", "3", "--warmup-steps", "1", "--repeat",
        "1", "--device", "cpu", "--threads", "1")  # fmt: skip


def _workload(data) -> UserWorkload:
    return UserWorkload(name="w", data=data, torch=lambda device: None)


def _refused(data) -> str:
    with pytest.raises(InvalidInput) as raised:
        user_data(_workload(data), 0, "m:W")
    said = str(raised.value)
    assert "\n" not in said and said.startswith("--workload 'm:W': data(0)"), said
    return said


def _x(rows: int, dtype=np.float32) -> np.ndarray:
    return np.zeros((rows, 3), dtype=dtype)


# --- the data, in this process -------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "said"),
    [
        (lambda: [1, 2, 3, 4], "returned a list of 4 ints; return (x_train, y_train, x_test"),
        (lambda: None, "returned None; return"),
        (lambda: _x(8), "returned a numpy array of shape (8, 3); return"),
        (lambda: [_x(8), np.zeros(8)], "returned a list of 2 arrays; return"),
        (lambda: (_x(8), np.zeros(5), _x(2), np.zeros(2)),
         "x_train has 8 samples and y_train 5; each sample needs its target"),
        (lambda: (_x(10), np.zeros(9)), "returned x and y of 10 samples and 9 samples"),
        (lambda: (np.array(["a"] * 8), np.zeros(8)), "x holds text (<U1), not numbers"),
        (lambda: (_x(8), np.zeros(8), _x(2)[:, :2], np.zeros(2)),
         "a sample of x_train has shape (3,) and one of x_test (2,)"),
        (lambda: (np.full((8, 3), np.nan), np.zeros(8)), "x_train holds 21 NaN or infinite"),
        (lambda: (_x(8), np.zeros(8), _x(0), np.zeros(0)), "x_test has no samples"),
    ],
)  # fmt: skip
def test_data_no_cell_can_train_on_is_one_line_in_the_users_terms(returned, said) -> None:
    assert said in _refused(lambda seed: returned())


def test_the_forms_data_may_take_give_the_same_arrays() -> None:
    x, y = np.arange(30, dtype=np.float32).reshape(10, 3), np.arange(10)
    pairs = user_data(_workload(lambda seed: (x, y)), 0)
    batches = user_data(_workload(lambda seed: ((x[i : i + 5], y[i : i + 5]) for i in (0, 5))), 0)
    for found in (pairs, batches):
        assert (found.train_size, found.test_size, found.cast) == (8, 2, [])
        assert np.array_equal(found.arrays[2], x[8:]) and np.array_equal(found.arrays[3], y[8:])
    assert batches.how.startswith("the workload's 2 batches, concatenated")


def test_float64_data_is_cast_to_float32_and_the_origin_says_so() -> None:
    given = (_x(8, np.float64), np.zeros(8, np.int64), _x(2, np.float64), np.zeros(2, np.int64))
    found = user_data(_workload(lambda seed: given), 0)
    assert [a.dtype for a in found.arrays] == [np.float32, np.int64, np.float32, np.int64]
    assert found.cast == ["x_train (float64)", "x_test (float64)"]
    assert found.how.endswith("; x_train (float64), x_test (float64) cast to float32")


# --- through the command: refused before the first cell ------------------------------------


@needs_torch
@pytest.mark.parametrize(
    ("workload", "args", "said"),
    [
        ("ONE_NUMBER", (), "the model returns a 0-d tensor (a single number) for a batch of 2"),
        ("INTS", (), "data(0) returned a list of 4 ints; return (x_train, y_train, x_test"),
        ("SHORT_Y", (), "data(0): x_train has 64 samples and y_train 50"),
        ("FLOAT64", ("--batch-size", "100"), "user_models:FLOAT64 on its data(0): "),
    ],
)
def test_a_user_workload_no_cell_can_train_is_refused_before_anything_runs(
    tmp_path: Path, workload: str, args: tuple[str, ...], said: str
) -> None:
    out = tmp_path / "run"
    name = f"user_models:{workload}"
    done = run_mpbench("run", "-w", name, *TINY, *args, "--out", out, cwd=TESTS)
    line = refusal_line(done, out)
    assert said in line, line


@needs_torch
def test_float64_data_trains_as_float32_said_once_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_mpbench("run", "-w", "user_models:FLOAT64", *TINY, "--out", out, cwd=TESTS)
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stderr.splitlines() if "float64" in line]
    assert said == [
        "warning: user_models:FLOAT64: data() gives x_train (float64), x_test (float64); "
        "mpbench casts them to float32, as the built-ins' data is (the precision policy sets "
        "the compute dtype, not the data), and each record's data.origin says so"
    ]
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok", record
    assert record["data"]["origin"].endswith("x_train (float64), x_test (float64) cast to float32")
