"""float8 in `mpbench detect`: its ratings (incl. "emulated") in the table and the JSON, the fp8
column and peaks under one rule (compute capability >= 8.9), and `--measure` timing an fp8
GEMM (torch._scaled_mm) only where the hardware has one.

The CUDA side runs against a fake torch (FakeCudaTorch below) that checks what the real CUDA
kernel checks; this process never imports torch (the signature check runs in a child).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from frameworks import needs_torch
from rich.console import Console

from mpbench import policies
from mpbench.detect import collect, measure
from mpbench.detect import gpu as gpu_module
from mpbench.detect.gpu import GpuInfo
from mpbench.detect.measure import cache_key, cached_peak, cached_peaks, write_cache
from mpbench.detect.measure_child import (
    FP8_CPU_REASON,
    FP8_OP,
    _measure_dtype,
    fp8_skip_reason,
    gemm_flops,
    tflops,
)
from mpbench.detect.peaks import _TABLE, lookup, peak_tflops
from mpbench.detect.render import _RATING_STYLE, EMULATED_CAPTION, print_report, report_json
from mpbench.policies import FP8_MIN_CC, DeviceTraits, Rating

# --- peaks: dense fp8 figures, only on sm_89+ parts ---

# Compute capability of every part in the peak table (NVIDIA's CUDA GPUs list). A new row
# must be added here too, so the fp8 column is checked against the rule for it.
PART_CC = {
    "P100 SXM2": (6, 0),
    "P100 PCIe": (6, 0),
    "V100 SXM2": (7, 0),
    "V100 PCIe": (7, 0),
    "V100S PCIe": (7, 0),
    "T4": (7, 5),
    "A100 SXM4": (8, 0),
    "A100 PCIe": (8, 0),
    "A800 SXM4": (8, 0),
    "A800 PCIe": (8, 0),
    "A10": (8, 6),
    "A30": (8, 0),
    "A40": (8, 6),
    "GeForce RTX 3090": (8, 6),
    "RTX A6000": (8, 6),
    "GeForce RTX 4090": (8, 9),
    "L4": (8, 9),
    "L40": (8, 9),
    "L40S": (8, 9),
    "H100 SXM": (9, 0),
    "H100 PCIe": (9, 0),
    "H100 NVL": (9, 0),
    "H800 SXM": (9, 0),
    "H800 PCIe": (9, 0),
    "B200 (HGX)": (10, 0),
    "H200 SXM": (9, 0),
    "H200 NVL": (9, 0),
    "GH200": (9, 0),
}


def test_every_part_with_an_fp8_peak_has_fp8_tensor_cores_and_the_others_none():
    for _pattern, peaks in _TABLE:
        assert peaks.part in PART_CC, f"{peaks.part}: add its compute capability to PART_CC"
        has_fp8 = PART_CC[peaks.part] >= FP8_MIN_CC
        assert (peaks.fp8 is not None) == has_fp8, peaks.part


def test_fp8_peaks_are_dense_about_twice_bf16():
    """Dense fp8 is twice dense bf16 on Ada, Hopper and Blackwell; a 2:4 sparse headline
    would be four times."""
    rows = [peaks for _pattern, peaks in _TABLE if peaks.fp8 is not None]
    assert len(rows) >= 10
    for peaks in rows:
        assert peaks.bf16 is not None, peaks.part
        assert peaks.fp8 / peaks.bf16 == pytest.approx(2.0, rel=0.02), peaks.part


@pytest.mark.parametrize(
    ("name", "fp8"),
    [
        # datasheet figures "with sparsity", halved
        ("NVIDIA H100 80GB HBM3", 1979.0),  # H100 SXM: 3,958 sparse
        ("NVIDIA H100 PCIe", 1513.0),  # 3,026 sparse
        ("NVIDIA H100 NVL", 1670.5),  # 3,341 sparse
        ("NVIDIA H200", 1979.0),  # H200 SXM: 3,958 sparse
        ("NVIDIA H200 NVL", 1670.5),  # 3,341 sparse, not the SXM figure
        ("NVIDIA H800", 1979.0),
        ("NVIDIA H800 PCIe", 1513.0),
        ("NVIDIA GH200 480GB", 1979.0),
        ("NVIDIA L40S", 733.0),  # 1,466 sparse
        ("NVIDIA L40", 362.0),  # 724 sparse
        ("NVIDIA L4", 242.5),  # 485 sparse
        ("NVIDIA B200", 4500.0),  # HGX B200: 9 PF sparse
        # Ada whitepaper, FP8 with FP32 accumulate (660.6 is the FP16-accumulate rate)
        ("NVIDIA GeForce RTX 4090", 330.3),
    ],
)
def test_known_fp8_figures(name, fp8):
    assert peak_tflops(name, "fp8") == fp8


@pytest.mark.parametrize(
    "name",
    [
        "Tesla P100-PCIE-16GB",
        "Tesla V100-SXM2-16GB",
        "Tesla T4",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A800 80GB PCIe",
        "NVIDIA A10",
        "NVIDIA A30",
        "NVIDIA A40",
        "NVIDIA GeForce RTX 3090",
        "NVIDIA RTX A6000",
    ],
)
def test_pre_ada_parts_have_no_fp8_peak(name):
    assert lookup(name) is not None and peak_tflops(name, "fp8") is None


# --- the GPU table's fp8 column and the policy table: one rule ---


def test_gpu_fp8_column_uses_the_policy_constant():
    assert gpu_module.FP8_MIN_CC is policies.FP8_MIN_CC


@pytest.mark.parametrize(
    "cc", [(6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (12, 0)]
)
def test_fp8_column_agrees_with_the_float8_rating(cc):
    gpu = GpuInfo(0, "some GPU", cc, None, {})
    rating = policies.rate(
        "float8", DeviceTraits(kind="cuda", name="some GPU", compute_capability=cc)
    )
    assert gpu.fp8 is (rating.rating is Rating.FAST)
    assert gpu.fp8 is (cc >= FP8_MIN_CC)


def test_fp8_column_unknown_without_a_compute_capability():
    assert GpuInfo(0, "some GPU", None, None, {}).fp8 is None


# --- ratings shown: table and JSON ---


def test_every_rating_has_a_style():
    assert set(_RATING_STYLE) == set(Rating)
    assert _RATING_STYLE[Rating.EMULATED] == "yellow"


def _render(report) -> str:
    console = Console(record=True, width=240)
    print_report(report, console=console)
    return console.export_text()


def _ratings(data: dict, label: str) -> dict[str, dict]:
    kind, _, index = label.partition(":")
    device = next(
        d
        for d in data["devices"]
        if d["kind"] == kind and d["index"] == (int(index) if index else None)
    )
    return {r["policy"]: r for r in device["ratings"]}


def test_an_ampere_gpu_and_the_cpu_show_float8_emulated(fake_nvml):
    fake_nvml("A100")
    report = collect(environ={})
    text = _render(report)
    assert "float8" in text and "emulated" in text
    assert "no fp8 Tensor Cores (compute capability 8.0 < 8.9)" in text
    assert "no CPU has fp8 matrix units" in text
    assert " ".join(EMULATED_CAPTION.split()[:6]) in " ".join(text.split())
    data = json.loads(report_json(report))
    gpu = _ratings(data, "cuda:0")["float8"]
    assert gpu["rating"] == "emulated" and "8.0 < 8.9" in gpu["reason"]
    assert _ratings(data, "cpu")["float8"]["rating"] == "emulated"
    assert data["gpus"][0]["fp8"] is False
    # never recommended, whatever it is rated
    assert {d["recommendation"]["policy"] for d in data["devices"]} <= {
        "float32",
        "mixed_float16",
        "mixed_bfloat16",
    }


def test_the_cpu_float8_rating_claims_no_emulation_dtype(fake_nvml):
    """detect rates before anything runs, so it names no dtype for the emulated GEMMs (it said
    "emulated in float32", which Keras' bfloat16 matmul is not): only why it is emulated, in
    the words of the record's fp8.why (issue 33 item 6)."""
    fake_nvml("A100")
    report = collect(environ={})
    reason = _ratings(json.loads(report_json(report)), "cpu")["float8"]["reason"]
    assert reason == f"rule: {policies.FP8_CPU_REASON}: fp8 numerics emulated, slower than float32"
    assert "emulated in" not in _render(report)


def test_an_sm89_gpu_shows_float8_fast_but_recommends_bf16(fake_nvml):
    fake_nvml("L4", "H100")
    report = collect(environ={})
    data = json.loads(report_json(report))
    for label in ("cuda:0", "cuda:1"):
        float8 = _ratings(data, label)["float8"]
        assert float8["rating"] == "fast" and "fp8 Tensor Cores" in float8["reason"]
    assert [g["fp8"] for g in data["gpus"]] == [True, True]
    assert [g["peak_tflops"]["fp8"] for g in data["gpus"]] == [242.5, 1979.0]
    assert report.device("cuda:0").recommendation.policy == "mixed_bfloat16"
    text = _render(report)
    assert "fp8 Tensor Cores (compute capability 8.9 >= 8.9)" in text


def test_no_emulated_rating_no_caption(fake_nvml):
    """The caption explains "emulated" only where the table shows it; float8 on a CPU is
    always emulated, so drop the CPU's float8 rating to see the table without one."""
    fake_nvml("H100")
    report = collect(environ={})
    for entry in report.devices:
        entry.ratings[:] = [r for r in entry.ratings if r.rating is not Rating.EMULATED]
    assert " ".join(EMULATED_CAPTION.split()[:6]) not in " ".join(_render(report).split())


@pytest.mark.parametrize(
    "traits",
    [
        DeviceTraits(kind="cuda", name="H100", compute_capability=(9, 0)),
        DeviceTraits(kind="cuda", name="B200", compute_capability=(10, 0)),
        DeviceTraits(kind="cuda", name="L4", compute_capability=(8, 9)),
        DeviceTraits(kind="cuda", name="P100", compute_capability=(6, 0)),
        DeviceTraits(kind="cpu", name="x", cpu_flags=frozenset({"amx_bf16", "amx_fp16"})),
        DeviceTraits(kind="cpu", name="x", cpu_flags=None),
        DeviceTraits(kind="rocm", name="MI300X"),
        DeviceTraits(kind="mps", name="Apple GPU (MPS)"),
        DeviceTraits(kind="tpu", name="TPU v5e"),
    ],
)
def test_float8_is_never_recommended(traits):
    assert policies.recommend(traits).policy != "float8"
    assert policies.FLOAT8 not in policies.auto_policies(traits)


# --- `--measure`: the gate ---


def test_fp8_gate():
    assert fp8_skip_reason("cpu") == FP8_CPU_REASON
    assert FP8_CPU_REASON == "no fp8 matrix units: an fp8 GEMM here would time float32 emulation"
    assert "MPS" in fp8_skip_reason("mps")
    assert "8.6 < 8.9" in fp8_skip_reason("cuda", (8, 6))
    assert "8.0 < 8.9" in fp8_skip_reason("cuda", (8, 0))
    assert "unknown" in fp8_skip_reason("cuda", None)
    assert "ROCm" in fp8_skip_reason("cuda", (9, 4), hip="6.2.41133")
    for cc in ((8, 9), (9, 0), (10, 0), (12, 0)):
        assert fp8_skip_reason("cuda", cc) is None


def test_gemm_arithmetic():
    assert gemm_flops(4096) == 2 * 4096**3
    # an H100 SXM reaching its dense fp8 datasheet figure: 8192^3 GEMM in 0.5557 ms
    assert tflops(gemm_flops(8192), 2 * 8192**3 / 1979e12) == pytest.approx(1979.0)
    assert tflops(1.0, 0.0) is None


# --- `--measure`: the CUDA path against a fake torch ---


class _FakeTensor:
    def __init__(self, shape, dtype, strides=None, device="cuda:0"):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        cols = self.shape[1] if len(self.shape) == 2 else 1
        self._strides = strides or ((cols, 1) if len(self.shape) == 2 else ())

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        total = 1
        for size in self.shape:
            total *= size
        return total

    def stride(self):
        return self._strides

    def to(self, dtype):
        return _FakeTensor(self.shape, dtype, self._strides, self.device)

    def t(self):
        return _FakeTensor(self.shape[::-1], self.dtype, self._strides[::-1], self.device)


class FakeCudaTorch:
    """The part of torch the fp8 measurement uses, on a CUDA GPU of compute capability `cc`.

    _scaled_mm takes the real signature (aten::_scaled_mm(Tensor self, Tensor mat2, Tensor
    scale_a, Tensor scale_b, Tensor? bias=None, Tensor? scale_result=None, ScalarType?
    out_dtype=None, bool use_fast_accum=False) -> Tensor, torch >= 2.4) and raises
    RuntimeError where the CUDA kernel does (aten/src/ATen/native/cuda/Blas.cpp): below
    8.9, on non-fp8 operands, on a row-major mat2 (cuBLASLt's fp8 GEMM is "TN" only), on
    dimensions that are not multiples of 16, on scales that are not float32 scalars."""

    float32, bfloat16, float16 = "float32", "bfloat16", "float16"
    float8_e4m3fn, float8_e5m2 = "float8_e4m3fn", "float8_e5m2"

    def __init__(self, cc=(9, 0), hip=None):
        self.calls: list[dict] = []
        self.version = SimpleNamespace(hip=hip, cuda="12.8")
        self.cuda = SimpleNamespace(get_device_capability=lambda device=None: cc)
        self._cc = cc

    def randn(self, *shape, device=None, dtype=None):
        return _FakeTensor(shape, dtype or self.float32, device=device)

    def tensor(self, value, device=None, dtype=None):
        return _FakeTensor((), dtype or self.float32, device=device)

    def _scaled_mm(
        self,
        input,
        mat2,
        scale_a,
        scale_b,
        bias=None,
        scale_result=None,
        out_dtype=None,
        use_fast_accum=False,
    ):
        if not (self._cc >= (9, 0) or self._cc == (8, 9)):
            raise RuntimeError(
                "torch._scaled_mm is only supported on CUDA devices with compute capability "
                ">= 9.0 or 8.9, or ROCm MI300+"
            )
        fp8 = (self.float8_e4m3fn, self.float8_e5m2)
        if input.dtype not in fp8 or mat2.dtype not in fp8:
            raise RuntimeError(f"Expected both inputs to be fp8 types but got {input.dtype}")
        if input.shape[1] != mat2.shape[0]:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
        if any(size % 16 for size in mat2.shape):
            raise RuntimeError(
                f"mat2 shape ({mat2.shape[0]}x{mat2.shape[1]}) must be divisible by 16"
            )
        if input.stride()[1] != 1 or mat2.stride()[0] != 1:
            raise RuntimeError(
                "Only multiplication of row-major and column-major matrices is supported by "
                "cuBLASLt"
            )
        for scale in (scale_a, scale_b):
            if scale.dtype != self.float32 or scale.numel() != 1:
                raise RuntimeError("scale_a and scale_b must be float32 scalars (tensorwise)")
        self.calls.append({"shape": (input.shape[0], mat2.shape[1]), "out_dtype": out_dtype})
        return _FakeTensor((input.shape[0], mat2.shape[1]), out_dtype or input.dtype)


def test_the_fake_refuses_what_cuda_refuses():
    torch = FakeCudaTorch()
    a = torch.randn(32, 32).to(torch.float8_e4m3fn)
    b = torch.randn(32, 32).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, dtype=torch.float32)
    with pytest.raises(RuntimeError, match="row-major and column-major"):
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="divisible by 16"):
        c = torch.randn(24, 24).to(torch.float8_e4m3fn)
        torch._scaled_mm(c, c.t(), scale_a=one, scale_b=one)
    with pytest.raises(RuntimeError, match=r"compute capability >= 9\.0 or 8\.9"):
        FakeCudaTorch(cc=(8, 6))._scaled_mm(a, b.t(), one, one)
    out = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    assert out.shape == (32, 32) and out.dtype == "bfloat16"


@needs_torch
def test_the_fake_has_the_real_signature():
    code = (
        "import torch\n"
        "print(','.join(a.name for a in torch.ops.aten._scaled_mm.default._schema.arguments))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    fake = list(inspect.signature(FakeCudaTorch()._scaled_mm).parameters)
    assert ["self", *fake[1:]] == done.stdout.strip().split(",")


class _FixedTimer:
    """Every multiply takes `seconds`; the function is still called (so the fake checks)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, fn) -> float:
        fn()
        return self.seconds


LIMITS = {"budget": 1.0, "max_iters": 3, "min_iters": 2, "warmup": 1}
CUDA = SimpleNamespace(type="cuda", index=0)


@pytest.mark.parametrize("cc", [(8, 9), (9, 0), (10, 0)])
def test_fp8_is_timed_with_scaled_mm_on_sm89_and_up(cc):
    torch = FakeCudaTorch(cc=cc)
    entry = _measure_dtype(torch, CUDA, "fp8", [1024, 2048], _FixedTimer(1e-3), LIMITS)
    assert entry["ok"], entry
    assert entry["dtype"] == "float8_e4m3fn" and entry["op"] == FP8_OP
    assert {c["out_dtype"] for c in torch.calls} == {"bfloat16"}
    assert {c["shape"] for c in torch.calls} == {(1024, 1024), (2048, 2048)}
    for size in entry["sizes"]:
        assert size["best_tflops"] == pytest.approx(2 * size["n"] ** 3 / 1e-3 / 1e12)
    assert entry["best_tflops"] == pytest.approx(2 * 2048**3 / 1e-3 / 1e12)


@pytest.mark.parametrize(("cc", "hip"), [((8, 6), None), ((8, 0), None), ((9, 4), "6.2")])
def test_fp8_is_skipped_without_fp8_tensor_cores(cc, hip):
    torch = FakeCudaTorch(cc=cc, hip=hip)
    entry = _measure_dtype(torch, CUDA, "fp8", [1024], _FixedTimer(1e-3), LIMITS)
    assert entry["ok"] is False and entry["sizes"] == [] and not torch.calls
    assert entry["skipped"] == fp8_skip_reason("cuda", cc, hip)


def test_fp8_on_a_cpu_is_skipped_before_torch_is_touched():
    entry = _measure_dtype(None, SimpleNamespace(type="cpu"), "fp8", [64], None, LIMITS)
    assert entry == {
        "dtype": "float8_e4m3fn",
        "ok": False,
        "sizes": [],
        "skipped": FP8_CPU_REASON,
    }


def test_a_scaled_mm_error_is_the_entrys_answer():
    """Sizes that are not multiples of 16: cuBLASLt refuses, the entry says so."""
    entry = _measure_dtype(FakeCudaTorch(), CUDA, "fp8", [1000], _FixedTimer(1e-3), LIMITS)
    assert entry["ok"] is False and "divisible by 16" in entry["error"]


# --- `--measure`: storage under the "fp8" peak key ---


def test_a_measured_fp8_peak_is_stored_under_fp8(tmp_path, monkeypatch):
    monkeypatch.setenv("MPBENCH_CACHE", str(tmp_path))
    entry = _measure_dtype(FakeCudaTorch(), CUDA, "fp8", [4096], _FixedTimer(1e-4), LIMITS)
    fingerprint = "00000000000fb8fb"
    write_cache(
        fingerprint,
        {
            "ok": True,
            "device": "cuda:0",
            "cache_key": cache_key("cuda:0"),
            "dtypes": {"fp8": entry},
        },
    )
    assert cached_peaks(fingerprint) == {"fp8": entry["best_tflops"]}
    assert cached_peak(fingerprint, "fp8") == pytest.approx(2 * 4096**3 / 1e-4 / 1e12)
    assert cached_peak(fingerprint, "float8") == cached_peak(fingerprint, "fp8")
    assert cached_peak(fingerprint, policies.FLOAT8.peak_key) == cached_peak(fingerprint, "fp8")


def test_a_skipped_fp8_entry_is_never_a_peak(tmp_path, monkeypatch):
    monkeypatch.setenv("MPBENCH_CACHE", str(tmp_path))
    fingerprint = "00000000000c9f8a"
    skipped = {"dtype": "float8_e4m3fn", "ok": False, "sizes": [], "skipped": FP8_CPU_REASON}
    fp32 = {"ok": True, "best_tflops": 0.1}
    write_cache(
        fingerprint,
        {
            "ok": True,
            "device": "cpu",
            "cache_key": cache_key("cpu"),
            "dtypes": {"fp32": fp32, "fp8": skipped},
        },
    )
    assert cached_peaks(fingerprint) == {"fp32": 0.1}
    assert cached_peak(fingerprint, "fp8") is None


def test_measure_asks_for_fp8_by_default():
    assert "fp8" in measure.PEAK_KEYS


def test_detect_measure_shows_fp8_beside_its_datasheet_figure(fake_nvml, monkeypatch, tmp_path):
    monkeypatch.setenv("MPBENCH_CACHE", str(tmp_path))
    fake_nvml("H100")
    report = collect(environ={})
    fp8 = _measure_dtype(FakeCudaTorch(), CUDA, "fp8", [8192], _FixedTimer(1e-3), LIMITS)

    def child(device, **_options):
        return {"ok": True, "device": device, "threads": None, "dtypes": {"fp8": fp8}}

    monkeypatch.setattr(measure, "run_measure_child", child)
    result = measure.attach_measurement(report, "cuda:0")
    assert result["dtypes"]["fp8"]["datasheet_tflops"] == 1979.0
    text = _render(report)
    assert "fp8: float8_e4m3fn" in text and "torch._scaled_mm, bf16 out" in text


@needs_torch
def test_the_real_child_skips_fp8_on_this_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("MPBENCH_CACHE", str(tmp_path))
    result = measure.run_measure_child(
        "cpu", sizes=(32,), dtypes=("fp8",), budget_s=0.05, max_iters=2, min_iters=1, warmup=1
    )
    assert result["ok"], result
    assert result["dtypes"]["fp8"] == {
        "dtype": "float8_e4m3fn",
        "ok": False,
        "sizes": [],
        "skipped": FP8_CPU_REASON,
    }
