"""The recipe settings (docs/recipes.md): one limit table for TOML and the command line,
their place in a cell's config (its compare identity), and --resume contradictions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mpbench.errors import InvalidInput
from mpbench.policies import DeviceTraits
from mpbench.runner.config import (
    RunConfig,
    RunOptions,
    build_config,
    compile_axis,
    contradictions,
)
from mpbench.runner.matrix import expand

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QUICK = CONFIGS / "quick.toml"


def _config(tmp_path: Path, run: str = "", torch: str = "", **options) -> RunConfig:
    path = tmp_path / "c.toml"
    path.write_text(f"[run]\n{run}\n[torch]\n{torch}\n")
    return build_config(RunOptions(config=path, **options))


def test_defaults_leave_the_recipes_off(tmp_path):
    config = _config(tmp_path)
    assert (config.loss_scale, config.accumulate, config.batch_scale_16bit, config.compile) == (
        [None],
        [1],
        [1],
        [False],
    )


@pytest.mark.parametrize(
    ("run", "torch", "options", "expected"),
    [
        ('loss_scale = "dynamic"', "", {}, {"loss_scale": [None]}),
        ("loss_scale = 1024", "", {}, {"loss_scale": [1024.0]}),
        ('loss_scale = ["dynamic", 1024]', "", {}, {"loss_scale": [None, 1024.0]}),
        ("", "", {"loss_scale": ["1e30"]}, {"loss_scale": [1e30]}),
        ("", "", {"loss_scale": ["dynamic,1024", "8"]}, {"loss_scale": [None, 1024.0, 8.0]}),
        ("loss_scale = 8", "", {"loss_scale": ["dynamic"]}, {"loss_scale": [None]}),
        ("accumulate = 4", "", {}, {"accumulate": [4]}),
        ("accumulate = [1, 4, 4]", "", {}, {"accumulate": [1, 4]}),
        ("accumulate = 4", "", {"accumulate": ["2"]}, {"accumulate": [2]}),
        ("", "", {"accumulate": ["1,4"]}, {"accumulate": [1, 4]}),
        ("batch_scale_16bit = [1, 2]", "", {}, {"batch_scale_16bit": [1, 2]}),
        ("", "compile = true", {}, {"compile": [True]}),
        ("", "compile = [false, true]", {}, {"compile": [False, True]}),
        ("", "compile = true", {"compile": [False]}, {"compile": [False]}),
    ],
)
def test_file_and_command_line(tmp_path, run, torch, options, expected):
    config = _config(tmp_path, run, torch, **options)
    assert {k: getattr(config, k) for k in expected} == expected


@pytest.mark.parametrize(
    ("run", "options", "message"),
    [
        ('loss_scale = "big"', {}, "must be 'dynamic' or a number"),
        ("loss_scale = 0.5", {}, "at least 1"),
        ('loss_scale = ["dynamic", 0.5]', {}, "at least 1"),
        ("loss_scale = []", {}, "at least one value"),
        ("", {"loss_scale": ["1e39"]}, r"at most 1e\+38"),
        ("", {"loss_scale": ["nan"]}, "finite"),
        ("", {"loss_scale": ["dynamic,"]}, "must be 'dynamic' or a number"),
        ("loss_scale = true", {}, "must be"),
        ("accumulate = 0", {}, "at least 1"),
        ("", {"accumulate": ["0"]}, "--accumulate 0: must be at least 1"),
        ("", {"accumulate": ["2.5"]}, "--accumulate '2.5': must be a whole number"),
        ("", {"accumulate": [",".join(map(str, range(1, 18)))]}, "at most 16"),
        ("accumulate = 2.5", {}, "whole number"),
        ("accumulate = [1, true]", {}, "whole number"),
        ("batch_scale_16bit = 0", {}, "at least 1"),
        ("", {"batch_scale_16bit": ["5000"]}, "at most 1024"),
    ],
)
def test_bad_values_are_refused_alike_from_file_and_command_line(tmp_path, run, options, message):
    with pytest.raises(InvalidInput, match=message):
        _config(tmp_path, run, **options)


def test_the_torch_table_admits_only_compile(tmp_path):
    with pytest.raises(InvalidInput, match="compile"):
        _config(tmp_path, torch="jit = true")
    with pytest.raises(InvalidInput, match="true or false"):
        _config(tmp_path, torch='compile = ["yes"]')


def test_also_eager_needs_compile():
    assert compile_axis(True, True) == [False, True]
    assert compile_axis(None, False) == []
    with pytest.raises(InvalidInput, match=r"--also-eager.*add --compile"):
        compile_axis(None, True)


def test_resume_refuses_changed_recipes_and_accepts_the_same():
    stored = build_config(RunOptions(config=QUICK, loss_scale=["1024"], accumulate=["2"]))
    stored = RunConfig.from_dict(json.loads(json.dumps(stored.to_dict())))
    same = RunOptions(loss_scale=["1024"], accumulate=["2"])
    assert contradictions(stored, same) == []
    found = contradictions(
        stored,
        RunOptions(
            loss_scale=["dynamic,1024"], accumulate=["4"], batch_scale_16bit=["2"], compile=[True]
        ),
    )
    assert found == [
        "--loss-scale dynamic,1024 (the run has 1024)",
        "--accumulate 4 (the run has 2)",
        "--batch-scale-16bit 2 (the run has 1)",
        "--compile on (the run has off)",
    ]


def test_a_run_json_of_single_values_resumes():
    """run.json of a run started when each recipe took one value."""
    stored = build_config(RunOptions(config=QUICK)).to_dict()
    stored.update(loss_scale=1024.0, accumulate=2, batch_scale_16bit=1, compile=False)
    config = RunConfig.from_dict(stored)
    assert (config.loss_scale, config.accumulate, config.compile) == ([1024.0], [2], [False])


class _Report:
    gpus = ()

    def device_traits(self, kind, index):
        return DeviceTraits(kind="cpu", name="test cpu")


def _cells(**options):
    defaults = dict(
        config=QUICK,
        frameworks=["torch", "tensorflow"],
        workloads=["mnist_dense"],
        policies=["fp32", "bf16", "fp16"],
        batch_size=64,
        repeat=1,
    )
    config = build_config(RunOptions(**{**defaults, **options}))
    _, _, cells = expand(config, _Report(), "run")
    return [c.spec for c in cells]


def test_cells_carry_the_recipes_and_scale_only_16bit_batches():
    specs = _cells(loss_scale=["512"], accumulate=["3"], batch_scale_16bit=["2"], compile=[True])
    by = {(s.framework, s.policy, s.repeat): s for s in specs}
    assert len(specs) == 6  # one recipe per cell: nothing multiplied
    fp32, bf16, fp16 = (by["torch", p, 0] for p in ("float32", "mixed_bfloat16", "mixed_float16"))
    assert (fp32.batch_size, bf16.batch_size) == (64, 128)
    assert bf16.effective_batch == 384
    assert (
        bf16.config()["reference_batch_size"] == 64 and "reference_batch_size" not in fp32.config()
    )
    assert fp16.config()["loss_scale"] == 512.0 and "loss_scale" not in fp32.config()
    assert fp32.config()["compile"] is True and fp32.config()["accumulate"] == 3
    assert fp16.cell_id == "torch/mnist_dense/mixed_float16@ls512@acc3@bs2@compiled/r0"
    assert fp32.cell_id == "torch/mnist_dense/float32@acc3@compiled/r0"
    assert "compile" not in by["tensorflow", "float32", 0].config()  # torch only
    assert by["tensorflow", "float32", 0].cell_id == "tensorflow/mnist_dense/float32@acc3/r0"


def test_several_values_are_one_cell_each_where_they_apply():
    specs = _cells(loss_scale=["dynamic,1024"], batch_scale_16bit=["1,2"], compile=[False, True])
    ids = sorted(s.cell_id for s in specs)
    torch_ids = [
        i.removeprefix("torch/mnist_dense/").removesuffix("/r0") for i in ids if "torch" in i
    ]
    # float32: eager and compiled; bf16: x two batches; fp16: x two batches x two scales
    assert torch_ids == sorted(
        [
            "float32",
            "float32@compiled",
            *[f"mixed_bfloat16{b}{c}" for b in ("", "@bs2") for c in ("", "@compiled")],
            *[
                f"mixed_float16{s}{b}{c}"
                for s in ("", "@ls1024")
                for b in ("", "@bs2")
                for c in ("", "@compiled")
            ],
        ]
    )
    tf_ids = [i for i in ids if i.startswith("tensorflow")]
    assert len(tf_ids) == 1 + 2 + 4  # compile does not apply: no duplicate cells
    assert len(set(ids)) == len(ids)


def test_the_default_recipe_keeps_the_cell_ids_of_earlier_runs():
    assert {s.cell_id for s in _cells(frameworks=["torch"], policies=["fp32"])} == {
        "torch/mnist_dense/float32/r0"
    }


def test_help_names_every_recipe_option():
    result = subprocess.run(
        [sys.executable, "-m", "mpbench", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    )
    for option in (
        "--loss-scale",
        "--accumulate",
        "--batch-scale-16bit",
        "--compile",
        "--also-eager",
    ):
        assert option in result.stdout


def test_the_commented_examples_in_full_toml_are_valid(tmp_path):
    """configs/full.toml shows each axis as a commented example: uncommented, they parse."""
    text = (CONFIGS / "full.toml").read_text()
    for line in (
        "# loss_scale",
        "# accumulate =",
        "# batch_scale_16bit",
        "# [torch]",
        "# compile =",
        "# on_diverge =",
        "# [distributed]",
        "# nproc =",
        "# grad_comm =",
    ):
        assert line in text
        text = text.replace(line, line.removeprefix("# "))
    path = tmp_path / "full.toml"
    path.write_text(text)
    config = build_config(RunOptions(config=path))
    assert (config.loss_scale, config.accumulate) == ([None, 1024.0], [1, 4])
    assert (config.batch_scale_16bit, config.compile) == ([1, 2], [False, True])
    assert config.on_diverge == "fallback"
    assert (config.nproc, config.grad_comm) == ([1, 2], "bf16")
