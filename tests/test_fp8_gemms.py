"""Predict before you run, explain after (mpbench/fp8_gemms.py): an fp8 cell's GEMM shapes, the
cast bytes, the predicted gain from given times, and the verdict's words. No framework."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from mpbench.fp8_gemms import (
    EAGER_CAST_BYTES,
    FUSED_CAST_BYTES,
    Fp8GemmRow,
    Fp8Prediction,
    Gemm,
    GemmTiming,
    cast_bytes,
    explain,
    forward_shapes,
    no_hardware,
    predict,
    smallest_dimension,
    training_gemms,
    unique_shapes,
    untimed,
)
from mpbench.fp8_rules import LinearLayer, plan_layers

PLAN = plan_layers(
    [
        LinearLayer("blocks.0.fc_1", 64, 256, rows_per_sample=16),
        LinearLayer("blocks.0.fc_2", 256, 64, rows_per_sample=16),
        LinearLayer("head", 64, 10),  # 10 is no multiple of 16: stays in bf16
    ]
)


def test_each_fp8_layer_has_three_gemms_with_m_the_batch_times_its_rows():
    gemms = training_gemms(PLAN.fp8, batch_size=8)
    m = 8 * 16
    assert gemms == [
        Gemm("blocks.0.fc_1", "forward", m, 64, 256),
        Gemm("blocks.0.fc_1", "grad_input", m, 256, 64),
        Gemm("blocks.0.fc_1", "grad_weight", 256, m, 64),
        Gemm("blocks.0.fc_2", "forward", m, 256, 64),
        Gemm("blocks.0.fc_2", "grad_input", m, 64, 256),
        Gemm("blocks.0.fc_2", "grad_weight", 64, m, 256),
    ]
    # Each GEMM of a layer does the forward's FLOPs: 3 × forward per training step.
    assert sum(g.flops for g in gemms) == 3 * 8 * sum(x.forward_flops_per_sample for x in PLAN.fp8)
    assert gemms[0].flops == 2 * 128 * 64 * 256


def test_the_high_precision_grad_weight_recipe_keeps_that_gemm_in_bf16():
    gemms = training_gemms(PLAN.fp8, 8, recipe="rowwise_with_gw_hp")
    assert [g.fp8 for g in gemms] == [True, True, False] * 2
    assert all(g.fp8 for g in training_gemms(PLAN.fp8, 8, recipe="rowwise"))
    assert cast_bytes(gemms[2]) == 0


def test_a_batch_below_one_is_refused():
    with pytest.raises(ValueError, match="batch_size"):
        training_gemms(PLAN.fp8, 0)


def test_each_shape_is_timed_once_and_forward_shapes_are_listed_apart():
    square = [LinearLayer("sq", 32, 32, rows_per_sample=2), LinearLayer("sq2", 32, 32, 2)]
    gemms = training_gemms(square, batch_size=4)  # M = 8: (8,32,32) twice per layer
    assert unique_shapes(gemms) == [(8, 32, 32), (32, 8, 32)]
    assert forward_shapes(gemms) == [(8, 32, 32)]


def test_cast_bytes_counts_both_operands_at_five_bytes_an_element():
    gemm = Gemm("fc", "forward", 32, 64, 128)
    assert cast_bytes(gemm) == 5 * (32 * 64 + 64 * 128) == 51_200
    assert cast_bytes(gemm, per_element=EAGER_CAST_BYTES) == 33 * 10_240
    assert FUSED_CAST_BYTES == 5
    # 2 B amax read + 2 B cast read + 1 B write, fused; eager: abs, max, to float32,
    # multiply, clamp, to float8 on a bf16 operand.
    assert EAGER_CAST_BYTES == (2 + 2) + 2 + (2 + 4) + (4 + 4) + (4 + 4) + (4 + 1)


def _two_gemms() -> list[Gemm]:
    return [Gemm("fc_1", "grad_weight", 10, 10, 10), Gemm("fc_2", "forward", 10, 20, 30)]


def test_the_predicted_gain_is_the_bf16_sum_over_the_fp8_and_cast_sum():
    # At 1e9 B/s: fc_1's casts 5 × (100 + 100) B = 1 µs, fc_2's 5 × (200 + 600) B = 4 µs.
    timings = {
        (10, 10, 10): GemmTiming(bf16_s=4e-6, fp8_s=1e-6, fp8_fast_accum_s=0.5e-6),
        (10, 20, 30): GemmTiming(bf16_s=6e-6, fp8_s=3e-6, fp8_fast_accum_s=2e-6),
    }
    got = predict(_two_gemms(), timings, 1e9, "by hand")
    first, second = got.rows
    # A grad_weight uses the time without fast accumulation, a forward the one with it.
    assert (first.bf16_ms, first.fp8_ms, first.cast_ms) == pytest.approx((4e-3, 1e-3, 1e-3))
    assert first.predicted_gain == pytest.approx(4 / (1 + 1))
    assert (second.fp8_ms, second.cast_ms) == pytest.approx((2e-3, 4e-3))
    assert second.predicted_gain == pytest.approx(6 / (2 + 4))
    assert got.predicted_gain == pytest.approx((4 + 6) / (1 + 1 + 2 + 4))  # 1.25
    assert got.gemm_gain == pytest.approx((4 + 6) / (1 + 2))
    assert got.bandwidth_gb_s == pytest.approx(1.0)
    assert (got.method, got.note, got.hardware) == ("by hand", None, True)
    eager = predict(_two_gemms(), timings, 1e9, "eager", cast_bytes_per_element=33)
    assert eager.predicted_gain == pytest.approx(10 / (1 + 2 + 33 / 5 * (1 + 4)))


def test_a_gemm_kept_in_bf16_costs_its_bf16_time_and_no_cast():
    gemm = Gemm("fc", "grad_weight", 10, 10, 10, fp8=False)
    got = predict([gemm], {(10, 10, 10): GemmTiming(4e-6, 1e-6)}, 1e9, "m")
    assert (got.rows[0].fp8_ms, got.rows[0].cast_ms) == pytest.approx((4e-3, 0.0))
    assert got.predicted_gain == pytest.approx(1.0)
    assert got.rows[0].fp8 is False


def test_untimed_shapes_are_rows_without_times_left_out_of_the_gain():
    timings = {
        (10, 10, 10): GemmTiming(bf16_s=4e-6, fp8_s=1e-6),
        (10, 20, 30): GemmTiming(6e-6, None, error="mat2 not a multiple of 16"),
    }
    got = predict([*_two_gemms(), Gemm("fc_3", "forward", 7, 7, 7)], timings, 1e9, "m")
    assert got.predicted_gain == pytest.approx(4 / 2)
    assert got.rows[1].bf16_ms == pytest.approx(6e-3)
    assert (got.rows[1].fp8_ms, got.rows[1].cast_ms, got.rows[1].predicted_gain) == (
        None,
        None,
        None,
    )
    assert got.rows[1].error == "mat2 not a multiple of 16"
    assert got.rows[2].error == "not timed"
    assert got.note == (
        "2 of 3 GEMMs not timed, left out of the prediction "
        "(first: fc_2's forward GEMM 10×20×30: mat2 not a multiple of 16)"
    )
    nothing = predict(_two_gemms(), {}, 1e9, "m")
    assert (nothing.predicted_gain, nothing.gemm_gain) == (None, None)


def test_a_forward_whose_fast_accumulation_gemm_was_refused_is_not_predicted():
    timing = GemmTiming(4e-6, 1e-6, fast_accum_error="rowwise scales refused")
    gemms = [Gemm("fc", "forward", 10, 10, 10), Gemm("fc", "grad_input", 10, 10, 10)]
    got = predict(gemms, {(10, 10, 10): timing}, 1e9, "m")
    assert got.rows[0].fp8_ms is None
    assert got.rows[0].error == "with fast accumulation: rowwise scales refused"
    assert got.rows[1].predicted_gain == pytest.approx(4 / (1 + 1))
    assert got.predicted_gain == pytest.approx(2.0)
    assert got.note.startswith("1 of 2 GEMMs not timed")


@pytest.mark.parametrize("bandwidth", [0.0, -1.0, math.nan, math.inf])
def test_a_bandwidth_that_is_not_a_positive_number_is_refused(bandwidth):
    with pytest.raises(ValueError, match="bandwidth"):
        predict(_two_gemms(), {}, bandwidth, "m")


def test_without_fp8_hardware_the_shapes_are_listed_with_no_times():
    gemms = training_gemms(PLAN.fp8, 2)
    got = no_hardware(gemms, "no CPU has fp8 matrix units")
    assert [(r.layer, r.role, r.m, r.k, r.n) for r in got.rows] == [
        (g.layer, g.role, g.m, g.k, g.n) for g in gemms
    ]
    assert all(r.bf16_ms is r.fp8_ms is r.cast_ms is r.predicted_gain is None for r in got.rows)
    assert (got.predicted_gain, got.bandwidth_gb_s, got.hardware) == (None, None, False)
    assert got.note == "no fp8 hardware: no CPU has fp8 matrix units"
    assert explain(got, 0.2) == "no fp8 hardware: no CPU has fp8 matrix units"
    assert explain(got, None) == "no fp8 hardware: no CPU has fp8 matrix units"


def test_the_record_takes_the_prediction_as_json():
    got = predict(_two_gemms(), {(10, 10, 10): GemmTiming(4e-6, 1e-6)}, 2e9, "m")
    data = json.loads(json.dumps(dataclasses.asdict(got)))
    assert data["rows"][0]["predicted_gain"] == pytest.approx(4 / 1.5)
    assert data["rows"][1]["error"] == "not timed"
    assert data["bandwidth_gb_s"] == pytest.approx(2.0)


def _row(m: int, k: int, n: int, gain: float | None, layer: str = "fc") -> Fp8GemmRow:
    return Fp8GemmRow(layer, "forward", m, k, n, 1.0, 1.0, 0.1, gain)


def _prediction(
    gain: float | None,
    rows: list[Fp8GemmRow] | None = None,
    gemm_gain: float | None = None,
    note: str | None = None,
) -> Fp8Prediction:
    rows = rows if rows is not None else [_row(8192, 8192, 8192, gain)]
    return Fp8Prediction(rows, gain, 3000.0, "m", note, gemm_gain=gemm_gain)


def test_the_smallest_dimension_is_named_among_the_losing_rows():
    rows = [
        _row(8192, 784, 4096, 0.7, "fc_1"),
        _row(8192, 4096, 4096, 0.95, "fc_2"),
        _row(16, 8192, 8192, 1.4, "big"),  # smaller, but it gains
    ]
    assert (
        smallest_dimension(rows) == "smallest dimension 784, in fc_1's forward GEMM 8192×784×4096"
    )
    assert smallest_dimension([_row(8192, 4096, 4096, 0.9)]) is None
    # No timed rows: the smallest of all.
    assert smallest_dimension([_row(64, 128, 4096, None)]).startswith("smallest dimension 64,")


def test_a_predicted_gain_with_the_step_gaining_too():
    assert (
        explain(_prediction(1.3), 1.12) == "fp8 should gain 1.30× on these layers (measured 1.12×)"
    )
    assert explain(_prediction(1.3), None) == "fp8 should gain 1.30× on these layers"


@pytest.mark.parametrize("measured", [0.9, 1.0])
def test_a_predicted_gain_the_step_did_not_show(measured):
    assert explain(_prediction(1.3), measured) == (
        f"fp8 should gain 1.30× on these layers, but measured {measured:.2f}×: "
        "the rest of the step (casts, unfused ops) ate it"
    )


def test_a_prediction_within_five_per_cent_of_one_breaks_even():
    assert explain(_prediction(1.04), 0.7) == (
        "fp8 breaks even on these layers at best (predicted 1.04×, measured 0.70×)"
    )
    assert explain(_prediction(0.96), None) == (
        "fp8 breaks even on these layers at best (predicted 0.96×)"
    )


def test_a_predicted_loss_on_small_gemms_names_the_smallest_dimension():
    rows = [_row(8192, 512, 1536, 0.8, "blocks.0.qkv")]
    assert explain(_prediction(0.8, rows), 0.35) == (
        "fp8 loses here: its GEMMs are too small (predicted 0.80× on its layers, measured "
        "0.35×; smallest dimension 512, in blocks.0.qkv's forward GEMM 8192×512×1536)"
    )


def test_a_predicted_loss_on_large_gemms_says_whether_gemms_or_casts_lose():
    assert explain(_prediction(0.8, gemm_gain=0.9), None) == (
        "fp8 loses here: its fp8 GEMMs are slower than bf16 at these shapes "
        "(predicted 0.80× on its layers)"
    )
    assert explain(_prediction(0.8, gemm_gain=1.6), 0.5) == (
        "fp8 loses here: its casts cost more than its fp8 GEMMs save "
        "(predicted 0.80× on its layers, measured 0.50×)"
    )


def test_a_step_that_gains_against_a_predicted_loss_says_so():
    assert explain(_prediction(0.8, gemm_gain=0.9), 1.2) == (
        "fp8 loses here: its fp8 GEMMs are slower than bf16 at these shapes "
        "(predicted 0.80× on its layers), but measured 1.20×: more than its GEMMs predict"
    )


@pytest.mark.parametrize("measured", [math.nan, 0.0, -1.0])
def test_a_measured_gain_that_is_no_number_is_left_out(measured):
    assert explain(_prediction(1.3), measured) == "fp8 should gain 1.30× on these layers"


def test_without_a_prediction_or_times():
    assert explain(None, 1.2) is None
    assert explain(None, None) is None
    failed = untimed([Gemm("fc", "forward", 16, 16, 16)], "the fp8 GEMM probe failed: boom")
    assert failed.hardware
    assert (
        explain(failed, 0.4)
        == "no fp8 prediction: the fp8 GEMM probe failed: boom (measured 0.40×)"
    )


def test_a_note_on_untimed_gemms_follows_the_verdict():
    got = explain(_prediction(1.3, note="1 of 6 GEMMs not timed, left out"), 1.2)
    assert got == (
        "fp8 should gain 1.30× on these layers (measured 1.20×); 1 of 6 GEMMs not timed, left out"
    )
