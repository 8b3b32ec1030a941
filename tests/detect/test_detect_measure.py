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

from mpbench.detect import collect
from mpbench.detect.measure import (
    CACHE_SCHEMA_VERSION,
    cache_path,
    cached_peak,
    measure_and_cache,
    read_cached,
    write_cache,
)


def torch_installed() -> bool:
    try:
        metadata.version("torch")
    except metadata.PackageNotFoundError:
        return False
    return True


needs_torch = pytest.mark.skipif(not torch_installed(), reason="torch not installed")
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
    assert result["device"] == "cpu" and result["threads"] >= 1
    assert result["torch_version"] == metadata.version("torch")
    assert set(result["dtypes"]) == {"fp32", "tf32", "fp16", "bf16"}
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
    assert result["cache_file"] == str(path) and path.exists()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left
    stored = json.loads(path.read_text())
    assert stored["cache_schema_version"] == CACHE_SCHEMA_VERSION
    assert stored["fingerprint"] == fingerprint
    assert cached_peak(fingerprint, "fp32") == fp32["best_tflops"]
    assert cached_peak(fingerprint, "float32") == fp32["best_tflops"]
    assert cached_peak(fingerprint, "tf32") is None
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
    first = write_cache(
        fingerprint, {"ok": True, "dtypes": {"fp32": {"ok": True, "best_tflops": 1.5}}}
    )
    second = write_cache(
        fingerprint, {"ok": True, "dtypes": {"fp32": {"ok": True, "best_tflops": 2.5}}}
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
QUICK = {"MPBENCH_MEASURE_SIZES": "32,64", "MPBENCH_MEASURE_BUDGET": "0.5"}


@needs_torch
def test_cli_measure_json(cache, run_mpbench):
    done = run_mpbench("detect", "--measure", "--json", env={**QUICK, "MPBENCH_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    measured = data["measured"]
    assert measured["ok"] and measured["device"] == "cpu"
    cpu = next(d for d in data["devices"] if d["kind"] == "cpu")
    assert measured["fingerprint"] == cpu["fingerprint"]
    assert measured["device_name"] == data["cpu"]["model"]
    fp32, bf16 = measured["dtypes"]["fp32"], measured["dtypes"]["bf16"]
    assert fp32["best_tflops"] > 0 and fp32["datasheet_tflops"] is None  # no CPU datasheet
    assert json.loads((cache / "peaks" / f"{cpu['fingerprint']}.json").read_text())["ok"]
    # Printed, not asserted: timings on a shared machine are noise-prone (DESIGN §9).
    print(f"\nfloat32 {fp32['best_tflops']:.4g} TFLOP/s, bfloat16 {bf16.get('best_tflops')}")


@needs_torch
def test_cli_measure_table(cache, run_mpbench):
    done = run_mpbench("detect", "--measure", "--device", "cpu", env={**QUICK, "COLUMNS": "200"})
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
def test_cli_bad_device_is_exit_2(args, words, run_mpbench):
    done = run_mpbench("detect", *args)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("mpbench: error:") and words in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_cuda_index_this_machine_lacks_is_exit_2(tmp_path, fake_pynvml, run_mpbench):
    import shutil

    shutil.copy(fake_pynvml.SOURCE, tmp_path / "pynvml.py")
    env = {
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "PYNVML_FAKE_GPUS": "A100",
    }
    done = run_mpbench("detect", "--measure", "--device", "cuda:3", env=env)
    assert done.returncode == 2
    assert "no cuda:3 here: CUDA sees 1 NVIDIA GPU(s)" in done.stderr


@needs_torch
def test_cli_measure_failure_is_exit_1(cache, run_mpbench):
    # no NVML here and (on this CPU machine) no CUDA in torch: the child says why
    skip_if_torch_sees_cuda()
    done = run_mpbench("detect", "--measure", "--device", "cuda", "--json", env=QUICK)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["measured"]["ok"] is False
    assert any(n.startswith("--measure on cuda:0 failed") for n in data["notes"])
