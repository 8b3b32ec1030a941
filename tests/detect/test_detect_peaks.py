"""The datasheet peak table: exact NVML names, dense figures, None for anything unknown."""

from __future__ import annotations

import pytest

from mpbench.detect.peaks import _TABLE, PEAK_KEYS, lookup, peak_tflops


@pytest.mark.parametrize(
    ("name", "key", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.5),
        ("NVIDIA H100 80GB HBM3", "fp8", 1979.0),
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA H100 NVL", "tf32", 417.5),
        ("NVIDIA H200", "fp8", 1979.0),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156.0),
        ("NVIDIA A100-SXM4-40GB", "fp32", 19.5),
        ("NVIDIA A100-PCIE-40GB", "fp16", 312.0),
        ("NVIDIA A100 80GB PCIe", "bf16", 312.0),
        ("Tesla V100-SXM2-16GB", "fp16", 125.0),
        ("Tesla V100-PCIE-32GB", "fp32", 14.0),
        ("Tesla V100S-PCIE-32GB", "fp16", 130.0),
        ("Tesla T4", "fp32", 8.1),
        ("Tesla T4", "fp16", 65.0),
        ("NVIDIA A10", "tf32", 62.5),
        ("NVIDIA L4", "fp16", 121.0),
        ("NVIDIA L40S", "bf16", 362.05),
        ("NVIDIA GeForce RTX 3090", "fp16", 71.0),
        ("NVIDIA GeForce RTX 4090", "fp8", 330.3),
        ("Tesla P100-PCIE-16GB", "fp32", 9.3),
        ("NVIDIA B200", "bf16", 2250.0),
        ("NVIDIA B200", "fp8", 4500.0),
        ("NVIDIA B200", "tf32", 1100.0),
        ("NVIDIA B200", "fp32", 75.0),
        ("NVIDIA H800", "bf16", 989.5),
        ("NVIDIA H800 80GB HBM3", "fp8", 1979.0),
        ("NVIDIA H800 PCIe", "fp16", 756.5),
        ("NVIDIA H800 PCIe", "fp32", 51.0),
        ("NVIDIA A800-SXM4-80GB", "bf16", 312.0),
        ("NVIDIA A800 80GB PCIe", "tf32", 156.0),
        ("NVIDIA A800-PCIE-40GB", "fp32", 19.5),
        ("NVIDIA RTX A6000", "fp16", 154.8),
        ("NVIDIA RTX A6000", "tf32", 77.4),
        ("NVIDIA RTX A6000", "fp32", 38.7),
    ],
)
def test_known_parts(name, key, tflops):
    assert peak_tflops(name, key) == tflops


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A10G",  # AWS part, no public datasheet figures; not an A10
        "NVIDIA A10-24Q",  # a vGPU slice
        "NVIDIA L40S-48Q",
        "NVIDIA GeForce RTX 3090 Ti",  # not a 3090
        "NVIDIA GB200",  # the 1,200 W Grace-Blackwell part, not an HGX B200
        "NVIDIA RTX 6000 Ada Generation",  # not an RTX A6000
        # MIG slices: a share of the GPU, no datasheet figure
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "NVIDIA H800 MIG 7g.80gb",
        "AMD Instinct MI300X",
        "",
    ],
)
def test_unknown_parts_give_none(name):
    assert lookup(name) is None
    assert all(peak_tflops(name, key) is None for key in PEAK_KEYS)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Tesla T4", "tf32"),  # Turing: no TF32, bf16 or fp8
        ("Tesla T4", "bf16"),
        ("Tesla V100-SXM2-16GB", "bf16"),
        ("NVIDIA A100-SXM4-80GB", "fp8"),  # Ampere: no fp8
        ("NVIDIA A100-SXM4-80GB", "int8"),  # not a key
        ("NVIDIA A100-SXM4-80GB", "FP16"),  # keys are lower-case
        ("NVIDIA A100-SXM4-80GB", "source"),  # an attribute, not a key
    ],
)
def test_missing_columns_and_unknown_keys_give_none(name, key):
    assert peak_tflops(name, key) is None


def test_names_match_whatever_the_spelling_details():
    assert peak_tflops("  nvidia   h100  pcie ", "fp32") == 51.0
    assert peak_tflops(b"Tesla T4", "fp16") == 65.0  # old pynvml returned bytes


def test_table_holds_dense_figures():
    """Sparse figures slipped in would break these datasheet ratios."""
    for pattern, peaks in _TABLE:
        if peaks.bf16 is not None:
            assert peaks.bf16 == peaks.fp16, pattern
        if peaks.tf32 is not None:
            # TF32 Tensor Cores run at half the fp16 rate, fp8 at twice, on Ampere, Ada,
            # Hopper and Blackwell. The datasheets' own rounding is a few % off (L40S: 183 vs
            # 362.05 / 2, 733 vs 2 x 362.05; B200: TF32 2.2 PF vs 4.5 / 2); a sparse figure
            # would be 100 % off.
            assert peaks.tf32 == pytest.approx(peaks.fp16 / 2, rel=0.025), pattern
        if peaks.fp8 is not None:
            assert peaks.fp8 == pytest.approx(peaks.fp16 * 2, rel=0.02), pattern
        if peaks.fp16 is not None:
            assert peaks.fp16 >= peaks.fp32, pattern
        assert peaks.source.startswith("NVIDIA") or peaks.source.startswith("Tesla"), pattern
