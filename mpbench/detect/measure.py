"""Measured matmul peaks and memory bandwidth (`mpbench detect --measure`), cached per
hardware fingerprint.

A datasheet peak is what the vendor promises; the measured peak is what nn.Linear's matmul
reaches on this device, at these clocks, with this library build, on the path a training step
takes it (16-bit dtypes under torch.autocast: measure_child's docstring says why); MAMF,
"maximum achievable matmul FLOPS". MFU against it says how close a workload gets to what is
reachable here. The memory bandwidth (a STREAM triad, measure_child.measure_bandwidth) is
measured and cached beside the peaks: a peak over the bandwidth is the ridge point the
bottleneck diagnosis sets a step's FLOPs per byte against (mpbench.results.bottleneck). The
measurement runs in a child process (mpbench.detect.measure_child), so importing this module
imports no framework.

Cache: `<cache>/peaks/<fingerprint>.json`, where `<cache>` is `$MPBENCH_CACHE`, else
`$XDG_CACHE_HOME/mpbench`, else `~/.cache/mpbench` (the same root mpbench.data uses; detect
depends on no other mpbench package, so the three lines are repeated here). Written atomically
(a temporary file in the same directory, then os.replace), so a reader never sees half a file.
A CPU peak is "this machine, this many threads, at that moment": it is never compared with a
GPU datasheet.

Cache rules (docs/detect.md): a measurement during which other processes took CPU time
(mpbench.results.contention's rule) is shown but never cached. A cached peak is used only
with the torch it was measured with and, on a CPU, the same thread count (`cache_key`); a
file without that key (an older mpbench) is stale. `forget_measured` drops a peak that a
training cell beat (a peak measured low), so the next measurement replaces it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from mpbench import __version__
from mpbench.cache import cache_dir
from mpbench.detect.child import MEASURE_MARKER, run_child
from mpbench.detect.cuda_order import in_pci_order
from mpbench.detect.peaks import PEAK_KEYS

# 2: "cache_key" (torch version, CPU threads), contention, forgotten. 3: the peaks are
# nn.Linear's matmul on the step's path (16-bit under torch.autocast), no longer torch.mm on
# 16-bit tensors, which timed another kernel: a version-2 peak means something else, and is
# measured again.
CACHE_SCHEMA_VERSION = 3
DEFAULT_MEASURE_TIMEOUT_S = 900.0
# What is timed by default: the policies' peak keys (PEAK_KEYS, one list with the datasheet's
# columns). "fp8" is timed only on NVIDIA compute capability >= 8.9
# (measure_child.fp8_skip_reason); elsewhere its entry is skipped with the reason and never
# becomes a cached peak. _ALIASES: the dtype names a peak key may also be given as.
_ALIASES = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "half": "fp16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
}
_FINGERPRINT = re.compile(r"[0-9A-Za-z_-]{1,128}")


def peaks_dir() -> Path:
    return cache_dir() / "peaks"


def cache_path(fingerprint: str) -> Path:
    """Where the measured peaks of this hardware live. The fingerprint names a file, so it
    must be a plain token (detect's are 16 hex digits)."""
    if not _FINGERPRINT.fullmatch(fingerprint or ""):
        raise ValueError(f"not a hardware fingerprint: {fingerprint!r}")
    return peaks_dir() / f"{fingerprint}.json"


def default_threads() -> int:
    """The intra-op threads a CPU measurement uses unless told: OMP_NUM_THREADS when it is a
    positive number, else the cores this process may run on (`mpbench run`'s default)."""
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        threads = 0
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def installed_torch_version() -> str | None:
    """The installed torch, from package metadata (no import)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def cache_key(device: str, torch_version: str | None = None, threads: int | None = None) -> dict:
    """What a measured peak depends on besides the hardware: the torch build (its BLAS and
    kernels) and, on a CPU, the number of threads. None: the installed torch and
    default_threads(). The thread count does not matter on a GPU and is None there."""
    cpu = device.partition(":")[0] == "cpu"
    return {
        "torch_version": torch_version or installed_torch_version(),
        "threads": (threads or default_threads()) if cpu else None,
    }


def stale_reason(
    data: dict, torch_version: str | None = None, threads: int | None = None
) -> str | None:
    """Why a cached measurement does not apply to this torch / thread count; None if it does."""
    key = data.get("cache_key")
    if not isinstance(key, dict):
        return "written by an older mpbench, without the torch version and thread count"
    wanted = cache_key(str(data.get("device") or "cpu"), torch_version, threads)
    if key.get("torch_version") != wanted["torch_version"]:
        return f"measured with torch {key.get('torch_version')}, this is {wanted['torch_version']}"
    if key.get("threads") != wanted["threads"]:
        return f"measured with {key.get('threads')} threads, not {wanted['threads']}"
    return None


def _read_file(fingerprint: str) -> dict | None:
    try:
        data = json.loads(cache_path(fingerprint).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("cache_schema_version") != CACHE_SCHEMA_VERSION:
        return None
    return data


def read_cached(
    fingerprint: str, *, torch_version: str | None = None, threads: int | None = None
) -> dict | None:
    """The cached measurement of this hardware, or None: none yet, unreadable, another
    schema, or stale (another torch, or on a CPU another thread count: see cache_key)."""
    data = _read_file(fingerprint)
    if data is None or stale_reason(data, torch_version, threads) is not None:
        return None
    return data


def cached_peaks(
    fingerprint: str, *, torch_version: str | None = None, threads: int | None = None
) -> dict[str, float]:
    """The best measured matmul TFLOP/s of this hardware per policy peak key ("fp32", "tf32",
    "fp16", "bf16", "fp8"), read from the cache once; keys with nothing measured, or forgotten, are
    left out. `torch_version` / `threads`: what the peaks will be set against (default:
    the installed torch, default_threads()); a cache measured with others gives {}."""
    data = read_cached(fingerprint, torch_version=torch_version, threads=threads) or {}
    dtypes = data.get("dtypes", {})
    peaks = {}
    for key, entry in dtypes.items() if isinstance(dtypes, dict) else ():
        usable = isinstance(entry, dict) and entry.get("ok") and not entry.get("forgotten")
        best = entry.get("best_tflops") if usable else None
        if isinstance(best, int | float) and best > 0:
            peaks[key] = float(best)
    return peaks


def cached_bandwidth(
    fingerprint: str, *, torch_version: str | None = None, threads: int | None = None
) -> float | None:
    """The measured memory bandwidth of this hardware in GB/s (the triad's best pass), under
    the same cache rules as cached_peaks; None when none is cached."""
    data = read_cached(fingerprint, torch_version=torch_version, threads=threads) or {}
    entry = data.get("bandwidth")
    best = entry.get("best_gbps") if isinstance(entry, dict) and entry.get("ok") else None
    return float(best) if isinstance(best, int | float) and best > 0 else None


def cached_peak(
    fingerprint: str,
    dtype_key: str,
    *,
    torch_version: str | None = None,
    threads: int | None = None,
) -> float | None:
    """One key of cached_peaks; dtype names such as "bfloat16" are accepted too."""
    peaks = cached_peaks(fingerprint, torch_version=torch_version, threads=threads)
    return peaks.get(_ALIASES.get(dtype_key, dtype_key))


def forget_measured(fingerprint: str, peak_key: str, reason: str) -> bool:
    """Drop one cached peak (e.g. a training cell reached more than it: it was measured on a
    busy machine, or on another path than the cell's step), so cached_peaks leaves it out and
    `detect --measure` measures it again.
    The figures stay in the file, marked "forgotten" with the reason. True when a peak was
    dropped; never raises (no cache, a bad fingerprint, a read-only disk: False)."""
    key = _ALIASES.get(peak_key, peak_key)
    try:
        data = _read_file(fingerprint)
        entry = ((data or {}).get("dtypes") or {}).get(key)
        if not isinstance(entry, dict) or not entry.get("ok") or entry.get("forgotten"):
            return False
        entry["forgotten"] = reason
        entry["forgotten_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        write_cache(fingerprint, data)
    except (OSError, ValueError):
        return False
    return True


def write_cache(fingerprint: str, result: dict) -> Path:
    """Store a measurement atomically; returns the file."""
    data = {**result, "cache_schema_version": CACHE_SCHEMA_VERSION, "fingerprint": fingerprint}
    return write_json_atomically(cache_path(fingerprint), data)


def write_json_atomically(path: Path, data: dict) -> Path:
    """Write `data` as JSON through a temporary file in the same directory and os.replace,
    so that a reader never sees half a file; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def busy_reason(contention: Any) -> str | None:
    """Why a measurement must not be cached, from its contention window (the child's
    "contention"): "not cached: the machine was busy (...); re-run on a quiet machine", or
    None when the window was quiet (or not read)."""
    if not isinstance(contention, dict) or not contention.get("contended"):
        return None
    why = contention.get("why")
    return (
        f"not cached: the machine was busy ({'; '.join(why or ['contended'])}); "
        "re-run on a quiet machine"
    )


def child_env(command: list[str], device: str, threads: int | None) -> dict[str, str]:
    """The environment a measuring child runs in (CUDA in PCI order); on a CPU also its
    thread count, `threads` or default_threads(), added to `command` as --threads and set as
    OMP_NUM_THREADS (where the environment does not set it already)."""
    env = in_pci_order(os.environ)
    if device.partition(":")[0] == "cpu":
        threads = threads or default_threads()
        command += ["--threads", str(threads)]
        env.setdefault("OMP_NUM_THREADS", str(threads))
    return env


def run_measure_child(
    device: str,
    *,
    sizes: list[int] | tuple[int, ...] | None = None,
    dtypes: list[str] | tuple[str, ...] = PEAK_KEYS,
    budget_s: float | None = None,
    max_iters: int | None = None,
    min_iters: int | None = None,
    warmup: int | None = None,
    threads: int | None = None,
    bandwidth_mb: float | None = None,
    timeout: float = DEFAULT_MEASURE_TIMEOUT_S,
) -> dict[str, Any]:
    """Measure in a child process and return its answer; failures come back as
    {"ok": False, "error": ...}, never raised. On a CPU the child runs `threads` intra-op
    threads (default_threads() when None); on a GPU torch's default. `bandwidth_mb`: the
    size of each bandwidth array (None: the device's default; 0: no bandwidth)."""
    # Quick runs (tests, a first look): MPBENCH_MEASURE_SIZES="256,512", MPBENCH_MEASURE_BUDGET.
    if sizes is None and os.environ.get("MPBENCH_MEASURE_SIZES"):
        sizes = [int(n) for n in os.environ["MPBENCH_MEASURE_SIZES"].split(",") if n.strip()]
    if budget_s is None and os.environ.get("MPBENCH_MEASURE_BUDGET"):
        budget_s = float(os.environ["MPBENCH_MEASURE_BUDGET"])
    if bandwidth_mb is None and os.environ.get("MPBENCH_MEASURE_BANDWIDTH_MB"):
        bandwidth_mb = float(os.environ["MPBENCH_MEASURE_BANDWIDTH_MB"])
    command = [sys.executable, "-m", "mpbench.detect.measure_child", "--device", device]
    command += ["--dtypes", ",".join(dtypes)]
    if sizes:
        command += ["--sizes", ",".join(str(n) for n in sizes)]
    for option, value in (
        ("--budget", budget_s),
        ("--max-iters", max_iters),
        ("--min-iters", min_iters),
        ("--warmup", warmup),
        ("--bandwidth-mb", bandwidth_mb),
    ):
        if value is not None:
            command += [option, str(value)]
    answer = run_child(command, MEASURE_MARKER, timeout, child_env(command, device, threads))
    if answer.result is None:
        return {"ok": False, "device": device, "error": f"measurement {answer.error}"}
    result = answer.result
    result.setdefault("device", device)
    result["wall_seconds"] = answer.seconds
    return result


def measure_and_cache(device: str, fingerprint: str, **options: Any) -> dict:
    """Measure `device` ("cpu", "cuda", "cuda:N", "mps") in a child process and cache the
    result under `fingerprint` when anything was measured and the machine was quiet
    meanwhile. Returns the result (see docs/detect.md); a failure is returned with "ok":
    false and "error", not raised; a contended measurement with "contended": true and
    "not_cached" saying why. `options` go to run_measure_child (sizes, dtypes, budget_s,
    max_iters, threads, timeout, ...)."""
    cache_path(fingerprint)  # a bad fingerprint is the caller's bug: say so before measuring
    result = run_measure_child(device, **options)
    result.update(
        fingerprint=fingerprint,
        mpbench_version=__version__,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    result["cache_key"] = cache_key(
        device, installed_torch_version() or result.get("torch_version"), result.get("threads")
    )
    busy = busy_reason(result.get("contention"))
    result["contended"] = busy is not None
    result["not_cached"] = None
    bandwidth = result.get("bandwidth")
    measured = any(
        isinstance(d, dict) and d.get("ok") for d in (result.get("dtypes") or {}).values()
    ) or (isinstance(bandwidth, dict) and bool(bandwidth.get("ok")))
    if result.get("ok") and measured and busy:
        result["not_cached"] = busy
        result["cache_file"] = None
    elif result.get("ok") and measured:
        result["cache_file"] = str(write_cache(fingerprint, result))
    else:
        result.setdefault("cache_file", None)
    return result


# --- `mpbench detect --measure`: which device, and the report's view of the result ---

_DEVICE = re.compile(r"(cpu|mps|cuda)(:(\d+))?")


def resolve_measure_device(requested: str, report) -> str:
    """`auto` -> the first CUDA GPU, else Apple MPS, else the CPU; InvalidInput for a device
    that is malformed or that this machine certainly does not have."""
    from mpbench.errors import InvalidInput, unknown_choice

    text = requested.strip().lower()
    choices = ["auto", "cpu", "cuda", "cuda:N", "mps"]
    if text == "auto":
        if report.gpus or report.device("cuda") is not None:
            return "cuda:0"
        if report.device("mps") is not None or (
            sys.platform == "darwin" and platform.machine() == "arm64"
        ):
            return "mps"
        return "cpu"
    match = _DEVICE.fullmatch(text)
    if match is None or (match.group(1) != "cuda" and match.group(2)):
        raise unknown_choice("device", requested, choices)
    if match.group(1) != "cuda":
        return text
    index = int(match.group(3) or 0)
    mapping = report.cuda_mapping()
    if report.gpus and mapping.known and mapping.get(index) is None:
        raise InvalidInput(
            f"no cuda:{index} here: CUDA sees {len(mapping.gpus)} NVIDIA GPU(s)"
            + (f" ({mapping.note})" if mapping.note else "")
        )
    return f"cuda:{index}"


def _bare_uuid(uuid: str | None) -> str | None:
    # NVML: "GPU-<uuid>" / "MIG-<uuid>"; torch's str(props.uuid): the bare 8-4-4-4-12 form.
    if not uuid:
        return None
    return uuid.removeprefix("GPU-").removeprefix("MIG-").lower()


def attach_measurement(report, device: str, **options: Any) -> dict:
    """Measure `device` for `detect --measure`, cache it under the device's hardware
    fingerprint, and attach the result (with the datasheet peaks beside it) to the report."""
    kind, _, number = device.partition(":")
    index = int(number) if number else None
    fingerprint = report.hardware_fingerprint(kind, index)
    result = measure_and_cache(device, fingerprint, **options)
    entry = report.device(kind, index)
    peaks: dict[str, float | None] = {}
    if kind == "cuda":
        gpu = report.gpu_for_cuda_index(index or 0)
        seen = _bare_uuid(result.get("uuid"))
        if gpu is not None and seen and _bare_uuid(gpu.uuid) and seen != _bare_uuid(gpu.uuid):
            result["warning"] = (
                f"torch's {device} has UUID {result.get('uuid')}, but NVML's mapping says "
                f"{gpu.uuid} ({gpu.name}): datasheet peaks not shown"
            )
            report.notes.append(result["warning"])
            gpu = None
        peaks = dict(gpu.peak_tflops) if gpu is not None else {}
    result.setdefault("device_name", entry.name if entry else device)
    for key, measured in (result.get("dtypes") or {}).items():
        if isinstance(measured, dict):
            measured["datasheet_tflops"] = peaks.get(key)
    if not result.get("ok"):
        report.notes.append(f"--measure on {device} failed: {result.get('error')}")
    elif result.get("not_cached"):
        report.notes.append(f"--measure on {device}: {result['not_cached']}")
    report.measured = result
    return result
