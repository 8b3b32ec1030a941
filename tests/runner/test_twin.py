"""What the runner hands a cell as its float32 twin's step (runner/twin.py), and the setting
that holds a cell to it (--stop-slower-than, settings.py)."""

from __future__ import annotations

import json

import pytest
from builders import BATCH_SCALED_2, cell_spec, record

from mpbench.errors import InvalidInput
from mpbench.results import Status
from mpbench.runner.config import RunConfig, RunOptions, build_config
from mpbench.runner.twin import float32_step_s

RUN = "20260301-101500-cpu"  # the builders' run


def spec(policy: str, repeat: int = 0, **changes: object):
    """The cell of this run whose config the builders' records have."""
    given = dict(run_id=RUN, policy=policy, repeat=repeat, seed=repeat, batch_size=128, epochs=1)
    given.update(max_steps=60, units=64, warmup_steps=5)
    return cell_spec(**{**given, **changes})


def float32(median_ms: float, repeat: int = 0, **changes: object):
    return record("torch", "mnist_dense", "float32", median_ms=median_ms, repeat=repeat, **changes)


def test_the_same_repeats_twin_is_handed_on():
    records = [float32(2.0, repeat=0), float32(3.0, repeat=1)]
    assert float32_step_s(spec("mixed_bfloat16", repeat=1), records) == pytest.approx(3e-3)
    assert float32_step_s(spec("mixed_bfloat16", repeat=0), records) == pytest.approx(2e-3)


def test_another_repeats_twin_stands_in_for_one_that_did_not_finish():
    failed = record("torch", "mnist_dense", "float32", repeat=1, status=Status.ERROR, reason="x")
    records = [float32(2.0, repeat=0), failed]
    assert float32_step_s(spec("mixed_float16", repeat=1), records) == pytest.approx(2e-3)


def test_none_for_float32_itself_another_workload_or_config():
    records = [float32(2.0)]
    assert float32_step_s(spec("float32"), records) is None
    assert float32_step_s(spec("mixed_bfloat16", units=32), records) is None
    assert float32_step_s(spec("mixed_bfloat16", framework="tensorflow"), records) is None
    assert float32_step_s(spec("mixed_bfloat16", run_id="another"), records) is None
    assert float32_step_s(spec("mixed_bfloat16"), []) is None


def test_a_16_bit_cell_at_twice_the_batch_is_held_to_twice_float32s_step():
    scaled = spec("mixed_bfloat16", batch_size=256, reference_batch_size=128, batch_scale_16bit=2)
    assert BATCH_SCALED_2["batch_size"] == scaled.batch_size
    assert float32_step_s(scaled, [float32(2.0)]) == pytest.approx(4e-3)


def test_stop_slower_than_takes_a_number_or_off_and_keeps_it_in_run_json():
    assert build_config(RunOptions()).stop_slower_than == 10.0
    for typed, value in (("20", 20.0), ("off", None), ("OFF", None)):
        config = build_config(RunOptions(stop_slower_than=typed))
        assert config.stop_slower_than == value
        assert RunConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    for bad in ("0.5", "fast"):
        with pytest.raises(InvalidInput, match="--stop-slower-than"):
            build_config(RunOptions(stop_slower_than=bad))
