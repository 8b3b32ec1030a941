"""A cell's row (results.identity.Row): the policy and its variant as fields, read from the
record once, and the text every output names the row by."""

from __future__ import annotations

import copy
import pickle

from mpbench.results.identity import Row, cell_key, timed_step_samples
from mpbench.results.schema import CellRecord, DeviceInfo, Status


def record(policy: str, fallback_of: str | None = None, **config: object) -> CellRecord:
    rec = CellRecord(
        run_id="r",
        cell_id=f"torch/mnist_dense/{policy}/r0",
        framework="torch",
        workload="mnist_dense",
        policy=policy,
        repeat=0,
        timestamp="2026-11-26T15:00:00+00:00",
        framework_version="torch 2.13.0",
        device=DeviceInfo(kind="cpu", name="test cpu"),
        status=Status.OK,
    )
    rec.config = {"batch_size": 256, "epochs": 1, **config}
    rec.fallback_of = fallback_of
    return rec


def test_the_row_holds_policy_and_variant_apart_and_reads_as_its_text():
    row = cell_key(
        record("mixed_float16", loss_scale=1024.0, batch_scale_16bit=2, reference_batch_size=128)
    ).row
    assert (row.policy, row.variant) == ("mixed_float16", "@256 [loss scale 1024]")
    assert row == "mixed_float16 @256 [loss scale 1024]"
    assert row.batch_scaled and not row.fallback
    fallback = cell_key(record("mixed_bfloat16", fallback_of="torch/mnist_dense/x/r0")).row
    assert (fallback.policy, fallback.variant, fallback.fallback) == (
        "mixed_bfloat16",
        "(fallback)",
        True,
    )


def test_a_plain_row_is_found_by_its_policys_name():
    plain = cell_key(record("float32")).row
    assert plain.variant is None and not plain.batch_scaled
    assert {plain: "cell"}.get("float32") == "cell"
    assert Row("float32", "") == Row("float32") and Row("float32", "").variant is None


def test_a_copied_or_pickled_row_keeps_its_fields():
    row = Row("mixed_float16", "[loss scale 1024]")
    for other in (copy.copy(row), copy.deepcopy(row), pickle.loads(pickle.dumps(row))):
        assert isinstance(other, Row)
        assert (other.policy, other.variant) == (row.policy, row.variant)


def test_a_timed_steps_samples_are_the_micro_batch_times_the_accumulation():
    assert timed_step_samples({"batch_size": 256}) == 256
    assert timed_step_samples({"batch_size": 256, "accumulate": 4}) == 1024
    # A config that does not say (or says nonsense) gives no size, never a guess.
    assert timed_step_samples({}) is None
    assert timed_step_samples({"batch_size": True}) is None
    assert timed_step_samples({"batch_size": 256, "accumulate": 0}) is None
