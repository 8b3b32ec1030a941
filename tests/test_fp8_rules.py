"""The float8 policy's rules (mpbench.fp8_rules, mpbench.policies): the layer filter, the FLOP
share, the hardware/emulated label, the device ratings, and the record's fp8 field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mpbench.fp8_rules import (
    EMULATED,
    HARDWARE,
    Fp8Refused,
    LinearLayer,
    device_refusal,
    emulated_gemm,
    execution,
    flop_share,
    plan_layers,
)
from mpbench.policies import (
    FLOAT8,
    FP8_CPU_REASON,
    DeviceTraits,
    Rating,
    auto_policies,
    rate,
    resolve,
)
from mpbench.results import SCHEMA_VERSION, CellRecord, DeviceInfo, Fp8Stats, Status, load_record
from mpbench.results.schema import SchemaError
from mpbench.runner.fallback import next_policy
from mpbench.workloads import get_workload

H100 = DeviceTraits("cuda", "NVIDIA H100 80GB HBM3", compute_capability=(9, 0))
L4 = DeviceTraits("cuda", "NVIDIA L4", compute_capability=(8, 9))
A100 = DeviceTraits("cuda", "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
CPU = DeviceTraits("cpu", "Intel Xeon", cpu_flags=frozenset({"avx512_bf16", "amx_bf16"}))


@pytest.mark.parametrize("name", ["fp8", "FP8", "float8", "mixed_float8"])
def test_the_names_resolve_to_float8(name):
    assert resolve(name) is FLOAT8
    assert FLOAT8.compute_dtype == "bfloat16" and FLOAT8.peak_key == "fp8"


@pytest.mark.parametrize(
    ("device", "rating", "words"),
    [
        (H100, Rating.FAST, "fp8 Tensor Cores (compute capability 9.0 >= 8.9)"),
        (L4, Rating.FAST, "compute capability 8.9 >= 8.9"),
        (A100, Rating.EMULATED, "compute capability 8.0 < 8.9"),
        (CPU, Rating.EMULATED, "no CPU has fp8 matrix units"),
        (DeviceTraits("rocm", "AMD Instinct MI300X"), Rating.EMULATED, "only NVIDIA sm_89+"),
        (DeviceTraits("mps", "Apple M3"), Rating.UNSUPPORTED, "lacks the float8 dtypes"),
        (DeviceTraits("tpu", "TPU v5e"), Rating.UNSUPPORTED, "no fp8 path for TPUs"),
    ],
)
def test_each_device_rates_float8_by_its_hardware(device, rating, words):
    found = rate("fp8", device)
    assert found.rating is rating and words in found.reason


def test_auto_never_picks_float8_and_a_diverged_float8_falls_back_to_bf16():
    assert FLOAT8 not in auto_policies(H100)  # rated fast there, but opt-in
    assert next_policy("float8", H100) == "mixed_bfloat16"


def test_the_multiple_of_16_rule_keeps_the_ten_class_head_in_bfloat16():
    layers = [LinearLayer(f"{i}", a, b) for i, (a, b) in enumerate([(784, 64), (64, 64), (64, 10)])]
    plan = plan_layers(layers, other={"conv": "convolution: not a Linear layer"})
    assert plan.fp8_names == ["0", "1"]
    assert plan.skipped == {
        "conv": "convolution: not a Linear layer",
        "2": "out 10 not a multiple of 16 (fp8 GEMMs on CUDA need it): kept in bfloat16",
    }
    odd = LinearLayer("odd", 100, 10).cuda_refusal()
    assert odd is not None and odd.startswith("in 100 and out 10 not a multiple of 16")


def test_the_flop_share_of_mnist_dense_matches_the_hand_count():
    units = 64
    workload = get_workload("mnist_dense")
    plan = plan_layers(
        [LinearLayer("0", 784, units), LinearLayer("2", units, units), LinearLayer("4", units, 10)]
    )
    share = flop_share(plan, workload.forward_flops(1, units))
    by_hand = (784 * 64 + 64 * 64) / (784 * 64 + 64 * 64 + 64 * 10)
    assert share == pytest.approx(by_hand) and 0.98 < share < 0.99
    assert flop_share(plan, None) is None


def test_the_cnn_runs_only_a_small_share_in_fp8():
    """Only its Dense 2304→128 can go fp8: the convolutions carry most of the FLOPs."""
    workload = get_workload("cifar10_cnn")
    plan = plan_layers([LinearLayer("dense", 64 * 6 * 6, 128), LinearLayer("head", 128, 10)])
    share = flop_share(plan, workload.forward_flops(1))
    conv1 = 2 * 3 * 3 * 3 * 32 * 30 * 30
    conv2 = 2 * 3 * 3 * 32 * 64 * 13 * 13
    dense, head = 2 * 2304 * 128, 2 * 128 * 10
    assert share == pytest.approx(dense / (conv1 + conv2 + dense + head))
    assert share == pytest.approx(0.0704, abs=1e-4)  # 7 %: the convolutions carry the rest


@pytest.mark.parametrize(
    ("kind", "cc", "requested", "mode"),
    [
        ("cuda", (9, 0), "auto", HARDWARE),
        ("cuda", (8, 9), "hardware", HARDWARE),
        ("cuda", (9, 0), "emulated", EMULATED),
        ("cuda", (8, 0), "auto", EMULATED),
        ("cpu", None, "auto", EMULATED),
        ("cpu", None, "emulated", EMULATED),
    ],
)
def test_the_label_is_what_ran(kind, cc, requested, mode):
    assert execution(requested, device_refusal(kind, cc), None).mode == mode


def test_a_path_without_fp8_gemms_is_emulated_even_on_an_h100():
    ran = execution("auto", device_refusal("cuda", (9, 0)), "no XLA: q/dq around a matmul")
    assert ran.mode == EMULATED and ran.why == "no XLA: q/dq around a matmul"


@pytest.mark.parametrize(
    ("kind", "cc", "path", "words"),
    [
        ("cpu", None, None, "no CPU has fp8 matrix units"),
        ("cuda", (8, 0), None, "compute capability 8.0 < 8.9"),
        ("cuda", (9, 0), "rowwise scales refused", "rowwise scales refused"),
    ],
)
def test_asking_for_hardware_where_there_is_none_refuses(kind, cc, path, words):
    with pytest.raises(Fp8Refused) as refused:
        execution("hardware", device_refusal(kind, cc), path)
    assert str(refused.value).startswith("hardware fp8 was asked for (--fp8-mode hardware), but")
    assert words in str(refused.value)


def test_the_emulated_gemm_is_worded_from_the_dtypes_that_ran():
    """One wording for both backends (issue 33 item 6), made of what each saw run: torchao's
    float32 GEMM cast to the autocast dtype, Keras' matmul in its compute dtype."""
    torch = emulated_gemm("torchao emulate=True", ["float32"], "bfloat16")
    assert torch == (
        "emulated (torchao emulate=True): fp8-rounded operands multiplied in float32, "
        "the product cast to bfloat16"
    )
    keras = emulated_gemm("Keras float8 quantise-dequantise", ["bfloat16"])
    assert keras.endswith("multiplied in bfloat16")
    assert "cast" not in emulated_gemm("x", ["bfloat16"], "bfloat16")  # nothing to cast
    assert emulated_gemm("x", ["float32", "bfloat16", "float32"]).endswith("bfloat16/float32")
    assert emulated_gemm("x", []).endswith("multiplied in a dtype that was not traced")


def test_the_cpu_reason_names_no_emulation_dtype():
    """Why a CPU cell is emulated, in the record and in detect's rating: the same words, and
    no dtype (torchao emulates in float32, Keras in bfloat16: the record's gemm says which)."""
    assert device_refusal("cpu", None) == FP8_CPU_REASON
    reason = rate("fp8", CPU).reason
    assert reason.startswith(f"rule: {FP8_CPU_REASON}")
    assert "in float32" not in reason and "bfloat16" not in reason


def _fp8_record(**fp8: object) -> dict:
    stats = Fp8Stats(
        mode="emulated",
        why="no CPU has fp8 matrix units",
        requested="auto",
        backend="torchao 0.18.0 float8 training",
        gemm="emulated",
        recipe="tensorwise",
        scaling="dynamic, per tensor",
        formats={"input": "float8_e4m3fn", "grad_output": "float8_e5m2"},
        base_policy="mixed_bfloat16",
        layers_fp8=["0", "2"],
        skipped_layers={"4": "out 10 not a multiple of 16"},
        flop_share_fp8=0.985,
    )
    record = CellRecord(
        run_id="r",
        cell_id="torch/mnist_dense/float8/r0",
        timestamp="2026-11-24T01:00:00+00:00",
        framework="torch",
        framework_version="torch 2.13.0+cpu",
        workload="mnist_dense",
        policy="float8",
        repeat=0,
        device=DeviceInfo("cpu", "Intel Xeon"),
        status=Status.SKIPPED,
        fp8=dataclasses.replace(stats, **fp8),
    )
    return json.loads(json.dumps(record.to_dict()))


def test_a_version_9_record_keeps_its_fp8_through_a_round_trip():
    loaded = load_record(_fp8_record())
    assert SCHEMA_VERSION >= 9
    assert loaded.fp8.mode == "emulated" and loaded.fp8.layers_fp8 == ["0", "2"]
    assert loaded.fp8.flop_share_fp8 == 0.985


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"mode": "fast"}, "fp8.mode must be hardware or emulated"),
        ({"flop_share_fp8": 1.5}, "fp8.flop_share_fp8"),
    ],
)
def test_a_bad_fp8_field_is_refused(change, words):
    with pytest.raises(SchemaError) as err:
        load_record(_fp8_record(**change))
    assert words in str(err.value)


def test_an_older_record_may_not_hold_fp8():
    raw = _fp8_record()
    raw["schema_version"] = 8
    with pytest.raises(SchemaError) as err:
        load_record(raw)
    assert "fp8 is a field of schema version 9" in str(err.value)


def test_a_cell_in_which_no_layer_went_fp8_covers_0_percent_whatever_its_flops():
    """Issue 55: a Keras fp8 cell with no fp8 layer recorded its share as unknown (Keras zoo
    models have no FLOP counter) where it is 0: the cell trained as its bf16 base."""
    from mpbench.compare.summary.cells import _summarize_fp8
    from mpbench.fp8_rules import NO_FP8_LAYER, Execution, LayerPlan, record

    run = Execution(EMULATED, FP8_CPU_REASON)
    plan = LayerPlan(skipped={"dense": "out 10 not a multiple of 16"})
    for flops, note in ((None, "no FLOP counter in Keras"), (1e6, None)):
        fp8 = record(
            run, "auto", plan, [], flops, note, backend="keras", gemm="emulated",
            recipe="tensorwise", scaling="delayed", formats={},
        )  # fmt: skip
        assert fp8["flop_share_fp8"] == 0.0 and fp8["flop_share_note"] == NO_FP8_LAYER
    raw = _fp8_record(layers_fp8=[], flop_share_fp8=0.0, flop_share_note=NO_FP8_LAYER)
    summary = _summarize_fp8([load_record(raw)])
    assert summary.coverage() == (
        "fp8 covers 0 % of the step's matmul FLOPs: no layer ran in fp8, so the cell trained "
        "as its bf16 base"
    )
