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
from mpbench.runner.cells import expand
from mpbench.runner.config import RunConfig, RunOptions, build_config, contradictions

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
QUICK = CONFIGS / "quick.toml"


def _config(tmp_path: Path, run: str = "", torch: str = "", **options) -> RunConfig:
    path = tmp_path / "c.toml"
    path.write_text(f"[run]\n{run}\n[torch]\n{torch}\n")
    return build_config(RunOptions(config=path, **options))


def test_defaults_leave_the_recipes_off(tmp_path):
    config = _config(tmp_path)
    assert (config.loss_scale, config.accumulate, config.batch_scale_16bit, config.compile) == (
        None,
        1,
        1,
        False,
    )


@pytest.mark.parametrize(
    ("run", "torch", "options", "expected"),
    [
        ('loss_scale = "dynamic"', "", {}, {"loss_scale": None}),
        ("loss_scale = 1024", "", {}, {"loss_scale": 1024.0}),
        ("", "", {"loss_scale": "1e30"}, {"loss_scale": 1e30}),
        ("loss_scale = 8", "", {"loss_scale": "dynamic"}, {"loss_scale": None}),
        ("accumulate = 4", "", {}, {"accumulate": 4}),
        ("accumulate = 4", "", {"accumulate": 2}, {"accumulate": 2}),
        ("batch_scale_16bit = 2", "", {}, {"batch_scale_16bit": 2}),
        ("", "compile = true", {}, {"compile": True}),
        ("", "compile = true", {"compile": False}, {"compile": False}),
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
        ("", {"loss_scale": "1e39"}, r"at most 1e\+38"),
        ("", {"loss_scale": "nan"}, "finite"),
        ("loss_scale = true", {}, "must be"),
        ("accumulate = 0", {}, "at least 1"),
        ("", {"accumulate": 0}, "--accumulate 0: must be at least 1"),
        ("accumulate = 2.5", {}, "whole number"),
        ("batch_scale_16bit = 0", {}, "at least 1"),
        ("", {"batch_scale_16bit": 5000}, "at most 1024"),
    ],
)
def test_bad_values_are_refused_alike_from_file_and_command_line(tmp_path, run, options, message):
    with pytest.raises(InvalidInput, match=message):
        _config(tmp_path, run, **options)


def test_the_torch_table_admits_only_compile(tmp_path):
    with pytest.raises(InvalidInput, match="compile"):
        _config(tmp_path, torch="jit = true")


def test_resume_refuses_changed_recipes_and_accepts_the_same():
    stored = build_config(RunOptions(config=QUICK, loss_scale="1024", accumulate=2))
    stored = RunConfig.from_dict(json.loads(json.dumps(stored.to_dict())))
    same = RunOptions(loss_scale="1024", accumulate=2)
    assert contradictions(stored, same) == []
    found = contradictions(
        stored, RunOptions(loss_scale="dynamic", accumulate=4, batch_scale_16bit=2, compile=True)
    )
    assert found == [
        "--accumulate 4 (the run has 2)",
        "--batch-scale-16bit 2 (the run has 1)",
        "--loss-scale dynamic (the run has 1024.0)",
        "--compile True (the run has False)",
    ]


class _Report:
    gpus = ()

    def device_traits(self, kind, index):
        return DeviceTraits(kind="cpu", name="test cpu")


def test_cells_carry_the_recipes_and_scale_only_16bit_batches():
    config = build_config(
        RunOptions(
            config=QUICK,
            frameworks=["torch", "tensorflow"],
            workloads=["mnist_dense"],
            policies=["fp32", "bf16", "fp16"],
            batch_size=64,
            loss_scale="512",
            accumulate=3,
            batch_scale_16bit=2,
            compile=True,
        )
    )
    _, _, cells = expand(config, _Report(), "run")
    by = {(c.spec.framework, c.spec.policy, c.spec.repeat): c.spec for c in cells}
    fp32, bf16 = by["torch", "float32", 0], by["torch", "mixed_bfloat16", 0]
    assert (fp32.batch_size, bf16.batch_size) == (64, 128)
    assert bf16.effective_batch == 384
    assert bf16.config()["reference_batch_size"] == 64
    assert fp32.config() | {"batch_size": 0, "effective_batch_size": 0} == bf16.config() | {
        "batch_size": 0,
        "effective_batch_size": 0,
    }  # the same keys for every policy: one compare group
    assert fp32.config()["loss_scale"] == 512.0 and fp32.config()["compile"] is True
    assert "compile" not in by["tensorflow", "float32", 0].config()  # torch only


def test_help_names_every_recipe_option():
    result = subprocess.run(
        [sys.executable, "-m", "mpbench", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    )
    for option in ("--loss-scale", "--accumulate", "--batch-scale-16bit", "--compile"):
        assert option in result.stdout
