"""`detect --measure`: real torch.mm timings in a child process (tiny sizes), and the cache.

No timing is asserted (DESIGN §9): only that numbers come back, are consistent with each
other, and land in the cache. The bf16-vs-float32 comparison is printed, not checked.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from importlib import metadata

import pytest
from cli import run_mpbench
from frameworks import needs_torch

from mpbench.detect import collect, measure
from mpbench.detect.measure import (
    CACHE_SCHEMA_VERSION,
    cache_key,
    cache_path,
    cached_peak,
    cached_peaks,
    default_threads,
    forget_measured,
    measure_and_cache,
    read_cached,
    stale_reason,
    write_cache,
)

TINY = {"sizes": (32, 64), "budget_s": 0.05, "max_iters": 5, "min_iters": 2, "warmup": 1}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test gets its own mpbench cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MPBENCH_CACHE", str(root))
    return root


@needs_torch
def test_measure_on_this_cpu_and_cache(cache, no_gpu):
    report = collect(environ={})
    fingerprint = report.hardware_fingerprint("cpu")
    result = measure_and_cache("cpu", fingerprint, **TINY)
    assert result["ok"], result
    assert result["device"] == "cpu" and result["threads"] == default_threads()
    # The child reports torch.__version__ (it may carry a local tag such as +cu130 that the
    # package metadata lacks); the cache is keyed by the installed package's version.
    assert result["torch_version"].split("+")[0] == metadata.version("torch").split("+")[0]
    assert result["cache_key"] == {
        "torch_version": metadata.version("torch"),
        "threads": default_threads(),
    }
    contention = result["contention"]
    # A tiny measurement may end within one 10 ms CPU-time tick: own_cores can read 0.
    assert contention["wall_s"] > 0 and contention["own_cores"] >= 0 and contention["cpus"] >= 1
    assert set(result["dtypes"]) == {"fp32", "tf32", "fp16", "bf16", "fp8"}
    # no fp8 matrix units on a CPU: skipped with the reason, never timed as an fp8 peak
    assert result["dtypes"]["fp8"]["ok"] is False
    assert "float32 emulation" in result["dtypes"]["fp8"]["skipped"]
    fp32 = result["dtypes"]["fp32"]
    assert fp32["ok"] and fp32["dtype"] == "float32"
    for size in fp32["sizes"]:
        assert size["n"] in (32, 64)
        assert 2 <= size["iterations"] <= 5
        assert 0 < size["best_s"] <= size["median_s"]
        assert size["best_tflops"] == pytest.approx(2 * size["n"] ** 3 / size["best_s"] / 1e12)
    assert fp32["best_tflops"] == max(s["best_tflops"] for s in fp32["sizes"])
    assert result["dtypes"]["tf32"]["ok"] is False
    assert "NVIDIA" in result["dtypes"]["tf32"]["skipped"]
    for key in ("fp16", "bf16"):  # slow on most CPUs, but it runs or says why not
        entry = result["dtypes"][key]
        assert entry["ok"] or entry.get("error") or entry.get("skipped"), entry

    path = cache / "peaks" / f"{fingerprint}.json"
    if result["contended"]:  # a shared test machine: nothing cached, and the output says why
        assert result["cache_file"] is None and not path.exists()
        assert result["not_cached"].startswith("not cached: the machine was busy (")
        pytest.skip(f"the machine was busy: {result['not_cached']}")
    assert result["not_cached"] is None
    assert result["cache_file"] == str(path) and path.exists()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    stored = json.loads(path.read_text())
    assert stored["cache_schema_version"] == CACHE_SCHEMA_VERSION
    assert stored["fingerprint"] == fingerprint
    assert cached_peak(fingerprint, "fp32") == fp32["best_tflops"]
    assert cached_peak(fingerprint, "float32") == fp32["best_tflops"]
    assert cached_peak(fingerprint, "tf32") is None
    assert cached_peak(fingerprint, "fp8") is None
    bf16 = result["dtypes"]["bf16"]
    assert cached_peak(fingerprint, "bf16") == (bf16["best_tflops"] if bf16["ok"] else None)


def test_cached_peak_without_a_measurement(cache):
    assert cached_peak("0123456789abcdef", "bf16") is None
    assert read_cached("0123456789abcdef") is None
    # not a token that can name a file
    with pytest.raises(ValueError):
        cache_path("../../etc/passwd")
    assert cached_peak("../x", "fp32") is None


def test_cache_ignores_damaged_and_foreign_files(cache):
    fingerprint = "00000000deadbeef"
    path = cache_path(fingerprint)
    path.parent.mkdir(parents=True)
    path.write_text("{ not json")
    assert cached_peak(fingerprint, "fp32") is None
    path.write_text(json.dumps({"cache_schema_version": 99, "dtypes": {}}))
    assert cached_peak(fingerprint, "fp32") is None
    entry = {"ok": False, "best_tflops": 1.0}
    write_cache(fingerprint, {"ok": True, "dtypes": {"fp32": entry, "bf16": {"ok": True}}})
    assert cached_peak(fingerprint, "fp32") is None  # a failed dtype has no peak
    assert cached_peak(fingerprint, "bf16") is None  # nor one without a number


def test_write_cache_replaces_atomically(cache):
    fingerprint = "feedfacecafe0001"
    key = {"device": "cpu", "cache_key": cache_key("cpu")}
    first = write_cache(
        fingerprint, {"ok": True, **key, "dtypes": {"fp32": {"ok": True, "best_tflops": 1.5}}}
    )
    second = write_cache(
        fingerprint, {"ok": True, **key, "dtypes": {"fp32": {"ok": True, "best_tflops": 2.5}}}
    )
    assert first == second
    assert cached_peak(fingerprint, "fp32") == 2.5
    assert sorted(p.name for p in first.parent.iterdir()) == [f"{fingerprint}.json"]


def test_xdg_cache_home_is_the_default(tmp_path, monkeypatch):
    monkeypatch.delenv("MPBENCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path("abcdef0123456789") == tmp_path / "xdg/mpbench/peaks/abcdef0123456789.json"


@functools.cache
def _torch_sees_cuda() -> bool:
    """Asked in a child once per session: this process must not import torch."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return probe.stdout.strip() != "False"


def skip_if_torch_sees_cuda() -> None:
    if _torch_sees_cuda():
        pytest.skip("torch sees a CUDA device here")


@needs_torch
def test_cuda_on_a_machine_torch_sees_no_gpu_on(cache):
    skip_if_torch_sees_cuda()
    result = measure_and_cache("cuda:0", "0123456789abcdef", **TINY)
    assert result["ok"] is False and "sees no CUDA device" in result["error"]
    assert result["cache_file"] is None
    assert read_cached("0123456789abcdef") is None


def test_measure_module_imports_no_framework():
    code = (
        "import sys\n"
        "from mpbench.detect.measure import cached_peak, measure_and_cache\n"
        "print([m for m in ('torch', 'tensorflow', 'pandas') if m in sys.modules])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_child_usage_errors():
    for args in (["--device", "cpu", "--dtypes", "int8"], ["--device", "cpu", "--sizes", "0"], []):
        done = subprocess.run(
            [sys.executable, "-m", "mpbench.detect.measure_child", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, args
        assert "usage" in done.stderr and "Traceback" not in done.stderr


# --- the CLI ---

# A budget that a loaded 2-core machine still meets: a 32x32 fp32 multiply on two OpenMP
# threads waits for the busy core (about 25 ms seen here under load, microseconds when idle).
# The peaks alone: the training steps --measure also times have tests of their own
# (test_detect_steps.py), and a TensorFlow child would add seconds here.
QUICK = {
    "MPBENCH_MEASURE_SIZES": "32,64",
    "MPBENCH_MEASURE_BUDGET": "0.5",
    "MPBENCH_MEASURE_STEP_FRAMEWORKS": "none",
}


@needs_torch
def test_cli_measure_json(cache):
    env = {**QUICK, "MPBENCH_CACHE": str(cache)}
    done = run_mpbench("detect", "--measure", "--json", "--device", "cpu", env=env, fork=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    measured = data["measured"]
    assert measured["ok"] and measured["device"] == "cpu"
    cpu = next(d for d in data["devices"] if d["kind"] == "cpu")
    assert measured["fingerprint"] == cpu["fingerprint"]
    assert measured["device_name"] == data["cpu"]["model"]
    fp32, bf16 = measured["dtypes"]["fp32"], measured["dtypes"]["bf16"]
    assert fp32["best_tflops"] > 0 and fp32["datasheet_tflops"] is None  # no CPU datasheet
    path = cache / "peaks" / f"{cpu['fingerprint']}.json"
    if measured["contended"]:  # shown, marked, not cached
        assert not path.exists() and measured["cache_file"] is None
        assert f"--measure on cpu: {measured['not_cached']}" in data["notes"]
    else:
        assert json.loads(path.read_text())["ok"] and measured["not_cached"] is None
    # Printed, not asserted: timings on a shared machine are noise-prone (DESIGN §9).
    print(f"\nfloat32 {fp32['best_tflops']:.4g} TFLOP/s, bfloat16 {bf16.get('best_tflops')}")


@needs_torch
def test_cli_measure_table(cache):
    done = run_mpbench(
        "detect", "--measure", "--device", "cpu", env={**QUICK, "COLUMNS": "200"}, fork=False
    )
    assert done.returncode == 0, done.stderr
    assert "Measured matmul TFLOP/s on cpu" in done.stdout
    row = next(line for line in done.stdout.splitlines() if "fp32: float32" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert float(cells[1]) > 0 and cells[3] in ("32", "64") and cells[4] == "-"
    assert "Measuring matmul TFLOP/s on cpu" in done.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--device", "cpu"], "--device only applies with --measure"),
        (["--measure", "--device", "tpu"], "unknown device 'tpu'"),
        (["--measure", "--device", "cpu:1"], "unknown device 'cpu:1'"),
    ],
)
def test_cli_bad_device_is_exit_2(args, words):
    done = run_mpbench("detect", *args, fork=False)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("mpbench: error:") and words in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_cuda_index_this_machine_lacks_is_exit_2(tmp_path, fake_pynvml):
    import shutil

    shutil.copy(fake_pynvml.SOURCE, tmp_path / "pynvml.py")
    env = {
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "PYNVML_FAKE_GPUS": "A100",
    }
    done = run_mpbench("detect", "--measure", "--device", "cuda:3", env=env, fork=False)
    assert done.returncode == 2
    assert "no cuda:3 here: CUDA sees 1 NVIDIA GPU(s)" in done.stderr


@needs_torch
def test_cli_measure_failure_is_exit_1(cache):
    # no NVML here and (on this CPU machine) no CUDA in torch: the child says why
    skip_if_torch_sees_cuda()
    done = run_mpbench("detect", "--measure", "--device", "cuda", "--json", env=QUICK, fork=False)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["measured"]["ok"] is False
    assert any(n.startswith("--measure on cuda:0 failed") for n in data["notes"])


# --- cache rules: contention, the cache key, stale files, forgetting a peak ---

FINGERPRINT = "c0ffee00c0ffee00"


def reading(other: float, cpus: int = 2) -> dict:
    """A contention window as the child reports it (own = the child's torch threads)."""
    from mpbench.results.contention import ContentionReading, judge

    own = float(cpus)
    stats = ContentionReading(
        wall_s=1.0, cpus=cpus, busy_cores=own + other, own_cores=own, other_cores=other
    )
    return judge(stats).to_dict()


def fake_child(monkeypatch, *, other: float = 0.02, torch="2.13.0+cpu", threads=None, peak=0.5):
    """measure_and_cache's child replaced: what it would answer, with this contention."""
    calls = []

    def run(device, **options):
        calls.append((device, options))
        return {
            "ok": True,
            "device": device,
            "torch_version": torch,
            "threads": threads or options.get("threads") or default_threads(),
            "dtypes": {
                "fp32": {"dtype": "float32", "ok": True, "best_tflops": peak, "sizes": []},
                "bf16": {"dtype": "bfloat16", "ok": True, "best_tflops": peak / 4, "sizes": []},
            },
            "contention": reading(other),
        }

    monkeypatch.setattr(measure, "run_measure_child", run)
    monkeypatch.setattr(measure, "installed_torch_version", lambda: torch)
    return calls


def test_a_quiet_measurement_is_cached_with_its_key(cache, monkeypatch):
    fake_child(monkeypatch, other=0.02)
    result = measure_and_cache("cpu", FINGERPRINT)
    assert result["contended"] is False and result["not_cached"] is None
    assert result["cache_key"] == {"torch_version": "2.13.0+cpu", "threads": default_threads()}
    stored = json.loads(cache_path(FINGERPRINT).read_text())
    assert stored["cache_key"] == result["cache_key"]
    assert stored["contention"]["other_cores"] == 0.02
    assert cached_peaks(FINGERPRINT) == {"fp32": 0.5, "bf16": 0.125}


def test_a_contended_measurement_is_shown_but_not_cached(cache, monkeypatch):
    fake_child(monkeypatch, other=0.02, peak=0.5)
    measure_and_cache("cpu", FINGERPRINT)  # a quiet one first: it must survive
    fake_child(monkeypatch, other=1.0, peak=0.2)
    result = measure_and_cache("cpu", FINGERPRINT)
    assert result["ok"] and result["contended"] is True
    assert result["not_cached"] == (
        "not cached: the machine was busy (other processes used 1.00 of 2 cores); "
        "re-run on a quiet machine"
    )
    assert result["cache_file"] is None
    assert result["dtypes"]["fp32"]["best_tflops"] == 0.2  # the figures are still there
    assert cached_peaks(FINGERPRINT)["fp32"] == 0.5  # the quiet measurement stays


def test_a_contended_measurement_is_marked_in_the_report(cache, monkeypatch, no_gpu):
    from rich.console import Console

    from mpbench.detect.measure import attach_measurement
    from mpbench.detect.render import print_report

    fake_child(monkeypatch, other=1.0)
    report = collect(environ={})
    attach_measurement(report, "cpu")
    assert report.to_dict()["measured"]["contended"] is True
    assert any(
        n.startswith("--measure on cpu: not cached: the machine was busy") for n in report.notes
    )
    console = Console(width=200, record=True)
    print_report(report, console)
    text = console.export_text()
    assert "CONTENDED: figures low" in text
    assert "not cached: the machine was busy (other processes used 1.00 of 2 cores)" in text


def test_another_torch_or_thread_count_does_not_reuse_the_cache(cache, monkeypatch):
    fake_child(monkeypatch, torch="2.13.0+cpu", threads=2)
    measure_and_cache("cpu", FINGERPRINT, threads=2)
    assert cached_peaks(FINGERPRINT, threads=2)["fp32"] == 0.5
    assert cached_peaks(FINGERPRINT, threads=1) == {}
    assert cached_peaks(FINGERPRINT, torch_version="2.12.0+cpu", threads=2) == {}
    data = json.loads(cache_path(FINGERPRINT).read_text())
    assert (
        stale_reason(data, "2.12.0+cpu", 2) == "measured with torch 2.13.0+cpu, this is 2.12.0+cpu"
    )
    assert stale_reason(data, None, 4) == "measured with 2 threads, not 4"
    # The default: the installed torch, OMP_NUM_THREADS, else the cores this process may use.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1 and cached_peaks(FINGERPRINT) == {}
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert cached_peaks(FINGERPRINT)["fp32"] == 0.5


def test_a_gpu_peak_does_not_depend_on_cpu_threads(cache, monkeypatch):
    fake_child(monkeypatch, torch="2.13.0+cu128", threads=16)
    result = measure_and_cache("cuda:0", FINGERPRINT)
    assert result["cache_key"] == {"torch_version": "2.13.0+cu128", "threads": None}
    assert cached_peaks(FINGERPRINT, threads=3)["fp32"] == 0.5
    assert cached_peaks(FINGERPRINT, torch_version="2.12.0+cu126") == {}


def test_an_old_cache_file_is_stale_and_measured_again(cache, monkeypatch):
    # What mpbench wrote before the cache key (schema 1): no torch version, no thread count.
    path = cache_path(FINGERPRINT)
    path.parent.mkdir(parents=True)
    old = {
        "ok": True, "device": "cpu", "torch_version": "2.13.0+cpu", "threads": 2,
        "dtypes": {"fp32": {"ok": True, "best_tflops": 9.9}},
        "cache_schema_version": 1, "fingerprint": FINGERPRINT,
    }  # fmt: skip
    path.write_text(json.dumps(old))
    assert read_cached(FINGERPRINT) is None and cached_peaks(FINGERPRINT) == {}
    # The current schema without a key (written by hand, or half-migrated): stale too.
    path.write_text(json.dumps({**old, "cache_schema_version": CACHE_SCHEMA_VERSION}))
    assert cached_peaks(FINGERPRINT) == {}
    assert "older mpbench" in stale_reason(json.loads(path.read_text()))
    fake_child(monkeypatch, peak=0.5)  # run --measure-peak finds no peak, so it measures
    measure_and_cache("cpu", FINGERPRINT)
    assert cached_peaks(FINGERPRINT)["fp32"] == 0.5


def test_forget_measured_drops_one_peak(cache, monkeypatch):
    fake_child(monkeypatch, peak=0.5)
    measure_and_cache("cpu", FINGERPRINT)
    reason = "torch/mnist_dense/float32/r0 reached 0.61 TFLOP/s, 122 % of it"
    assert forget_measured(FINGERPRINT, "float32", reason) is True
    assert cached_peaks(FINGERPRINT) == {"bf16": 0.125}
    entry = json.loads(cache_path(FINGERPRINT).read_text())["dtypes"]["fp32"]
    assert entry["forgotten"] == reason and entry["best_tflops"] == 0.5 and entry["forgotten_at"]
    assert forget_measured(FINGERPRINT, "fp32", reason) is False  # already gone
    assert forget_measured(FINGERPRINT, "tf32", reason) is False  # never measured
    assert forget_measured("0000000000000000", "fp32", reason) is False  # no cache
    assert forget_measured("../etc/passwd", "fp32", reason) is False  # never raises
    measure_and_cache("cpu", FINGERPRINT)  # the next measurement brings it back
    assert cached_peaks(FINGERPRINT)["fp32"] == 0.5


def _hog() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@needs_torch
def test_a_measurement_beside_cpu_hogs_is_not_cached(cache, no_gpu):
    """Two busy-looping processes on a 2-core machine (more cores: one per core) take the
    CPU from the child's torch threads: the real measurement is contended and not cached."""
    cpus = os.cpu_count() or 2
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) < cpus:
        pytest.skip("a cpuset narrower than the machine: hogs in it cannot fill the machine")
    report = collect(environ={})
    fingerprint = report.hardware_fingerprint("cpu")
    hogs = [_hog() for _ in range(max(2, cpus))]
    try:
        # A window of a few hundred ms: /proc/stat counts in 10 ms ticks, so a 12 ms window
        # (two tiny sizes stopped by max_iters) judged the machine from one or two ticks.
        result = measure_and_cache(
            "cpu",
            fingerprint,
            sizes=(256,),
            dtypes=("fp32",),
            budget_s=0.5,
            min_iters=2,
            max_iters=100_000,
        )
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
    assert result["ok"] and result["dtypes"]["fp32"]["ok"], result
    assert result["contention"]["wall_s"] >= 0.3, result["contention"]
    assert result["contended"] is True, result["contention"]
    assert result["contention"]["other_cores"] > 0.25
    assert result["not_cached"].startswith("not cached: the machine was busy (other processes used")
    assert result["cache_file"] is None and read_cached(fingerprint) is None
