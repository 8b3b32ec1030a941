"""Peak dense TFLOP/s of known NVIDIA parts, from the vendors' datasheets.

MFU (achieved / peak) is only honest against the right column, so every figure is:
- dense: datasheets quote Tensor Core rates "with sparsity" (2:4 structured); those are
  halved here, because training never runs sparse;
- fp32: the non-Tensor-Core CUDA-core rate (what a float32 run with TF32 off can reach);
- tf32 / fp16 / bf16 / fp8: Tensor Core rates with FP32 accumulate, which is what autocast
  and the frameworks' GEMMs use (GeForce cards run FP16-accumulate at twice that; not used).
  fp8 GEMMs (torch._scaled_mm, cuBLASLt) always accumulate in FP32, so the fp8 column is the
  FP32-accumulate figure too; it exists only for compute capability >= 8.9 (Ada, Hopper,
  Blackwell), None on every older part.

A part that is not in the table, or a dtype the part has no Tensor Core path for, gives None:
never a guess from a similar-looking name (an A10G is not an A10; an L4 is not an L40S). A MIG
slice ("NVIDIA A100-SXM4-80GB MIG 3g.40gb") matches no row either: it has a share of the SMs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mpbench.policies import POLICIES

# The columns: one per policy's peak key (Policy.peak_key), in the policies' order (fp32, tf32,
# fp16, bf16, fp8). detect's measurement times the same keys (detect/measure.py).
PEAK_KEYS = tuple(dict.fromkeys(p.peak_key for p in POLICIES.values()))


@dataclass(frozen=True)
class PartPeaks:
    part: str  # the product, as the datasheet names it
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None
    fp8: float | None
    source: str  # the vendor document the figures come from

    def get(self, key: str) -> float | None:
        return getattr(self, key) if key in PEAK_KEYS else None


# (pattern on the normalised NVML name, figures). Patterns are matched in full, so a longer
# name that merely starts like a known part ("a10g", "l40s" vs "l4") never matches.
_TABLE: tuple[tuple[str, PartPeaks], ...] = (
    # NVIDIA Tesla P100 datasheet: FP32 10.6 / FP16 21.2 (SXM2), 9.3 / 18.7 (PCIe). No Tensor
    # Cores; fp16 is the native half-precision rate.
    (
        r"p100-sxm2-16gb",
        PartPeaks("P100 SXM2", 10.6, None, 21.2, None, None, "Tesla P100 datasheet"),
    ),
    (
        r"p100-pcie-(12|16)gb",
        PartPeaks("P100 PCIe", 9.3, None, 18.7, None, None, "Tesla P100 datasheet"),
    ),
    # NVIDIA V100 datasheet: SXM2 FP32 15.7, Tensor 125; PCIe 14 / 112; V100S PCIe 16.4 / 130.
    # Volta has fp16 Tensor Cores only (no TF32, bf16 or fp8); figures are dense already.
    (
        r"v100-sxm2-(16|32)gb",
        PartPeaks("V100 SXM2", 15.7, None, 125.0, None, None, "NVIDIA V100 datasheet"),
    ),
    (
        r"v100-pcie-(16|32)gb",
        PartPeaks("V100 PCIe", 14.0, None, 112.0, None, None, "NVIDIA V100 datasheet"),
    ),
    (
        r"v100s-pcie-32gb",
        PartPeaks("V100S PCIe", 16.4, None, 130.0, None, None, "NVIDIA V100 datasheet"),
    ),
    # NVIDIA T4 datasheet: FP32 8.1, mixed FP16/FP32 65 (dense).
    (r"t4", PartPeaks("T4", 8.1, None, 65.0, None, None, "NVIDIA T4 datasheet")),
    # NVIDIA A100 datasheet (same figures for SXM4 and PCIe, 40 and 80 GB): FP32 19.5,
    # TF32 156 (312 sparse), BF16 / FP16 312 (624 sparse). Ampere has no fp8.
    (
        r"a100-sxm4?-(40|80)gb",
        PartPeaks("A100 SXM4", 19.5, 156.0, 312.0, 312.0, None, "NVIDIA A100 datasheet"),
    ),
    (
        r"a100-pcie-(40|80)gb|a100 (40|80)gb pcie",
        PartPeaks("A100 PCIe", 19.5, 156.0, 312.0, 312.0, None, "NVIDIA A100 datasheet"),
    ),
    # NVIDIA A800 40GB/80GB PCIe and A800 SXM4 80GB datasheets (the A100's China-market
    # variant, NVLink cut to 400 GB/s): FP32 19.5, TF32 156 (312 sparse), BF16 / FP16 312
    # (624 sparse), as the A100. NVML: "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe".
    (
        r"a800-sxm4?-(40|80)gb",
        PartPeaks("A800 SXM4", 19.5, 156.0, 312.0, 312.0, None, "NVIDIA A800 datasheet"),
    ),
    (
        r"a800-pcie-(40|80)gb|a800 (40|80)gb pcie",
        PartPeaks("A800 PCIe", 19.5, 156.0, 312.0, 312.0, None, "NVIDIA A800 datasheet"),
    ),
    # NVIDIA A10 datasheet: FP32 31.2, TF32 62.5 (125 sparse), BF16 / FP16 125 (250 sparse).
    # No row for the A10G (AWS G5): NVIDIA publishes no datasheet for it and third-party
    # figures disagree with the A10's; `mpbench detect --measure` gives its reachable peak.
    (r"a10", PartPeaks("A10", 31.2, 62.5, 125.0, 125.0, None, "NVIDIA A10 datasheet")),
    # NVIDIA A30 datasheet: FP32 10.3, TF32 82 (165 sparse), BF16 / FP16 165 (330 sparse).
    (r"a30", PartPeaks("A30", 10.3, 82.0, 165.0, 165.0, None, "NVIDIA A30 datasheet")),
    # NVIDIA A40 datasheet: FP32 37.4, TF32 74.8 (149.6 sparse), BF16 / FP16 149.7 (299.4).
    (r"a40", PartPeaks("A40", 37.4, 74.8, 149.7, 149.7, None, "NVIDIA A40 datasheet")),
    # NVIDIA Ampere GA102 architecture whitepaper, appendix A (GeForce RTX 3090): FP32 35.6,
    # TF32 35.6 (71 sparse), FP16 / BF16 with FP32 accumulate 71 (142 sparse).
    (
        r"geforce rtx 3090",
        PartPeaks("GeForce RTX 3090", 35.6, 35.6, 71.0, 71.0, None, "NVIDIA GA102 whitepaper"),
    ),
    # NVIDIA RTX A6000 datasheet (FP32 38.7, Tensor 309.7 sparse) and the GA102 whitepaper's
    # RTX A6000 column: TF32 77.4 (154.8 sparse), FP16 / BF16 with FP32 accumulate 154.8
    # (309.7 sparse). Unlike GeForce, the professional card runs FP32 accumulate at full rate.
    (
        r"rtx a6000",
        PartPeaks("RTX A6000", 38.7, 77.4, 154.8, 154.8, None, "NVIDIA RTX A6000 datasheet"),
    ),
    # NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): FP32 82.6, TF32 82.6
    # (165.2 sparse), FP16 / BF16 with FP32 accumulate 165.2 (330.4 sparse), FP8 with FP32
    # accumulate 330.3 (660.6 sparse). GeForce halves the FP32-accumulate rate: the
    # whitepaper's FP8 with FP16 accumulate is 660.6 (1,321.2 sparse), a rate no fp8 GEMM of
    # torch's reaches (cuBLASLt's fp8 GEMMs accumulate in FP32), so this row takes 330.3.
    (
        r"geforce rtx 4090",
        PartPeaks("GeForce RTX 4090", 82.6, 82.6, 165.2, 165.2, 330.3, "NVIDIA Ada whitepaper"),
    ),
    # NVIDIA L4 datasheet: FP32 30.3, TF32 120 / BF16 242 / FP16 242 / FP8 485, all sparse.
    (r"l4", PartPeaks("L4", 30.3, 60.0, 121.0, 121.0, 242.5, "NVIDIA L4 datasheet")),
    # NVIDIA L40 datasheet: FP32 90.5, TF32 90.5 (181 sparse), BF16 / FP16 181.05 (362.1),
    # FP8 362 (724 sparse).
    (r"l40", PartPeaks("L40", 90.5, 90.5, 181.05, 181.05, 362.0, "NVIDIA L40 datasheet")),
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366 sparse), BF16 / FP16 362.05 (733),
    # FP8 733 (1,466 sparse).
    (r"l40s", PartPeaks("L40S", 91.6, 183.0, 362.05, 362.05, 733.0, "NVIDIA L40S datasheet")),
    # NVIDIA H100 datasheet, SXM5 column (NVML calls it "H100 80GB HBM3"): FP32 67,
    # TF32 989 / BF16 1,979 / FP16 1,979 / FP8 3,958, all sparse.
    (
        r"h100 80gb hbm3|h100-sxm5-80gb|h100 sxm5 80gb",
        PartPeaks("H100 SXM", 67.0, 494.5, 989.5, 989.5, 1979.0, "NVIDIA H100 datasheet"),
    ),
    # NVIDIA H100 datasheet, PCIe column: FP32 51, TF32 756 / BF16 1,513 / FP16 1,513 /
    # FP8 3,026, all sparse.
    (
        r"h100 pcie",
        PartPeaks("H100 PCIe", 51.0, 378.0, 756.5, 756.5, 1513.0, "NVIDIA H100 datasheet"),
    ),
    # NVIDIA H100 datasheet, H100 NVL column (per GPU): FP32 60, TF32 835 / BF16 1,671 /
    # FP16 1,671 / FP8 3,341, all sparse.
    (
        r"h100 nvl",
        PartPeaks("H100 NVL", 60.0, 417.5, 835.5, 835.5, 1670.5, "NVIDIA H100 datasheet"),
    ),
    # NVIDIA H800 datasheet (the H100's China-market variant: NVLink 400 GB/s, FP64 cut), SXM
    # column (NVML: "NVIDIA H800"): FP32 67, TF32 989 / BF16 1,979 / FP16 1,979 / FP8 3,958,
    # all sparse; PCIe column: FP32 51, TF32 756 / BF16 1,513 / FP16 1,513 / FP8 3,026, sparse.
    (
        r"h800( 80gb hbm3)?",
        PartPeaks("H800 SXM", 67.0, 494.5, 989.5, 989.5, 1979.0, "NVIDIA H800 datasheet"),
    ),
    (
        r"h800 pcie",
        PartPeaks("H800 PCIe", 51.0, 378.0, 756.5, 756.5, 1513.0, "NVIDIA H800 datasheet"),
    ),
    # NVIDIA HGX B200 specifications, "individual Blackwell GPU" column (NVML: "NVIDIA B200"):
    # FP32 75, TF32 2.2 PF / FP16-BF16 4.5 PF / FP8 9 PF, Tensor Core figures with sparsity.
    # (GB200's B200 runs at 1,200 W with higher figures; it reports another name.)
    (
        r"b200",
        PartPeaks("B200 (HGX)", 75.0, 1100.0, 2250.0, 2250.0, 4500.0, "NVIDIA HGX B200 datasheet"),
    ),
    # NVIDIA H200 datasheet, H200 SXM column: same Tensor Core rates as H100 SXM.
    (r"h200", PartPeaks("H200 SXM", 67.0, 494.5, 989.5, 989.5, 1979.0, "NVIDIA H200 datasheet")),
    # NVIDIA H200 datasheet, H200 NVL column: same Tensor Core rates as H100 NVL (FP8 3,341
    # sparse, 1,670.5 dense; BF16 1,671 sparse). Not re-checked against the sheet since the
    # row was added; H200 SXM's 3,958 / 1,979 was (third-party copies of the datasheet).
    (
        r"h200 nvl",
        PartPeaks("H200 NVL", 60.0, 417.5, 835.5, 835.5, 1670.5, "NVIDIA H200 datasheet"),
    ),
    # NVIDIA GH200 Grace Hopper Superchip datasheet (GPU side): as H100 SXM.
    (
        r"gh200( .*)?",
        PartPeaks("GH200", 67.0, 494.5, 989.5, 989.5, 1979.0, "NVIDIA GH200 datasheet"),
    ),
)

_COMPILED = tuple((re.compile(pattern), peaks) for pattern, peaks in _TABLE)
_PREFIXES = ("nvidia ", "tesla ")


def normalise_name(gpu_name: str | bytes) -> str:
    """NVML's name, lower-case, single-spaced, without the "NVIDIA"/"Tesla" brand prefix."""
    if isinstance(gpu_name, bytes):
        gpu_name = gpu_name.decode(errors="replace")
    name = " ".join(gpu_name.lower().split())
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            if name.startswith(prefix):
                name, stripped = name[len(prefix) :], True
    return name


def lookup(gpu_name: str | bytes) -> PartPeaks | None:
    """The datasheet row for this exact part, or None when the part is not known."""
    name = normalise_name(gpu_name)
    for pattern, peaks in _COMPILED:
        if pattern.fullmatch(name):
            return peaks
    return None


def peak_tflops(gpu_name: str, key: str) -> float | None:
    """Dense peak TFLOP/s of `gpu_name` (as NVML reports it) for fp32/tf32/fp16/bf16/fp8."""
    peaks = lookup(gpu_name)
    return None if peaks is None else peaks.get(key)


def all_peaks(gpu_name: str) -> dict[str, float | None]:
    """Every column for one part; all None for an unknown part."""
    return {key: peak_tflops(gpu_name, key) for key in PEAK_KEYS}
