"""A policy's facts live once, on its Policy (mpbench.policies): the fallback ladder, the short
name compare prints, the policy it builds on, its plot colour and marker, its peak key. Each
user reads them from there, so a new policy is one row of the table, and the users agree."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from mpbench import fp8_rules as fp8
from mpbench.backends import FRAMEWORKS
from mpbench.compare.plot import style
from mpbench.compare.summary.comparison import short
from mpbench.detect import measure, peaks
from mpbench.policies import (
    FLOAT8,
    MIXED_BFLOAT16,
    POLICIES,
    DeviceTraits,
    Rating,
    rate,
    resolve,
)
from mpbench.results.identity import Row
from mpbench.runner import fallback
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.matrix import recipes

CI = Path(__file__).resolve().parents[1] / "configs" / "ci.toml"
DEVICES = [
    DeviceTraits("cuda", "NVIDIA H100 80GB HBM3", compute_capability=(9, 0)),
    DeviceTraits("cuda", "Tesla P100-PCIE-16GB", compute_capability=(6, 0)),
    DeviceTraits("cpu", "AVX2 only", cpu_flags=frozenset()),
    DeviceTraits("tpu", "TPU v5e"),
    DeviceTraits("mps", "Apple M3"),
]
EVERY = list(POLICIES.values())


# --- the fallback ladder -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.name)
@pytest.mark.parametrize("policy", EVERY, ids=lambda p: p.name)
def test_a_diverged_cell_falls_back_down_its_policys_ladder(policy, device):
    supported = [p for p in policy.fallbacks if rate(p, device).rating is not Rating.UNSUPPORTED]
    assert fallback.next_policy(policy.name, device) == next(iter(supported), None)


def test_the_ladder_only_goes_down_and_ends_at_float32():
    assert not hasattr(fallback, "LADDER")  # no table of its own beside the policies'
    for policy in EVERY:
        assert policy.name not in policy.fallbacks
        assert all(name in POLICIES for name in policy.fallbacks)
        assert (policy.fallbacks[-1:] or (policy.name,)) == ("float32",)


def test_an_alias_falls_back_like_its_policy():
    h100 = DEVICES[0]
    assert fallback.next_policy("fp16", h100) == fallback.next_policy("mixed_float16", h100)
    assert fallback.next_policy("fp16", h100) == MIXED_BFLOAT16.name


# --- the short name compare prints ---------------------------------------------------------------


@pytest.mark.parametrize("policy", EVERY, ids=lambda p: p.name)
def test_compare_prints_the_policys_short_name(policy):
    assert short(policy.name) == policy.short
    assert short(Row(policy.name, "[loss scale 1024]")) == f"{policy.short} [loss scale 1024]"
    # The short name is one of the policy's own spellings: `-p fp16` names the `fp16` row.
    assert resolve(policy.short) is policy


def test_a_row_that_is_no_policy_keeps_its_name():
    assert short(Row("float64", "@bs2")) == "float64 @bs2"
    assert short("float64") == "float64"


# --- the policy it builds on ---------------------------------------------------------------------


def test_float8_builds_on_bf16_and_the_fp8_record_says_the_same():
    assert FLOAT8.base == MIXED_BFLOAT16.name == fp8.BASE_POLICY
    for policy in EVERY:
        if policy.base is not None:
            assert resolve(policy.base).compute_dtype == policy.compute_dtype
    assert [p.name for p in EVERY if p.base is not None] == [FLOAT8.name]


# --- colours and markers on the plots ------------------------------------------------------------


def test_each_policy_has_a_marker_of_its_own():
    markers = [p.marker for p in EVERY]
    assert len(set(markers)) == len(markers)
    assert {p.name: p.marker for p in EVERY} == style.POLICY_MARKERS


def test_each_coloured_policy_has_a_colour_of_its_own():
    colours = {p.name: p.colour for p in EVERY if p.colour is not None}
    assert len(set(colours.values())) == len(colours)
    assert colours == style.POLICY_COLOURS
    # float8 keeps the spare colour it had (by its row's place); only its marker is its own.
    assert FLOAT8.colour is None and FLOAT8.name not in style.POLICY_COLOURS


def test_a_policys_colour_is_its_first_rows_colour_on_the_plot():
    rows = [Row(p.name) for p in EVERY] + [Row(MIXED_BFLOAT16.name, "@bs2")]
    colours = style.row_colours(rows)
    for policy in EVERY:
        if policy.colour is not None:
            assert colours[policy.name] == policy.colour
    assert colours[f"{MIXED_BFLOAT16.name} @bs2"] == style.shade(MIXED_BFLOAT16.colour, 1)


# --- what the policy says about the cells it runs ------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_loss_scale_makes_cells_of_the_loss_scaled_policy_only(framework):
    config = build_config(RunOptions(config=CI, policies=["all"], loss_scale=["dynamic", "1024"]))
    for policy in EVERY:
        scales = [recipe.loss_scale for recipe in recipes(config, framework, policy)]
        assert scales == ([None, 1024.0] if policy.loss_scaling else [None])
    assert [p.name for p in EVERY if p.loss_scaling] == ["mixed_float16"]


# --- one list of peak keys -----------------------------------------------------------------------


def test_the_datasheet_and_the_measurement_use_one_list_of_peak_keys():
    assert tuple(p.peak_key for p in EVERY) == peaks.PEAK_KEYS
    assert measure.PEAK_KEYS is peaks.PEAK_KEYS
    default = inspect.signature(measure.run_measure_child).parameters["dtypes"].default
    assert default is peaks.PEAK_KEYS
    assert tuple(peaks.all_peaks("NVIDIA H100 80GB HBM3")) == peaks.PEAK_KEYS
    h100 = peaks.lookup("NVIDIA H100 80GB HBM3")
    assert h100 is not None and all(h100.get(key) is not None for key in peaks.PEAK_KEYS)
