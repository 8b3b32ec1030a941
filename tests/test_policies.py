import pytest

from mpbench.errors import InvalidInput
from mpbench.policies import (
    DeviceTraits,
    Rating,
    auto_policies,
    rate,
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
