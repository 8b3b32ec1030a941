import json
from pathlib import Path

import pytest

from mpbench.errors import InvalidInput
from mpbench.runner.config import RunConfig, RunOptions, build_config, contradictions, parse_file

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    ("name", "workloads"),
    [
        ("default", {"auto"}),  # by device: test_cells.py, the default config's workloads
        # The quick look: 3 repeats of every policy fit in seconds only for the small model.
        ("quick", {"mnist_dense"}),
        ("full", {"mnist_dense", "cifar10_cnn", "transformer_lm"}),
    ],
)
def test_shipped_configs_parse_and_repeat_three_times(name, workloads):
    config = build_config(RunOptions(config=CONFIGS / f"{name}.toml"))
    assert set(config.workload_names) == workloads
    assert config.repeat >= 3  # intervals from separate processes (issue 9)


def test_default_config_is_reference_faithful_for_mnist():
    config = build_config(RunOptions(config=CONFIGS / "default.toml"))
    mnist = config.workloads["mnist_dense"]
    assert (mnist.batch_size, mnist.epochs, mnist.max_steps, mnist.units) == (8192, 5, None, None)
    assert config.policies == ["auto"]


def test_full_config_trains_cifar_for_fifty_epochs():
    config = build_config(RunOptions(config=CONFIGS / "full.toml"))
    cifar = config.workloads["cifar10_cnn"]
    assert (cifar.batch_size, cifar.epochs, cifar.max_steps) == (128, 50, None)


def test_transformer_runs_at_the_devices_preset_sizes_unless_a_config_sets_them():
    # Not in the default matrix, but `-w transformer_lm` gets a short CPU-sized run.
    default = build_config(RunOptions(config=CONFIGS / "default.toml")).workloads
    lm = default["transformer_lm"]
    assert (lm.batch_size, lm.epochs, lm.max_steps) == (32, 1, 60)
    full = build_config(RunOptions(config=CONFIGS / "full.toml")).workloads["transformer_lm"]
    assert (full.batch_size, full.epochs, full.max_steps) == (32, 5, None)
    for settings in (lm, full):  # the device's preset (workloads/spec.py) fills these in
        assert (settings.units, settings.heads, settings.layers, settings.seq_len) == (None,) * 4


def test_command_line_overrides_the_file():
    options = RunOptions(
        config=CONFIGS / "default.toml",
        batch_size=64,
        max_steps=7,
        units=32,
        policies=["bf16"],
        data="synthetic",
        loop="custom",
        jit="on",
    )
    config = build_config(options)
    for settings in config.workloads.values():
        assert (settings.batch_size, settings.max_steps, settings.units) == (64, 7, 32)
    assert config.policies == ["bf16"] and config.data == "synthetic"
    assert config.loop == "custom" and config.jit is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[run]\nrepeat = 'two'\n", "repeat = 'two': must be a whole number"),
        ("[run]\nbogus = 1\n", "unknown key"),
        ("[workloads.resnet]\nepochs = 1\n", "unknown workload"),
        ("[run\n", "not valid TOML"),
        ("[extras]\n", "unknown table"),
        ("[workloads.mnist_dense]\nepochs = -1\n", "epochs = -1: must be at least 1"),
        ("[run]\nrepeat = 0\n", "repeat = 0: must be at least 1"),
        ("[run]\nthreads = 0\n", "threads = 0: must be at least 1"),
        ("[run]\ntimeout = nan\n", "timeout = nan: must be a finite number"),
        ("[run]\nframeworks = [1]\n", "must be a list of strings"),
    ],
)
def test_malformed_configs_are_invalid_input(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=message):
        parse_file(path)


def test_bad_choices_name_the_valid_ones():
    with pytest.raises(InvalidInput, match="auto, real, synthetic"):
        build_config(RunOptions(config=CONFIGS / "quick.toml", data="imagenet"))
    with pytest.raises(InvalidInput, match="fit, custom"):
        build_config(RunOptions(config=CONFIGS / "quick.toml", loop="eager"))
    with pytest.raises(InvalidInput, match="no such file or directory"):
        build_config(RunOptions(config=CONFIGS / "quick.toml", data_dir=Path("/nonexistent")))
    with pytest.raises(InvalidInput, match="no such file"):
        build_config(RunOptions(config=Path("/nonexistent.toml")))


def test_options_meet_the_limits_of_the_file():
    for options, message in [
        (RunOptions(batch_size=0), "--batch-size 0: must be at least 1"),
        (RunOptions(repeat=10**9), "--repeat 1000000000: must be at most 1000"),
        (RunOptions(timeout=float("nan")), "--timeout nan: must be a finite number"),
        (RunOptions(seed=2**32), "--seed 4294967296: must be at most"),
        (RunOptions(seed=2**32 - 1, repeat=2), "seeds must stay at most 4294967295"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            build_config(RunOptions(**{**options.__dict__, "config": CONFIGS / "quick.toml"}))


def test_a_stored_config_round_trips_and_resumes_unchanged():
    config = build_config(RunOptions(config=CONFIGS / "quick.toml", batch_size=32, jit="on"))
    stored = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert stored == config
    assert contradictions(stored, RunOptions()) == []
    same = RunOptions(batch_size=32, policies=list(config.policies), jit="on")
    assert contradictions(stored, same) == []


def test_resume_options_that_change_the_run_are_named():
    stored = build_config(RunOptions(config=CONFIGS / "quick.toml", batch_size=64, units=64))
    found = contradictions(stored, RunOptions(batch_size=32, units=64, policies=["fp16"]))
    assert found == ["--batch-size 32 (the run has 64)", "--policy ['fp16'] (the run has ['all'])"]
