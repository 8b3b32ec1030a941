"""Measured training steps per framework and policy (`mpbench detect --measure`), cached per
hardware fingerprint: what `detect` and `run --policy auto` rate the policies from where a
measurement exists (mpbench.policies.rate; a measurement wins over the rule).

Each installed framework is timed in a child process of its own
(mpbench.detect.step_child: its docstring says what is timed and how); importing this module
imports no framework. A framework's figures are the ratios of its own steps, taken in one
process, interleaved: float32's median step over each policy's.

Cache: `<cache>/steps/<fingerprint>.json` (the root as for the peaks, mpbench.detect.measure),
one entry per framework, written atomically. The rules are the peaks' (docs/detect.md):
- a measurement during which other processes took CPU time is shown but never cached, and
  the framework's entry cached before stays;
- an entry is used only by the same framework versions (torch; TensorFlow and Keras), on a
  CPU the same thread count, and the same step shape (units, batch): `cache_key`. A file of
  another schema is ignored.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from mpbench import __version__
from mpbench.cache import cache_dir
from mpbench.detect.child import STEP_MARKER, run_child
from mpbench.detect.devices import rated
from mpbench.detect.measure import (
    busy_reason,
    cache_path,
    child_env,
    default_threads,
    write_json_atomically,
)
from mpbench.detect.step_child import BASELINE, BATCH, FRAMEWORKS, default_units
from mpbench.policies import MeasuredStep

STEPS_SCHEMA_VERSION = 1
DEFAULT_STEP_TIMEOUT_S = 600.0
# The packages whose versions a framework's step depends on (its kernels, Keras' train step).
VERSIONED = {"torch": ("torch",), "tensorflow": ("tensorflow", "keras")}
# Quick runs (tests, a first look): a smaller batch and budget than the cells'. A cached entry
# records its shape, so a quick one never rates the cells' default shape.
BATCH_ENV = "MPBENCH_MEASURE_STEP_BATCH"
BUDGET_ENV = "MPBENCH_MEASURE_STEP_BUDGET"
# Which frameworks `detect --measure` times a step in ("torch", "none"); unset: every
# installed one. For tests that measure the peaks alone, or one framework.
FRAMEWORKS_ENV = "MPBENCH_MEASURE_STEP_FRAMEWORKS"


def steps_path(fingerprint: str) -> Path:
    """Where the measured steps of this hardware live (the fingerprint checked as for the
    peaks' file: a plain token)."""
    cache_path(fingerprint)  # ValueError for anything that cannot name a file
    return cache_dir() / "steps" / f"{fingerprint}.json"


def _package_version(name: str) -> str | None:
    from mpbench.detect.frameworks import DISTRIBUTIONS

    for distribution in DISTRIBUTIONS.get(name, (name,)):
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def installed_versions(framework: str) -> dict[str, str | None]:
    """The versions of the packages `framework`'s step runs on, from package metadata."""
    return {name: _package_version(name) for name in VERSIONED[framework]}


def installed_step_frameworks() -> list[str]:
    """The frameworks installed here that a step can be timed in (no import)."""
    return [f for f in FRAMEWORKS if installed_versions(f)[f] is not None]


def step_frameworks() -> list[str]:
    """The frameworks `detect --measure` times a step in: the installed ones, narrowed by
    MPBENCH_MEASURE_STEP_FRAMEWORKS where it is set."""
    installed = installed_step_frameworks()
    asked = os.environ.get(FRAMEWORKS_ENV)
    if asked is None:
        return installed
    names = {name.strip().lower() for name in asked.split(",")}
    return [f for f in installed if f in names]


def step_batch() -> int:
    """The batch a step is timed at: the cells' default, or MPBENCH_MEASURE_STEP_BATCH."""
    value = os.environ.get(BATCH_ENV, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else BATCH


def cache_key(
    framework: str,
    device: str,
    versions: dict[str, str | None] | None = None,
    threads: int | None = None,
    batch: int | None = None,
) -> dict[str, Any]:
    """What a measured step depends on besides the hardware: the framework's packages, on a
    CPU the thread count (None on a GPU), and the step's shape. None: what is installed,
    default_threads(), the cells' units and step_batch()."""
    cpu = device.partition(":")[0] == "cpu"
    return {
        "versions": versions or installed_versions(framework),
        "threads": (threads or default_threads()) if cpu else None,
        "units": default_units(device),
        "batch": batch or step_batch(),
    }


def stale_reason(entry: dict, framework: str, device: str, **key: Any) -> str | None:
    """Why a cached framework entry does not apply here; None if it does. `key`: what
    cache_key takes (versions, threads, batch)."""
    cached = entry.get("cache_key")
    if not isinstance(cached, dict):
        return "no cache key"
    wanted = cache_key(framework, device, **key)
    for name in ("versions", "threads", "units", "batch"):
        if cached.get(name) != wanted[name]:
            return f"measured with {name} {cached.get(name)}, not {wanted[name]}"
    return None


def _read_file(fingerprint: str) -> dict:
    try:
        data = json.loads(steps_path(fingerprint).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("cache_schema_version") != STEPS_SCHEMA_VERSION:
        return {}
    return data


def read_cached(
    fingerprint: str,
    device: str,
    *,
    versions: dict[str, dict[str, str | None]] | None = None,
    threads: int | None = None,
    batch: int | None = None,
) -> dict[str, dict]:
    """The cached entries of this hardware that apply here, by framework ({} when none).
    `versions` (by framework), `threads`, `batch`: what they must have been measured with
    (default: what is installed, default_threads(), step_batch())."""
    frameworks = _read_file(fingerprint).get("frameworks")
    if not isinstance(frameworks, dict):
        return {}
    fresh = {}
    for framework, entry in frameworks.items():
        if framework not in FRAMEWORKS or not isinstance(entry, dict):
            continue
        mine = (versions or {}).get(framework)
        if stale_reason(entry, framework, device, versions=mine, threads=threads, batch=batch):
            continue
        fresh[framework] = entry
    return fresh


def measured_steps(entry: dict, framework: str) -> list[MeasuredStep]:
    """One framework entry's policies as the ratings take them (float32, the baseline, and
    policies that failed are left out)."""
    policies = entry.get("policies")
    steps = []
    for policy, found in (policies or {}).items() if isinstance(policies, dict) else ():
        speedup = found.get("speedup") if isinstance(found, dict) else None
        if policy == BASELINE or not isinstance(speedup, int | float) or speedup <= 0:
            continue
        stopped = bool(found.get("stopped_early"))
        when = str(entry.get("measured_at") or "")
        steps.append(MeasuredStep(framework, policy, float(speedup), when, stopped))
    return steps


def cached_steps(fingerprint: str, device: str, **key: Any) -> list[MeasuredStep]:
    """The measured steps cached for this hardware that apply here (read_cached's rules),
    as mpbench.policies.rate takes them; [] when none (never raises)."""
    try:
        fresh = read_cached(fingerprint, device, **key)
    except ValueError:  # a fingerprint that cannot name a file
        return []
    return [step for framework, entry in fresh.items() for step in measured_steps(entry, framework)]


def run_step_child(
    framework: str,
    device: str,
    *,
    batch: int | None = None,
    budget_s: float | None = None,
    threads: int | None = None,
    timeout: float = DEFAULT_STEP_TIMEOUT_S,
) -> dict[str, Any]:
    """Time `framework`'s step in a child process and return its answer; failures come back
    as {"ok": False, "error": ...}, never raised."""
    batch = batch or step_batch()
    if budget_s is None and os.environ.get(BUDGET_ENV):
        budget_s = float(os.environ[BUDGET_ENV])
    command = [sys.executable, "-m", "mpbench.detect.step_child", "--framework", framework]
    command += ["--device", device, "--batch", str(batch)]
    if budget_s is not None:
        command += ["--budget", str(budget_s)]
    answer = run_child(command, STEP_MARKER, timeout, child_env(command, device, threads))
    if answer.result is None:
        return {"ok": False, "framework": framework, "error": f"step {answer.error}"}
    answer.result["wall_seconds"] = answer.seconds
    return answer.result


def _finish(entry: dict, framework: str, device: str, threads: int | None, batch: int) -> dict:
    """A child's answer with what the cache needs: when, by which mpbench, its key, and
    whether the machine was quiet enough to cache it."""
    entry.update(
        framework=framework,
        mpbench_version=__version__,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    entry["cache_key"] = cache_key(framework, device, threads=threads, batch=batch)
    busy = busy_reason(entry.get("contention"))
    entry["contended"] = busy is not None
    entry["not_cached"] = busy if entry.get("ok") else None
    return entry


def store(fingerprint: str, entries: dict[str, dict]) -> Path | None:
    """Cache the quiet, successful framework entries, beside the others already cached;
    returns the file (None when nothing was stored)."""
    keep = {f: e for f, e in entries.items() if e.get("ok") and not e.get("not_cached")}
    if not keep:
        return None
    data = _read_file(fingerprint)
    frameworks = data.get("frameworks") if isinstance(data.get("frameworks"), dict) else {}
    data = {
        "cache_schema_version": STEPS_SCHEMA_VERSION,
        "fingerprint": fingerprint,
        "frameworks": {**frameworks, **keep},
    }
    return write_json_atomically(steps_path(fingerprint), data)


def measure_steps(
    device: str,
    fingerprint: str,
    frameworks: list[str] | None = None,
    *,
    threads: int | None = None,
    batch: int | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Time each framework's step on `device` (one child each, one after the other: they
    must not share the machine either) and cache the quiet ones under `fingerprint`.
    Returns {"device", "fingerprint", "frameworks": {name: its answer}, "cache_file"};
    `options` go to run_step_child (budget_s, timeout)."""
    steps_path(fingerprint)  # a bad fingerprint is the caller's bug: say so before measuring
    batch = batch or step_batch()
    if device.partition(":")[0] == "cpu":
        threads = threads or default_threads()
    entries = {}
    for framework in step_frameworks() if frameworks is None else frameworks:
        answer = run_step_child(framework, device, batch=batch, threads=threads, **options)
        entries[framework] = _finish(answer, framework, device, threads, batch)
    path = store(fingerprint, entries)
    return {
        "device": device,
        "fingerprint": fingerprint,
        "frameworks": entries,
        "cache_file": str(path) if path else None,
    }


def rate_from_cache(devices: list, frameworks: list) -> list:
    """Each device entry (mpbench.detect.report.DeviceEntry) rated for the installed
    frameworks (FrameworkInfo) from the steps cached for it where they apply, from the rules
    elsewhere."""
    installed = [f.name for f in frameworks if f.name in FRAMEWORKS and f.installed]
    return [rated(e, installed, cached_steps(e.fingerprint, e.kind)) for e in devices]


def attach_steps(report: Any, device: str, **options: Any) -> dict:
    """Time each installed framework's step on `device` for `detect --measure`, cache it
    under the device's hardware fingerprint, and rate that device again from the cache (a
    contended measurement is shown, not cached, so it rates nothing; a note says so)."""
    kind, _, number = device.partition(":")
    index = int(number) if number else None
    entry = report.device(kind, index)
    fingerprint = report.hardware_fingerprint(kind, index)
    result = measure_steps(device, fingerprint, **options)
    for framework, answer in result["frameworks"].items():
        said = f"--measure: {framework}'s step on {device}"
        if not answer.get("ok"):
            report.notes.append(f"{said} failed: {answer.get('error')}")
        elif answer.get("not_cached"):
            report.notes.append(f"{said}: {answer['not_cached']}; its ratings stay as they were")
    if entry is not None:
        fresh = rate_from_cache([entry], report.frameworks)[0]
        report.devices = [fresh if e is entry else e for e in report.devices]
    report.measured_steps = result
    return result
