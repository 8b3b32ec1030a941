"""A user workload whose model takes several inputs (docs/workloads.md, "A model of several
inputs"): x a dict of arrays by the model's keyword arguments, checked as every cell takes it
(workloads/user.py user_data: each form data() may return, the same rows of every input, its
mistakes in one line), and a raw transformers T5 trained through `mpbench run` in fp32 and
bf16, its FLOPs the analytic encoder-decoder count."""

from __future__ import annotations

import json
from pathlib import Path

import keyword_models
import numpy as np
import pytest
from cli import run_mpbench
from frameworks import installed, needs_tensorflow, needs_torch
from refusals import refusal_line

from mpbench.errors import InvalidInput
from mpbench.workloads import UserWorkload
from mpbench.workloads.user import user_data

TESTS = Path(__file__).resolve().parents[1]  # keyword_models.py's folder: the runs' working dir
TINY = ("-f", "torch", "--max-steps", "3", "--warmup-steps", "1", "--repeat", "1", "--device",
        "cpu", "--threads", "1")  # fmt: skip
needs_transformers = pytest.mark.skipif(
    not (installed("transformers") and installed("torch")), reason="needs transformers and torch"
)


def _workload(data) -> UserWorkload:
    return UserWorkload(name="w", data=data, torch=lambda device: None)


def _inputs(rows: int) -> dict[str, np.ndarray]:
    """Two inputs whose rows say which sample they are: ids i, and a float feature 10·i."""
    ids = np.arange(rows)
    return {"ids": ids, "feature": (10.0 * ids)[:, None].repeat(2, axis=1)}


# --- the data, in this process -------------------------------------------------------------


def test_every_form_of_data_takes_the_same_rows_of_each_input() -> None:
    x, y = _inputs(10), np.arange(10)
    batches = [({k: v[i : i + 5] for k, v in x.items()}, y[i : i + 5]) for i in (0, 5)]
    given = [(x, y), batches, ({k: v[:8] for k, v in x.items()}, y[:8], _inputs(10), y)]
    for data in given:
        found = user_data(_workload(lambda seed, data=data: data), 0)
        x_train, y_train, x_test, y_test = found.arrays
        assert list(x_train) == ["ids", "feature"] and list(x_test) == list(x_train)
        for inputs, targets in ((x_train, y_train), (x_test, y_test)):
            assert np.array_equal(inputs["ids"], targets)  # row i is sample i in every input
            assert np.array_equal(inputs["feature"][:, 0], 10.0 * targets)
    pairs = user_data(_workload(lambda seed: (x, y)), 0)
    assert (pairs.train_size, pairs.test_size) == (8, 2)
    # float64 inputs reach the model as float32, each named; integer ids as they are.
    assert pairs.arrays[0]["feature"].dtype == np.float32
    assert pairs.arrays[0]["ids"].dtype == np.arange(1).dtype
    assert pairs.cast == ["x_train['feature'] (float64)", "x_test['feature'] (float64)"]
    assert pairs.how.endswith("x_train['feature'] (float64), x_test['feature'] (float64) cast "
                              "to float32")  # fmt: skip


@pytest.mark.parametrize(
    ("workload", "said"),
    [
        (keyword_models.RAGGED, "data(0): the inputs of x differ in samples (x['input_ids'] 80, "
         "x['decoder_input_ids'] 50); every input needs one row per sample, as a batch takes "
         "the same rows of each"),
        (keyword_models.DICT_Y, "data(0): y is a dict; the targets are one array (x alone may be "
         "a dict of the model's inputs by keyword)"),
        (keyword_models.OTHER_INPUTS, "data(0): x_train is input_ids, decoder_input_ids and "
         "x_test input_ids, attention_mask; the model sees both, so they name the same inputs"),
        (keyword_models.BAD_KEY, "data(0): x has the key 'input ids'; a dict x's keys are the "
         "model's keyword arguments (torch cells call model(**x))"),
    ],
    ids=["ragged", "dict_y", "other_inputs", "bad_key"],
)  # fmt: skip
def test_a_dict_x_no_cell_can_train_on_is_one_line(workload: UserWorkload, said: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        user_data(workload, 0, "m:W")
    assert str(raised.value) == f"--workload 'm:W': {said}"


def test_data_returning_a_dict_alone_is_told_the_forms_with_a_dict_x() -> None:
    with pytest.raises(InvalidInput) as raised:
        user_data(_workload(lambda seed: _inputs(10)), 0, "m:W")
    assert str(raised.value) == (
        "--workload 'm:W': data(0) returned a dict; return (x_train, y_train, x_test, y_test) "
        "or (x, y) as a tuple of numpy arrays (x may be a dict of them by the model's keyword "
        "arguments), or an iterable of (x, y) batches"
    )


def test_a_dict_xs_batches_name_the_same_inputs() -> None:
    x = _inputs(5)
    batches = [(x, np.arange(5)), ({"ids": x["ids"]}, np.arange(5))]
    with pytest.raises(InvalidInput, match=r"its batches' x differ in their inputs \(ids; ids, "):
        user_data(_workload(lambda seed: batches), 0)


# --- through the command -------------------------------------------------------------------


@needs_transformers
def test_a_raw_t5_of_two_inputs_trains_in_fp32_and_bf16(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_mpbench("run", "-w", "keyword_models:T5", *TINY, "-p", "fp32", "-p", "bf16",
                       "--out", out, cwd=TESTS, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["policy"] for r in records] == ["float32", "mixed_bfloat16"]
    # Source 16 tokens, target 8: the cross-attention's 8 × 16 scores, not a square.
    expected = 3 * keyword_models.t5_forward_flops(keyword_models.BATCH)
    assert expected == 21_823_488
    for record in records:
        assert record["status"] == "ok", record
        assert record["flops_per_step"] == expected
        assert record["accuracy"]["test_accuracy"] is not None  # per target token
        assert record["data"]["train_size"] == 64 and record["data"]["test_size"] == 16
        assert record["config"]["output"] == "'logits' of the Seq2SeqLMOutput the forward returns"
        assert "op_dtypes_unavailable" not in record["precision"]
    assert records[1]["precision"]["linear_dtype"] == "bfloat16"


@needs_transformers
def test_a_dict_x_of_ragged_inputs_is_refused_before_anything_runs(tmp_path: Path) -> None:
    out = tmp_path / "o"
    done = run_mpbench("run", "-w", "keyword_models:RAGGED", *TINY, "--out", out, cwd=TESTS)
    assert refusal_line(done, out).endswith(
        "data(0): the inputs of x differ in samples (x['input_ids'] 80, x['decoder_input_ids'] "
        "50); every input needs one row per sample, as a batch takes the same rows of each"
    )


@needs_tensorflow
def test_a_keras_cell_of_a_dict_x_is_skipped_with_the_reason(tmp_path: Path) -> None:
    """Keras models take a dict, but the TensorFlow backend's steps, FLOP count, read-back and
    fp8 check feed one array: the cell is skipped and says so, never failed on the way."""
    out = tmp_path / "run"
    done = run_mpbench("run", "-w", "keyword_models:KERAS_TWO_INPUTS", "-f", "tensorflow",
                       "-p", "fp32", *TINY[2:], "--out", out, cwd=TESTS, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "skipped", record
    assert record["reason"] == (
        "its data() gives x as a dict of inputs (left, right): mpbench feeds a dict x to torch "
        "models only (model(**x)); a Keras cell needs x as one array"
    )


@needs_torch
def test_the_check_before_the_first_cell_calls_a_model_with_its_inputs_by_keyword() -> None:
    """The meta-device forward gives the model a batch of each input by keyword, as the cells
    do: a model returning one number for the batch is refused from a dict x too."""
    from mpbench.runner.user_check import _check_output

    x, _ = keyword_models.translation(0)
    with pytest.raises(InvalidInput, match=r"the model returns a 0-d tensor .* batch of 2 samples"):
        _check_output("m:W", keyword_models.ONE_NUMBER, {k: v[:2] for k, v in x.items()})
    _check_output("m:W", keyword_models.T5, {k: v[:2] for k, v in x.items()})  # a tensor: fine
