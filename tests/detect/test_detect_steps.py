"""`detect --measure`'s training steps per framework and policy (issue 54): the timing loop on
fake steps, the cache and its rules, `detect` rating from it, and one real child per
framework at a tiny size. No timing is asserted (DESIGN §9): only that ratios come back and
are consistent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from frameworks import needs_tensorflow, needs_torch
from rich.console import Console

from mpbench.detect import collect, steps
from mpbench.detect.render import print_report
from mpbench.detect.step_child import (
    ACCELERATOR_UNITS,
    BATCH,
    CPU_UNITS,
    INPUTS,
    STOP_RATIO,
    Limits,
    time_steps,
)
from mpbench.detect.steps import (
    cache_key,
    cached_steps,
    measure_steps,
    read_cached,
    run_step_child,
    stale_reason,
    steps_path,
)
from mpbench.policies import MeasuredStep, Rating

CPUINFO = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"
SPR = CPUINFO / "intel_xeon_8481c_sapphire_rapids.txt"
FINGERPRINT = "5eb5eb5eb5eb5eb5"
VERSIONS = {
    "torch": {"torch": "2.13.0+cpu"},
    "tensorflow": {"tensorflow": "2.21.0", "keras": "3.15.1"},
}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test its own mpbench cache, the cells' step shape and two threads."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MPBENCH_CACHE", str(root))
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    for name in (steps.BATCH_ENV, steps.BUDGET_ENV, steps.FRAMEWORKS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(steps, "installed_versions", lambda f: VERSIONS[f])
    monkeypatch.setattr(steps, "installed_step_frameworks", lambda: ["torch", "tensorflow"])
    return root


# --- the timing loop, on steps that take what a fake clock says --------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float, calls: list[str], name: str):
        def run() -> None:
            calls.append(name)
            self.now += seconds

        return run


def test_policies_are_timed_interleaved_and_a_hopeless_one_stops_after_one_step():
    clock, calls = FakeClock(), []
    fake = {
        "float32": clock.step(0.010, calls, "fp32"),
        "mixed_bfloat16": clock.step(0.008, calls, "bf16"),
        "mixed_float16": clock.step(0.010 * (STOP_RATIO + 30), calls, "fp16"),
    }
    found = time_steps(fake, Limits(budget=0.05, warmup=2, min_steps=3, max_steps=8), clock)
    assert found["mixed_bfloat16"]["speedup"] == pytest.approx(1.25)
    assert found["float32"]["speedup"] == 1.0
    fp16 = found["mixed_float16"]
    assert fp16["stopped_early"] is True and fp16["steps"] == 1
    assert fp16["speedup"] == pytest.approx(1 / (STOP_RATIO + 30))
    assert calls.count("fp16") == 2  # one untimed call, one checked step: no more
    rounds = calls[calls.index("fp16") + 2 :]
    assert rounds[:4] == ["fp32", "bf16", "fp32", "bf16"]  # interleaved
    assert 3 <= found["float32"]["steps"] == found["mixed_bfloat16"]["steps"] <= 8


def test_a_policy_that_fails_is_its_own_answer():
    clock, calls = FakeClock(), []

    def broken() -> None:
        raise RuntimeError("fp16 is not implemented here")

    fake = {"float32": clock.step(0.01, calls, "fp32"), "mixed_float16": broken}
    found = time_steps(fake, Limits(budget=0.01, min_steps=2, max_steps=4), clock)
    assert found["mixed_float16"] == {"error": "RuntimeError: fp16 is not implemented here"}
    assert found["float32"]["steps"] >= 2


def test_the_step_is_mnist_dense_as_the_cells_run_it():
    from mpbench.workloads import get_workload

    dense = get_workload("mnist_dense")
    assert (dense.input_shape, dense.num_classes) == ((INPUTS,), 10)
    assert (dense.units_cpu, dense.units_accelerator, dense.batch_size) == (
        CPU_UNITS,
        ACCELERATOR_UNITS,
        BATCH,
    )
    assert dense.optimizer.name == "rmsprop"
    assert dense.optimizer.params == {"rho": 0.9, "epsilon": 1e-7}


# --- the cache -----------------------------------------------------------------------------


def answer(framework: str, other: float = 0.02, bf16: float = 1.4, fp16: float = 0.004) -> dict:
    """What a step child answers, with this much CPU taken by other processes."""
    from mpbench.results.contention import ContentionReading, judge

    reading = ContentionReading(
        wall_s=1.0, cpus=2, busy_cores=2 + other, own_cores=2.0, other_cores=other
    )
    return {
        "ok": True,
        "framework": framework,
        "framework_version": VERSIONS[framework][framework],
        "threads": 2,
        "policies": {
            "float32": {"steps": 20, "median_s": 0.02, "speedup": 1.0},
            "mixed_bfloat16": {"steps": 20, "median_s": 0.02 / bf16, "speedup": bf16},
            "mixed_float16": {"steps": 1, "speedup": fp16, "stopped_early": True},
        },
        "contention": judge(reading).to_dict(),
    }


def fake_children(monkeypatch, **answers: dict) -> list[str]:
    ran: list[str] = []

    def run(framework, device, **options):
        ran.append(framework)
        return dict(answers[framework])

    monkeypatch.setattr(steps, "run_step_child", run)
    return ran


def test_a_quiet_measurement_is_cached_and_read_back(monkeypatch, cache):
    fake_children(monkeypatch, torch=answer("torch"), tensorflow=answer("tensorflow", bf16=1.6))
    result = measure_steps("cpu", FINGERPRINT)
    assert result["cache_file"] == str(cache / "steps" / f"{FINGERPRINT}.json")
    stored = json.loads(steps_path(FINGERPRINT).read_text())
    assert set(stored["frameworks"]) == {"torch", "tensorflow"}
    key = stored["frameworks"]["tensorflow"]["cache_key"]
    assert key == {"versions": VERSIONS["tensorflow"], "threads": 2, "units": 64, "batch": 8192}
    found = {(s.framework, s.policy): s for s in cached_steps(FINGERPRINT, "cpu")}
    assert set(found) == {(f, p) for f in VERSIONS for p in ("mixed_bfloat16", "mixed_float16")}
    assert found[("tensorflow", "mixed_bfloat16")].speedup == 1.6
    assert found[("torch", "mixed_float16")].stopped_early is True
    assert found[("torch", "mixed_float16")].measured_at[:4].isdigit()


def test_another_version_thread_count_or_shape_does_not_reuse_it(monkeypatch):
    fake_children(monkeypatch, torch=answer("torch"), tensorflow=answer("tensorflow"))
    measure_steps("cpu", FINGERPRINT)
    assert set(read_cached(FINGERPRINT, "cpu")) == {"torch", "tensorflow"}
    newer = {"tensorflow": {"tensorflow": "2.22.0", "keras": "3.15.1"}}
    assert set(read_cached(FINGERPRINT, "cpu", versions=newer)) == {"torch"}
    assert read_cached(FINGERPRINT, "cpu", threads=1) == {}
    assert read_cached(FINGERPRINT, "cpu", batch=256) == {}
    entry = json.loads(steps_path(FINGERPRINT).read_text())["frameworks"]["torch"]
    assert stale_reason(entry, "torch", "cpu", threads=4) == "measured with threads 2, not 4"
    # On a GPU the CPU thread count does not matter, the width does.
    assert cache_key("torch", "cuda:0", threads=4)["threads"] is None
    assert cache_key("torch", "cuda:0")["units"] == ACCELERATOR_UNITS


def test_a_contended_measurement_is_shown_but_not_cached(monkeypatch):
    fake_children(monkeypatch, torch=answer("torch", bf16=1.4), tensorflow=answer("tensorflow"))
    measure_steps("cpu", FINGERPRINT)
    fake_children(monkeypatch, torch=answer("torch", other=1.0, bf16=0.5))
    result = measure_steps("cpu", FINGERPRINT, ["torch"])
    torch = result["frameworks"]["torch"]
    assert torch["contended"] is True and result["cache_file"] is None
    assert torch["not_cached"].startswith("not cached: the machine was busy (other processes")
    assert torch["policies"]["mixed_bfloat16"]["speedup"] == 0.5  # shown all the same
    kept = {s.policy: s.speedup for s in cached_steps(FINGERPRINT, "cpu") if s.framework == "torch"}
    assert kept["mixed_bfloat16"] == 1.4  # the quiet one stays
    assert {s.framework for s in cached_steps(FINGERPRINT, "cpu")} == {"torch", "tensorflow"}


def test_a_failed_child_caches_nothing(monkeypatch):
    fake_children(monkeypatch, torch={"ok": False, "error": "step timed out after 600 s"})
    result = measure_steps("cpu", FINGERPRINT, ["torch"])
    assert result["cache_file"] is None and not steps_path(FINGERPRINT).exists()
    assert cached_steps(FINGERPRINT, "cpu") == [] and cached_steps("../x", "cpu") == []


def test_which_frameworks_are_timed_can_be_narrowed(monkeypatch):
    ran = fake_children(monkeypatch, torch=answer("torch"), tensorflow=answer("tensorflow"))
    monkeypatch.setenv(steps.FRAMEWORKS_ENV, "torch")
    measure_steps("cpu", FINGERPRINT)
    monkeypatch.setenv(steps.FRAMEWORKS_ENV, "none")
    assert measure_steps("cpu", FINGERPRINT)["frameworks"] == {}
    assert ran == ["torch"]


# --- detect rates from the cache ----------------------------------------------------------


def spr_report():
    return collect(cpuinfo_path=SPR, environ={})


def cache_for(report, monkeypatch, **answers: dict) -> None:
    fake_children(monkeypatch, **answers)
    measure_steps("cpu", report.hardware_fingerprint("cpu"))


@needs_tensorflow  # detect rates the installed frameworks: both, here
def test_detect_rates_each_framework_from_the_cache(monkeypatch, no_gpu):
    # Measured: Keras fp16 1.3× faster (a contradiction of the rule), torch bf16 slower.
    report = spr_report()
    cache_for(
        report,
        monkeypatch,
        torch=answer("torch", bf16=0.8),
        tensorflow=answer("tensorflow", fp16=1.3),
    )
    entry = spr_report().device("cpu")
    torch, tf = ({r.policy: r for r in entry.framework_ratings[f]} for f in ("torch", "tensorflow"))
    assert tf["mixed_float16"].rating is Rating.FAST and tf["mixed_float16"].source == "measured"
    assert tf["mixed_float16"].reason.startswith("measured 1.30× faster than float32 here (cached ")
    assert tf["mixed_float16"].reason.endswith(", where the rule says slow")
    assert torch["mixed_bfloat16"].rating is Rating.SLOW
    assert torch["float32"].source == "rule"
    assert {s.framework for s in entry.measured_steps} == {"torch", "tensorflow"}
    data = entry.to_dict()
    assert data["framework_ratings"]["tensorflow"][2] == {
        "policy": "mixed_float16",
        "rating": "fast",
        "reason": tf["mixed_float16"].reason,
        "source": "measured",
    }
    assert {"policy", "rating", "reason", "source"} == set(data["ratings"][0])
    assert data["measured_steps"][0]["framework"] in ("torch", "tensorflow")


@needs_tensorflow  # detect rates the installed frameworks: both, here
def test_the_table_shows_each_framework_where_they_differ(no_gpu):
    console = Console(width=80, record=True)
    print_report(spr_report(), console)
    text = console.export_text()
    policies = text[text.index("Precision policies") : text.index("Recommendation")]
    assert "torch: slow" in policies and "tensorflow: slow" in policies
    assert "torch: rule:" in policies and "tensorflow: rule:" in policies
    assert "equally good" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_measured_steps_are_shown_with_detect_measure(monkeypatch, no_gpu):
    report = spr_report()
    fake_children(monkeypatch, torch=answer("torch"), tensorflow=answer("tensorflow", other=1.0))
    steps.attach_steps(report, "cpu")
    assert any(
        "tensorflow's step on cpu: not cached: the machine was busy" in n for n in report.notes
    )
    assert report.to_dict()["measured_steps"]["frameworks"]["torch"]["ok"] is True
    console = Console(width=120, record=True)
    print_report(report, console)
    text = console.export_text()
    assert "Measured training step on cpu" in text
    assert "1.40× faster" in text and "≥ 250× slower" in text


# --- real children, tiny ------------------------------------------------------------------

TINY = {"batch": 128, "budget_s": 0.05}


def _check_real(found: dict, framework: str) -> None:
    assert found["ok"], found
    assert found["framework"] == framework and found["units"] == CPU_UNITS
    assert found["batch"] == 128 and found["threads"] == 1
    policies = found["policies"]
    assert set(policies) == {"float32", "mixed_bfloat16", "mixed_float16"}
    assert policies["float32"]["speedup"] == 1.0
    for policy, dtype in (("mixed_bfloat16", "bfloat16"), ("mixed_float16", "float16")):
        entry = policies[policy]
        assert entry.get("error") or entry["speedup"] > 0, entry
        assert entry.get("error") or entry["compute_dtype"] == dtype
    print(f"\n{framework}: " + ", ".join(
        f"{p} {e.get('speedup', 0):.3g}x" for p, e in policies.items()
    ))  # fmt: skip


@needs_torch
def test_a_real_torch_step_child_at_a_tiny_size():
    _check_real(run_step_child("torch", "cpu", threads=1, **TINY), "torch")


@needs_tensorflow
def test_a_real_tensorflow_step_child_at_a_tiny_size():
    found = run_step_child("tensorflow", "cpu", threads=1, **TINY)
    _check_real(found, "tensorflow")
    assert found["policies"]["mixed_float16"].get("loss_scaling") in (True, None)
    assert found["keras_version"]


def test_a_rating_from_a_measured_step_names_its_date():
    step = MeasuredStep("torch", "mixed_bfloat16", 1.2, "2026-11-29T10:00:00+00:00")
    assert step.describe() == "1.20× faster"
