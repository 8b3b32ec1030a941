from pathlib import Path

import pytest

from mpbench.detect.cpu import read_cpu
from mpbench.errors import InvalidInput
from mpbench.policies import (
    FLOAT32,
    FRAMEWORKS,
    MEASURED_FAST_SPEEDUP,
    POLICIES,
    DeviceTraits,
    MeasuredStep,
    Rating,
    auto_policies,
    rate,
    rate_all,
    recommend,
    resolve,
)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("fp32", "float32"),
        ("FLOAT32", "float32"),
        ("tf32", "tf32"),
        ("fp16", "mixed_float16"),
        ("amp_fp16", "mixed_float16"),
        ("bf16", "mixed_bfloat16"),
        ("amp_bf16", "mixed_bfloat16"),
        (" mixed_bfloat16 ", "mixed_bfloat16"),
    ],
)
def test_aliases_resolve_to_canonical_names(name, canonical):
    assert resolve(name).name == canonical


def test_unknown_policy_names_the_valid_choices():
    with pytest.raises(InvalidInput) as err:
        resolve("fp4")
    message = str(err.value)
    assert "'fp4'" in message
    for choice in ("float32", "tf32", "mixed_float16", "mixed_bfloat16", "bf16", "auto"):
        assert choice in message


def gpu(cc):
    return DeviceTraits("cuda", f"GPU {cc}", compute_capability=cc)


def cpu(*flags):
    return DeviceTraits("cpu", "CPU", cpu_flags=frozenset(flags))


def ratings(device):
    return {
        p: rate(p, device).rating for p in ("float32", "tf32", "mixed_float16", "mixed_bfloat16")
    }


def test_nvidia_compute_capability_rules():
    assert ratings(gpu((6, 0))) == {
        "float32": Rating.FAST,
        "tf32": Rating.UNSUPPORTED,
        "mixed_float16": Rating.SLOW,
        "mixed_bfloat16": Rating.SLOW,
    }
    t4 = ratings(gpu((7, 5)))
    assert t4["mixed_float16"] is Rating.FAST and t4["tf32"] is Rating.UNSUPPORTED
    assert t4["mixed_bfloat16"] is Rating.SLOW
    a100 = ratings(gpu((8, 0)))
    assert set(a100.values()) == {Rating.FAST}


def test_recommendations_match_the_known_parts():
    assert recommend(gpu((8, 0))).policy == "mixed_bfloat16"  # A100
    assert recommend(gpu((7, 5))).policy == "mixed_float16"  # T4
    assert recommend(gpu((6, 0))).policy == "float32"  # P100: mixed only saves memory
    assert recommend(cpu("avx512_bf16", "avx512f")).policy == "mixed_bfloat16"
    assert recommend(cpu("avx2")).policy == "float32"


def test_cpu_rules():
    epyc = ratings(cpu("avx512_bf16", "avx512f", "avx2"))
    assert epyc == {
        "float32": Rating.FAST,
        "tf32": Rating.UNSUPPORTED,
        "mixed_float16": Rating.SLOW,
        "mixed_bfloat16": Rating.FAST,
    }
    sapphire = ratings(cpu("amx_bf16", "amx_fp16", "amx_tile"))
    assert sapphire["mixed_bfloat16"] is Rating.FAST and sapphire["mixed_float16"] is Rating.FAST
    old = ratings(cpu("avx2"))
    assert old["mixed_bfloat16"] is Rating.SLOW and old["mixed_float16"] is Rating.SLOW
    graviton3 = ratings(cpu("asimd", "bf16", "i8mm", "sve"))
    assert graviton3["mixed_bfloat16"] is Rating.FAST
    unknown = DeviceTraits("cpu", "CPU", cpu_flags=None)
    assert rate("bf16", unknown).rating is Rating.SLOW
    assert "unknown" in rate("bf16", unknown).reason


def test_tpu_prefers_bfloat16():
    tpu = DeviceTraits("tpu", "TPU v4")
    assert ratings(tpu)["mixed_bfloat16"] is Rating.FAST
    assert ratings(tpu)["mixed_float16"] is Rating.UNSUPPORTED
    assert recommend(tpu).policy == "mixed_bfloat16"


def test_auto_is_float32_plus_the_fast_policies():
    assert [p.name for p in auto_policies(cpu("avx512_bf16"))] == ["float32", "mixed_bfloat16"]
    assert [p.name for p in auto_policies(gpu((7, 0)))] == ["float32", "mixed_float16"]
    assert [p.name for p in auto_policies(gpu((9, 0)))] == [
        "float32",
        "tf32",
        "mixed_float16",
        "mixed_bfloat16",
    ]
    assert [p.name for p in auto_policies(cpu())] == ["float32"]


# --- ratings per framework (issue 54) ----------------------------------------------------

CPUINFO = Path(__file__).resolve().parent / "fixtures" / "cpuinfo"
# A recorded Sapphire Rapids: amx_bf16, avx512_bf16 and avx512_fp16, no amx_fp16.
SPR_FLAGS = read_cpu(CPUINFO / "intel_xeon_8481c_sapphire_rapids.txt").present_flags()
SPR = DeviceTraits("cpu", "Xeon 8481C", cpu_flags=SPR_FLAGS)
# Granite Rapids: the same, plus AMX-FP16 tiles.
GNR = DeviceTraits("cpu", "Xeon 6 (Granite Rapids)", cpu_flags=SPR_FLAGS | {"amx_fp16"})
AVX2 = cpu("avx2")
WHEN = "2026-11-29T10:00:00+00:00"


def in_each(device, policy, measured=()):
    return {f: rate(policy, device, f, measured) for f in FRAMEWORKS}


def test_fp16_on_avx512_fp16_without_amx_fp16_is_slow_in_both_frameworks():
    assert {"avx512_fp16", "amx_bf16"} <= SPR_FLAGS and "amx_fp16" not in SPR_FLAGS
    fp16 = in_each(SPR, "fp16")
    assert {f: r.rating for f, r in fp16.items()} == {f: Rating.SLOW for f in FRAMEWORKS}
    assert fp16["torch"].reason.startswith("rule: avx512_fp16 without amx_fp16: ")
    assert fp16["tensorflow"].reason.startswith("rule: TensorFlow runs fp16 far slower")
    assert all(r.source == "rule" and r.framework == f for f, r in fp16.items())
    bf16 = in_each(SPR, "bf16")
    assert all(r.rating is Rating.FAST and "amx_bf16" in r.reason for r in bf16.values())
    # The device-level view: slow, each framework's reason named.
    device = rate("fp16", SPR)
    assert device.rating is Rating.SLOW and device.framework is None
    assert device.reason.startswith("torch: slow (rule: avx512_fp16 without amx_fp16")
    assert "; tensorflow: slow (rule: TensorFlow runs fp16" in device.reason
    for framework in FRAMEWORKS:
        assert [p.name for p in auto_policies(SPR, framework)] == ["float32", "mixed_bfloat16"]
    advice = recommend(SPR)
    assert advice.policy == "mixed_bfloat16" and "equally good" not in advice.reason


def test_amx_fp16_makes_fp16_fast_in_torch_only():
    fp16 = in_each(GNR, "fp16")
    assert fp16["torch"].rating is Rating.FAST and "amx_fp16" in fp16["torch"].reason
    assert fp16["tensorflow"].rating is Rating.SLOW
    assert rate("fp16", GNR).rating is Rating.FAST  # fast in at least one framework
    assert [p.name for p in auto_policies(GNR, "torch")] == [
        "float32",
        "mixed_float16",
        "mixed_bfloat16",
    ]
    assert [p.name for p in auto_policies(GNR, "tensorflow")] == ["float32", "mixed_bfloat16"]
    advice = recommend(GNR)
    assert advice.policy == "mixed_bfloat16"
    assert (
        "equally good" not in advice.reason and "fp16 is fast too, in torch only" in advice.reason
    )
    assert "equally good" in recommend(GNR, ["torch"]).reason  # a machine with torch alone


def test_an_avx2_cpu_rates_both_16_bit_policies_slow_in_both_frameworks():
    for policy in ("fp16", "bf16"):
        assert {r.rating for r in in_each(AVX2, policy).values()} == {Rating.SLOW}
    assert all(auto_policies(AVX2, f) == [FLOAT32] for f in FRAMEWORKS)
    assert recommend(AVX2).policy == "float32"


def test_gpu_rules_are_the_same_in_both_frameworks():
    for policy in ("fp16", "bf16", "tf32"):
        ratings = in_each(gpu((8, 0)), policy)
        assert len({(r.rating, r.reason) for r in ratings.values()}) == 1


def test_a_measured_step_beats_the_rule_and_says_so():
    fast = MeasuredStep("tensorflow", "mixed_float16", 1.45, WHEN)
    rating = rate("fp16", SPR, "tensorflow", [fast])
    assert rating.rating is Rating.FAST and rating.source == "measured"
    assert rating.reason == (
        "measured 1.45× faster than float32 here (cached 2026-11-29), where the rule says slow"
    )
    assert rate("fp16", SPR, "torch", [fast]).source == "rule"  # another framework's step
    assert [p.name for p in auto_policies(SPR, "tensorflow", [fast])] == [
        "float32",
        "mixed_float16",
        "mixed_bfloat16",
    ]
    slow = MeasuredStep("torch", "mixed_bfloat16", 0.5, WHEN)
    rating = rate("bf16", SPR, "torch", [slow])
    assert rating.rating is Rating.SLOW
    assert rating.reason.endswith("(cached 2026-11-29), where the rule says fast")
    assert auto_policies(SPR, "torch", [slow]) == [FLOAT32]


def test_the_measured_threshold_is_named_and_a_stopped_step_is_a_bound():
    def rated(speedup, stopped=False):
        step = MeasuredStep("torch", "mixed_bfloat16", speedup, WHEN, stopped)
        return rate("bf16", AVX2, "torch", [step])

    assert MEASURED_FAST_SPEEDUP == 1.10
    assert rated(1.10).rating is Rating.FAST
    below = rated(1.05)
    assert below.rating is Rating.SLOW and "under the 1.10× that rates it fast" in below.reason
    assert rated(1 / 227, stopped=True).reason.startswith("measured ≥ 227× slower than float32")


def test_a_measurement_never_rates_the_baseline_an_unsupported_policy_or_float8():
    steps = [MeasuredStep("torch", name, 2.0, WHEN) for name in ("float32", "tf32", "float8")]
    assert rate("fp32", SPR, "torch", steps).source == "rule"
    assert rate("tf32", SPR, "torch", steps).rating is Rating.UNSUPPORTED
    assert rate("fp8", SPR, "torch", steps).rating is Rating.EMULATED


def test_callers_without_a_framework_keep_working():
    rating = rate("bf16", cpu("avx512_bf16"))
    assert rating.rating is Rating.FAST and rating.framework is None
    assert rating.reason == "rule: native bf16 matmul (avx512_bf16)"
    assert [r.policy for r in rate_all(SPR)] == list(POLICIES)
