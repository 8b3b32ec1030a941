"""The language model's byte-level text: TinyShakespeare's input.txt found and cut into
windows, its refusals, and the synthetic byte stream that stands in for it."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli import run_mpbench
from data_formats import write_text_corpus
from frameworks import needs_torch

from mpbench.data import DataError, DataNotFound, check_data, load
from mpbench.data import text as text_data
from mpbench.errors import InvalidInput

SEQ = 16


def test_input_txt_in_data_dir_is_read_cut_and_labelled(tmp_path: Path) -> None:
    raw = write_text_corpus(tmp_path / "input.txt", 4000)
    loaded = load("tinyshakespeare", mode="real", data_dir=tmp_path, seq_len=SEQ)
    assert (loaded.name, loaded.source) == ("tinyshakespeare", "real")
    assert loaded.origin == str(tmp_path / "input.txt")
    assert loaded.sha256 == {"input.txt": hashlib.sha256(raw).hexdigest()}
    # 90 / 10: 3600 training bytes give (3600 - 1) // 16 windows, 400 test bytes 24.
    assert loaded.x_train.shape == (3599 // SEQ, SEQ) and loaded.x_test.shape == (399 // SEQ, SEQ)
    assert loaded.x_train.dtype == np.uint8
    stream = np.frombuffer(raw, dtype=np.uint8)
    # A window is consecutive bytes, its targets the bytes one further on.
    assert np.array_equal(loaded.x_train[1], stream[SEQ : 2 * SEQ])
    assert np.array_equal(loaded.y_train[1], stream[SEQ + 1 : 2 * SEQ + 1])
    assert np.array_equal(loaded.x_test[0], stream[3600 : 3600 + SEQ])
    assert bytes(loaded.x_train[0][:14]) == b"First Citizen:"


def test_check_data_reports_the_windows_the_cells_get(tmp_path: Path) -> None:
    write_text_corpus(tmp_path / "tinyshakespeare" / "input.txt", 4000)
    check = check_data("tinyshakespeare", "auto", tmp_path, False, seq_len=SEQ)
    assert (check.source, check.train_size, check.test_size) == ("real", 3599 // SEQ, 399 // SEQ)
    assert check.origin == str(tmp_path / "tinyshakespeare" / "input.txt")


def test_the_keras_tutorials_shakespeare_txt_in_the_keras_cache_is_found(homes) -> None:
    write_text_corpus(homes.keras / "shakespeare.txt", 3000)
    loaded = load("tinyshakespeare", mode="real", seq_len=SEQ)
    assert loaded.origin == str(homes.keras / "shakespeare.txt")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "empty"),
        (b"First Citizen:\n" * 100 + b"\x00\x01\x02", "a NUL byte at offset 1500; not a text file"),
        (b"First Citizen:\n" * 100 + b"\xff\xfe", "not UTF-8 text (byte 0xff at offset 1500)"),
        (b"First Citizen:\n" * 10, "150 bytes, too short for one test sequence of 16 bytes"),
    ],
)
def test_a_bad_corpus_is_one_line_naming_the_file(tmp_path: Path, content, says) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=r"^" + str(path).replace(".", r"\.")) as caught:
        check_data("tinyshakespeare", "auto", tmp_path, False, seq_len=SEQ)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_real_without_a_corpus_refuses_and_auto_falls_back_with_a_warning(tmp_path) -> None:
    with pytest.raises(DataNotFound, match=r"no TinyShakespeare corpus .* does not download"):
        check_data("tinyshakespeare", "real", tmp_path, True, seq_len=SEQ)
    check = check_data("tinyshakespeare", "auto", tmp_path, True, seq_len=SEQ)
    assert check.source == "synthetic" and "using synthetic-tinyshakespeare" in check.warning
    warned: list[str] = []
    loaded = load("tinyshakespeare", data_dir=tmp_path, seq_len=SEQ, warn=warned.append)
    assert loaded.name == "synthetic-tinyshakespeare" and loaded.source == "synthetic"
    assert warned == [check.warning]


def test_synthetic_stream_sizes_are_windows_and_checked() -> None:
    loaded = load(
        "tinyshakespeare",
        mode="synthetic",
        seq_len=SEQ,
        synthetic_train_size=100,
        synthetic_test_size=10,
        seed=3,
    )
    assert loaded.x_train.shape == (100, SEQ) and loaded.x_test.shape == (10, SEQ)
    # The test windows continue the stream after the training ones.
    assert np.array_equal(loaded.y_train[-1][-1:], loaded.x_test[0][:1])
    # By default as many windows as the real corpus gives.
    default = check_data("tinyshakespeare", "synthetic", None, False, seq_len=128)
    assert (default.train_size, default.test_size) == (7842, 871)
    with pytest.raises(InvalidInput, match="synthetic train size must be a positive integer"):
        check_data("tinyshakespeare", "synthetic", None, False, synthetic_train_size=0, seq_len=8)


def test_synthetic_stream_is_seeded_and_follows_its_chain() -> None:
    length = 50 * text_data._CHAINS  # 50 bytes of each walk, laid end to end
    a, b = text_data.synthetic_stream(0, length), text_data.synthetic_stream(0, length)
    assert np.array_equal(a, b) and not np.array_equal(a, text_data.synthetic_stream(1, length))
    successors, _ = text_data._chain()
    # Inside each walk every next byte is one of its byte's 4 successors.
    walks = a.reshape(text_data._CHAINS, -1)
    allowed = successors[walks[:, :-1]]
    assert (allowed == walks[:, 1:, None]).any(axis=-1).all()
    # The least loss a model can reach: far below uniform, and the bigram entropy the
    # stream itself shows (counted from a long stream) agrees with it.
    floor = text_data.loss_floor()
    assert 0.9 < floor < 1.3 < math.log(256)
    stream = text_data.synthetic_stream(7, 1000 * text_data._CHAINS).reshape(text_data._CHAINS, -1)
    pairs = np.zeros((256, 256))
    np.add.at(pairs, (stream[:, :-1].ravel(), stream[:, 1:].ravel()), 1)
    conditional = pairs / np.maximum(pairs.sum(axis=1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(pairs > 0, pairs * np.log(conditional), 0.0)
    assert -terms.sum() / pairs.sum() == pytest.approx(floor, abs=0.02)


def test_mpbench_run_refuses_a_binary_input_txt_with_one_line_and_exit_2(tmp_path) -> None:
    corpus = tmp_path / "corpus"
    (corpus / "input.txt").parent.mkdir()
    (corpus / "input.txt").write_bytes(b"First Citizen:\n" * 200 + b"\x89PNG\x00")
    out = tmp_path / "run"
    result = run_mpbench(
        "run",
        *("-w", "transformer_lm", "-f", "torch", "-p", "fp32", "--device", "cpu"),
        *("--data", "real", "--data-dir", corpus, "--out", out),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "input.txt: a NUL byte at offset 3004; not a text file" in lines[0]
    assert "Traceback" not in result.stderr and not out.exists()


TINY_LM = """
[run]
warmup_steps = 2
timeout = 300

[workloads.transformer_lm]
batch_size = 8
epochs = 1
max_steps = 6
units = 32
heads = 2
layers = 1
seq_len = 16
"""


@needs_torch
def test_a_torch_cell_trains_on_a_real_input_txt_and_records_it(tmp_path: Path) -> None:
    raw = write_text_corpus(tmp_path / "corpus" / "input.txt", 20_000)
    config = tmp_path / "tiny.toml"
    config.write_text(TINY_LM)
    out = tmp_path / "run"
    result = run_mpbench(
        "run",
        *("--config", config, "-w", "transformer_lm", "-f", "torch", "-p", "fp32"),
        *("--device", "cpu", "--data", "real", "--data-dir", tmp_path / "corpus"),
        *("--out", out),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok", record["reason"]
    data = record["data"]
    assert (data["name"], data["source"]) == ("tinyshakespeare", "real")
    assert data["sha256"] == {"input.txt": hashlib.sha256(raw).hexdigest()}
    assert (data["train_size"], data["test_size"]) == ((18_000 - 1) // 16, (2_000 - 1) // 16)
    assert record["config"]["seq_len"] == 16 and record["config"]["units"] == 32
