"""Run in a child process by `mpbench detect --measure`: time the matmul of nn.Linear per dtype,
on the path a training step takes (PATH_OP).

A child, like the --probe children: importing torch takes seconds, may initialise CUDA, and
the TF32 switch is process-global. Usage:

    python -m mpbench.detect.measure_child --device cpu|mps|cuda[:N] [--sizes 512,1024]
        [--dtypes fp32,tf32,fp16,bf16,fp8] [--budget SECONDS] [--max-iters N] [--min-iters N]
        [--warmup N] [--threads N] [--bandwidth-mb MB]

The last stdout line is `MPBENCH_MEASURE <json>`; the JSON always has "ok", and "error" when
not ok. Method (the MAMF-finder recipe, reduced): randn inputs, a warm-up, then many timed
multiplies of the same shape; each dtype/size stops at --max-iters or when its time budget is
spent (after --min-iters); a size whose first multiply alone would overrun the budget is
skipped, and so are the larger ones. FLOPs per multiply = 2 n^3.

The multiply is the one the cells' layers run, on the path their step takes: nn.Linear's
torch.nn.functional.linear(x, w) = x @ w.T, w a float32 weight (a leaf that needs a gradient,
as a model's parameter); fp16 and bf16 under torch.autocast(device, dtype) as the cells run
them (backends/torch), with x in that dtype (what the previous autocast op hands on) and the
weight's cast made once by autocast's cache, as in a step's forward, so no cast is timed. Not
torch.mm on 16-bit tensors: the kernel can differ. On an AVX2-only CPU torch.mm on two bf16
row-major tensors ran a slow reference kernel (0.0013 TFLOP/s) while the bf16 training step,
through autocast's linear, achieved 0.0072 TFLOP/s, and a "peak" below what the step reached
voided MFU there; on a 2-core AVX2-only CPU, F.linear under autocast ran 0.016
TFLOP/s at n = 512 where that torch.mm ran 0.0013.

CPU and MPS time with perf_counter (MPS synchronised); CUDA with CUDA events around each multiply
(torch.cuda.Event(enable_timing=True); elapsed_time is in milliseconds, torch docs) and the
L2 cache flushed between multiplies, so no iteration reuses the previous one's cached inputs.

fp8 ("fp8" peak key): timed only where the hardware has fp8 matrix units, an NVIDIA GPU of
compute capability >= 8.9 (mpbench.policies.FP8_MIN_CC): torch._scaled_mm on float8_e4m3fn
operands (mat2 column-major, as cuBLASLt wants), float32 scalar scales of 1.0 (tensorwise
scaling), out_dtype bfloat16, use_fast_accum off; also 2 n^3 FLOPs. Anywhere else fp8 is
skipped with the reason (fp8_skip_reason): a CPU's _scaled_mm upcasts to float32, so timing
it would store emulation as an fp8 peak.

Memory bandwidth ("bandwidth"): the STREAM triad a = b + s * c in float32
(torch.add(b, c, alpha=s, out=a)), three arrays of --bandwidth-mb MB each (default 64 MB on a
CPU, larger than the last-level cache of most CPUs; 256 MB on a GPU, five times an H100's
50 MB L2), timed with the same timer as the multiplies (on CUDA, events and the L2 flushed
before each pass). Bytes per pass are STREAM's count, 3 x the array: b and c read, a written
(the write-allocate read a CPU may add is not counted, as STREAM does not count it); GB/s is
1e9 bytes per second. The best pass is the bandwidth the bottleneck diagnosis sets a step's
bytes against (mpbench.results.bottleneck); a plain copy (a.copy_(b), 2 x the array) is
reported beside it.

The timed part runs inside a contention window (mpbench.results.contention) whose root is
this process: the answer's "contention" says how much CPU other processes took meanwhile,
and the parent never caches a contended measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from mpbench.detect.child import MEASURE_MARKER, answer, one_line
from mpbench.policies import FP8_MIN_CC

DTYPES = {
    "fp32": "float32",
    "tf32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
}
FP8_OUT_DTYPE = "bfloat16"
FP8_OP = (
    "torch._scaled_mm(float8_e4m3fn, float8_e4m3fn column-major, float32 scalar scales, "
    "out_dtype=bfloat16)"
)
# The CPU's reason is the one `detect --measure` shows most: say why nothing is timed.
FP8_CPU_REASON = "no fp8 matrix units: an fp8 GEMM here would time float32 emulation"
# How a dtype's multiply is timed, in words: each entry's "op" (and detect's table title).
PATH_OP = "torch.nn.functional.linear(x, w), float32 weight"
AUTOCAST_OP = (
    "torch.nn.functional.linear(x, w) under torch.autocast({device}, {dtype}): float32 weight "
    "(its cast cached), {dtype} input"
)
AUTOCAST_KEYS = ("fp16", "bf16")  # the dtypes a training step reaches through autocast
CPU_SIZES = (512, 1024, 2048)
GPU_SIZES = (2048, 4096, 8192)
# Bandwidth arrays, MB each (module docstring): several times the cache they must not fit in.
CPU_BANDWIDTH_MB = 64.0
GPU_BANDWIDTH_MB = 256.0
TRIAD_OP = "STREAM triad a = b + s*c, float32 (torch.add(b, c, alpha=s, out=a))"


def _set_tf32(torch, enabled: bool) -> str:
    """Switch TF32 for CUDA matmuls with one API only, and read it back from that API.

    torch >= 2.9 has torch.backends.cuda.matmul.fp32_precision ("ieee" / "tf32"); mixing it
    with the legacy allow_tf32 flag or get_float32_matmul_precision() raises on new torch."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32" if enabled else "ieee"
        return f"torch.backends.cuda.matmul.fp32_precision={matmul.fp32_precision}"
    matmul.allow_tf32 = enabled
    return f"torch.backends.cuda.matmul.allow_tf32={matmul.allow_tf32}"


class _Timer:
    """Seconds one call takes on the device, measured the honest way for that device."""

    def __init__(self, torch, device) -> None:
        self.torch = torch
        self.device = device
        self.flush = None
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 64 * 1024**2
            # Twice the L2 size, written between iterations, evicts the previous inputs.
            self.flush = torch.empty(2 * l2 // 4 + 1, dtype=torch.float32, device=device)

    def __call__(self, fn: Callable[[], Any]) -> float:
        torch = self.torch
        if self.device.type == "cuda":
            self.flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        if self.device.type == "mps":
            torch.mps.synchronize()
            begin = time.perf_counter()
            fn()
            torch.mps.synchronize()
            return time.perf_counter() - begin
        begin = time.perf_counter()
        fn()  # CPU ops return when done
        return time.perf_counter() - begin


def fp8_skip_reason(
    device_type: str, compute_capability: tuple[int, int] | None = None, hip: str | None = None
) -> str | None:
    """Why this device gets no fp8 timing; None where the hardware has fp8 matrix units (an
    NVIDIA GPU of compute capability >= FP8_MIN_CC, the rule policies.rate uses)."""
    if device_type == "cpu":
        return FP8_CPU_REASON
    if device_type == "mps":
        return "torch's MPS backend has no fp8 matrix multiply: nothing to time"
    if device_type != "cuda":
        return f"no fp8 matrix multiply on {device_type}"
    if hip:
        # torch's "cuda" on ROCm: MI300's fp8 is the fnuz formats, not e4m3fn.
        return (
            f"ROCm (HIP {hip}): mpbench times fp8 only on NVIDIA compute capability >= "
            "{}.{}".format(*FP8_MIN_CC)
        )
    if compute_capability is None:
        return "compute capability unknown: fp8 not timed"
    if tuple(compute_capability) < FP8_MIN_CC:
        return (
            "no fp8 Tensor Cores (compute capability {}.{} < {}.{}): torch._scaled_mm "
            "needs 8.9+".format(*compute_capability, *FP8_MIN_CC)
        )
    return None


def _fp8_multiply(torch, device, n: int) -> Callable[[], Any]:
    """One n x n x n fp8 GEMM as the frameworks' fp8 Linear layers run it (torchao's
    tensorwise recipe): e4m3fn x e4m3fn, mat2 column-major, bf16 out, FP32 accumulate."""
    fp8 = torch.float8_e4m3fn
    a = torch.randn(n, n, device=device).to(fp8)
    b = torch.randn(n, n, device=device).to(fp8).t()  # column-major: cuBLASLt's "TN" layout
    scale = torch.tensor(1.0, device=device, dtype=torch.float32)
    out_dtype = getattr(torch, FP8_OUT_DTYPE)

    def multiply() -> None:
        # One tensor back; releases before pytorch#128683 (mid-2024) gave (out, amax): unused.
        torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=out_dtype)

    return multiply


def _multiply(torch, device, key: str, n: int) -> Callable[[], Any]:
    """One n x n x n GEMM of `key`'s dtype; run it inside on_step_path(key) (module
    docstring: nn.Linear's matmul, 16-bit dtypes through autocast)."""
    if key == "fp8":
        return _fp8_multiply(torch, device, n)
    dtype = getattr(torch, DTYPES[key])  # tf32: float32, the math mode is the switch
    weight = torch.randn(n, n, device=device, requires_grad=True)  # a model's float32 weight
    x = torch.randn(n, n, device=device, dtype=dtype)
    linear = torch.nn.functional.linear

    def multiply() -> None:
        linear(x, weight)

    return multiply


def on_step_path(torch, device, key: str) -> contextlib.ExitStack:
    """The context a training step runs `key`'s matmuls in: no autograd graph (only the GEMM is
    timed), and for fp16 / bf16 torch.autocast(device, dtype), whose cache keeps the weight's
    cast for the whole context, as for a step's forward."""
    stack = contextlib.ExitStack()
    if key == "fp8":
        return stack  # torch._scaled_mm on fp8 operands, which need no gradient: as it is
    stack.enter_context(torch.no_grad())
    if key in AUTOCAST_KEYS:
        stack.enter_context(torch.autocast(device.type, getattr(torch, DTYPES[key])))
    return stack


def path_op(device_type: str, key: str) -> str:
    """What `key`'s multiply runs, in words (the entry's "op")."""
    if key == "fp8":
        return FP8_OP
    if key in AUTOCAST_KEYS:
        return AUTOCAST_OP.format(device=repr(device_type), dtype=DTYPES[key])
    return PATH_OP


def gemm_flops(n: int) -> float:
    """FLOPs of one n x n x n GEMM: n^2 outputs, n multiply-adds each."""
    return 2.0 * n**3


def tflops(flops: float, seconds: float) -> float | None:
    return flops / seconds / 1e12 if seconds > 0 else None


def _time_size(torch, device, key: str, n: int, timer: _Timer, limits: dict) -> dict:
    with on_step_path(torch, device, key):
        return _time_multiply(_multiply(torch, device, key, n), n, timer, limits)


def _time_multiply(multiply: Callable[[], Any], n: int, timer: _Timer, limits: dict) -> dict:
    budget, min_iters = limits["budget"], limits["min_iters"]
    first = timer(multiply)  # also the first warm-up multiply
    warmup, spent = 1, first
    # The first call pays one-off costs (library handles, kernel choice), and on a loaded
    # machine any call may lose its core for a time slice: ask a few times, keep the fastest.
    while first * min_iters > budget and warmup < 4 and spent < 2 * budget:
        again = timer(multiply)
        warmup, spent, first = warmup + 1, spent + again, min(first, again)
    if first * min_iters > budget:
        return {
            "n": n,
            "skipped": f"one multiply took {first:.3g} s: {min_iters} would overrun the "
            f"{budget:g} s budget",
            "first_s": first,
        }
    while warmup < limits["warmup"] and spent < budget / 4:
        spent += timer(multiply)
        warmup += 1
    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < limits["max_iters"] and (
        len(times) < min_iters or time.perf_counter() < deadline
    ):
        times.append(timer(multiply))
    flops = gemm_flops(n)
    best, median = min(times), statistics.median(times)
    return {
        "n": n,
        "iterations": len(times),
        "warmup_iterations": warmup,
        "best_s": best,
        "median_s": median,
        "best_tflops": tflops(flops, best),
        "median_tflops": tflops(flops, median),
    }


def _measure_dtype(torch, device, key: str, sizes: list[int], timer: _Timer, limits: dict):
    entry: dict[str, Any] = {"dtype": DTYPES[key], "ok": False, "sizes": []}
    if key == "tf32":
        entry["dtype"] = "float32 (TF32 math)"
        if device.type != "cuda":
            entry["skipped"] = "TF32 is an NVIDIA GPU math mode; this device has none"
            return entry
        cc = torch.cuda.get_device_capability(device)
        if tuple(cc) < (8, 0):
            entry["skipped"] = f"TF32 needs compute capability >= 8.0; this GPU is {cc[0]}.{cc[1]}"
            return entry
    if key == "fp8":
        cc = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        hip = getattr(torch.version, "hip", None) if device.type == "cuda" else None
        reason = fp8_skip_reason(device.type, None if cc is None else tuple(cc), hip)
        if reason:
            entry["skipped"] = reason
            return entry
    entry["op"] = path_op(device.type, key)
    if device.type == "cuda" and key in ("fp32", "tf32"):
        entry["matmul_precision"] = _set_tf32(torch, key == "tf32")
    for n in sizes:
        try:
            result = _time_size(torch, device, key, n, timer, limits)
        except Exception as error:  # unsupported dtype, out of memory, ...: this dtype's answer
            entry["sizes"].append({"n": n, "error": one_line(error)})
            entry.setdefault("error", one_line(error))
            break
        entry["sizes"].append(result)
        if "skipped" in result:
            break  # larger sizes take 8x longer per doubling
    timed = [r for r in entry["sizes"] if r.get("best_tflops")]
    if timed:
        entry["ok"] = True
        entry.pop("error", None)
        entry["best_tflops"] = max(r["best_tflops"] for r in timed)
        entry["median_tflops"] = max(r["median_tflops"] for r in timed)
    elif "error" not in entry:
        entry["skipped"] = entry["sizes"][0]["skipped"] if entry["sizes"] else "no size given"
    return entry


def _time_passes(timer: _Timer, run: Callable[[], Any], limits: dict) -> list[float]:
    """One warm-up pass, then passes until --max-iters or the budget (after --min-iters)."""
    timer(run)
    times: list[float] = []
    deadline = time.perf_counter() + limits["budget"]
    while len(times) < limits["max_iters"] and (
        len(times) < limits["min_iters"] or time.perf_counter() < deadline
    ):
        times.append(timer(run))
    return times


def measure_bandwidth(torch, device, megabytes: float, timer: _Timer, limits: dict) -> dict:
    """The device's memory bandwidth from the STREAM triad and copy (module docstring); an
    error (out of memory, ...) is this entry's answer, not the measurement's."""
    n = max(1, int(megabytes * 1e6) // 4)
    entry: dict[str, Any] = {"ok": False, "op": TRIAD_OP, "array_bytes": 4 * n}
    try:
        a = torch.empty(n, dtype=torch.float32, device=device)
        b = torch.full((n,), 1.0, dtype=torch.float32, device=device)
        c = torch.full((n,), 2.0, dtype=torch.float32, device=device)
        triad = _time_passes(timer, lambda: torch.add(b, c, alpha=3.0, out=a), limits)
        copy = _time_passes(timer, lambda: a.copy_(b), limits)
    except Exception as error:  # out of memory, ...: this entry's answer
        entry["error"] = one_line(error)
        return entry
    triad_bytes, copy_bytes = 3.0 * 4 * n, 2.0 * 4 * n
    entry.update(
        ok=True,
        iterations=len(triad),
        bytes_per_pass=triad_bytes,
        best_s=min(triad),
        median_s=statistics.median(triad),
        best_gbps=triad_bytes / min(triad) / 1e9,
        median_gbps=triad_bytes / statistics.median(triad) / 1e9,
        copy_best_gbps=copy_bytes / min(copy) / 1e9,
    )
    return entry


def _other_gpu_processes(torch, device) -> int | None:
    """Compute processes on this GPU besides this one, from NVML (None when it cannot tell).
    NVML lists host PIDs, which a container cannot match: count them instead."""
    try:
        import pynvml

        uuid = str(torch.cuda.get_device_properties(device).uuid)
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            return max(0, len(pynvml.nvmlDeviceGetComputeRunningProcesses(handle)) - 1)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, a MIG slice, an old driver: unknown, not an error
        return None


def measure(
    device_text: str,
    sizes: list[int] | None,
    keys: list[str],
    limits: dict,
    threads: int | None = None,
    bandwidth_mb: float | None = None,
) -> dict:
    """`bandwidth_mb`: the size of each bandwidth array; 0 measures no bandwidth; None the
    device's default (CPU_BANDWIDTH_MB, GPU_BANDWIDTH_MB)."""
    import psutil
    import torch

    from mpbench.results.contention import ContentionWindow, judge

    if threads:
        torch.set_num_threads(threads)
    device = torch.device(device_text)
    info: dict[str, Any] = {
        "ok": True,
        "device": device_text,
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return {
                "ok": False,
                "error": f"torch {torch.__version__} sees no CUDA device "
                f"(built for CUDA {torch.version.cuda})",
            }
        index = 0 if device.index is None else device.index
        if index >= torch.cuda.device_count():
            return {
                "ok": False,
                "error": f"torch sees {torch.cuda.device_count()} CUDA device(s), no cuda:{index}",
            }
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        info.update(
            device_name=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            uuid=str(props.uuid) if hasattr(props, "uuid") else None,
            memory_total_bytes=int(props.total_memory),
            cuda_version=torch.version.cuda,
            fp16_reduced_precision_reduction=bool(
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
            ),
            bf16_reduced_precision_reduction=bool(
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
            ),
        )
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            return {"ok": False, "error": f"torch {torch.__version__}: MPS is not available"}
    elif device.type != "cpu":
        return {"ok": False, "error": f"unsupported device {device_text!r}"}
    if sizes is None:
        sizes = list(GPU_SIZES if device.type in ("cuda", "mps") else CPU_SIZES)
    info["sizes"] = sizes
    info["limits"] = dict(limits)
    torch.manual_seed(0)
    timer = _Timer(torch, device)
    window = ContentionWindow(psutil.Process()).start()
    started = time.perf_counter()
    info["dtypes"] = {key: _measure_dtype(torch, device, key, sizes, timer, limits) for key in keys}
    if bandwidth_mb is None:
        bandwidth_mb = GPU_BANDWIDTH_MB if device.type in ("cuda", "mps") else CPU_BANDWIDTH_MB
    if bandwidth_mb > 0:
        info["bandwidth"] = measure_bandwidth(torch, device, bandwidth_mb, timer, limits)
    info["seconds"] = round(time.perf_counter() - started, 2)
    reading = window.stop()
    if device.type == "cuda":
        reading.gpu_other_processes = _other_gpu_processes(torch, device)
        judge(reading)
    info["contention"] = reading.to_dict()
    return info


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mpbench.detect.measure_child")
    parser.add_argument("--device", required=True)
    parser.add_argument("--sizes", default=None, help="comma-separated n, e.g. 512,1024")
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--budget", type=float, default=None, help="seconds per dtype and size")
    parser.add_argument("--max-iters", type=int, default=None)
    parser.add_argument("--min-iters", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument(
        "--bandwidth-mb", type=float, default=None, help="MB per bandwidth array; 0: none"
    )
    return parser


def default_limits(device_text: str) -> dict:
    """Per dtype and size: seconds of timed multiplies, and iteration bounds."""
    if device_text.startswith(("cuda", "mps")):
        return {"budget": 3.0, "max_iters": 100, "min_iters": 10, "warmup": 10}
    return {"budget": 2.0, "max_iters": 50, "min_iters": 3, "warmup": 3}


def main(argv: list[str]) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 with argparse's usage message on bad options
    try:
        sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else None
        keys = [k.strip() for k in args.dtypes.split(",") if k.strip()]
        unknown = [k for k in keys if k not in DTYPES]
        if unknown or not keys or (sizes is not None and any(n <= 0 for n in sizes)):
            raise ValueError(f"--dtypes {args.dtypes!r} or --sizes {args.sizes!r}")
        if args.threads is not None and args.threads <= 0:
            raise ValueError(f"--threads {args.threads}")
        if args.bandwidth_mb is not None and args.bandwidth_mb < 0:
            raise ValueError(f"--bandwidth-mb {args.bandwidth_mb}")
    except ValueError as error:
        parser.print_usage(sys.stderr)
        print(f"usage error: {error}", file=sys.stderr)
        return 2
    limits = default_limits(args.device)
    for name in ("budget", "max_iters", "min_iters", "warmup"):
        if getattr(args, name) is not None:
            limits[name] = getattr(args, name)
    return answer(
        MEASURE_MARKER,
        lambda: measure(args.device, sizes, keys, limits, args.threads, args.bandwidth_mb),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
