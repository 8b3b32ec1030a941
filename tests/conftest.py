"""Shared by every test folder (tests/ is on sys.path: `pythonpath` in pyproject.toml, so
helpers such as tests/builders.py and tests/cli.py import as top-level modules): the NVML
fakes' fixtures, and the tiers.

It also files every test into a tier, automatically (README, "Development"):
- `slow`: the test took at least SLOW_S seconds (setup, call and teardown) when last
  measured, or it shares a fixture whose setup took that long (module- or session-scoped:
  whichever of its tests runs first pays for it). The measurements live in
  tests/tiers.json, written by `python -m pytest -n 2 --dist loadfile --record-tiers` (the
  whole suite as CI runs it, on a quiet machine). A test not yet measured is filed by where
  it lives: slow if its module starts processes or trains. A test whose module imports torch
  or TensorFlow at its top is slow too (the import alone takes seconds), and `-m "not slow"`
  does not even import such a module.
- `torch`, `tensorflow`: the test uses the framework: its module imports it (read from its
  source, without importing anything), or the test or module says so (the marker itself, or
  needs_torch / needs_tensorflow). They select; what skips a test where a framework is missing
  is needs_* or importorskip.
The inner loop is `python -m pytest -m "not slow"`; CI runs everything.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression
from frameworks import needs_tensorflow, needs_torch

# A shell starts a background job (`pytest ... &`) with SIGINT ignored, and exec keeps an
# ignored signal ignored: every `mpbench run` the tests start would then ignore the Ctrl-C
# the signal tests send it. Handled signals are reset to the default at exec, so the
# children get Python's usual KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _hangup_ignored(_signum, _frame) -> None:
    """SIGHUP, ignored by this session only (see below)."""


# Under nohup SIGHUP is ignored, and stays so across exec: the runs that the signal tests
# send SIGHUP would ignore it and never end (a whole suite started with nohup failed so).
# A handler that does nothing keeps this session deaf to a closed terminal, as nohup meant,
# and is reset to the default in every program the tests start.
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, _hangup_ignored)


def _one_core_per_worker() -> None:
    """Under pytest-xdist, each worker (and every process it starts: the cells, their fork
    servers, torchrun's ranks) runs on a core of its own. A cell sizes its thread pools by
    the cores it may use (runner/launchers/process.py's available_cores, the CPU affinity), so two
    workers no longer run 2 x 2 threads on 2 cores and wait on each other; a test about
    threads states its own. MPBENCH_TEST_PIN=0 leaves the workers unpinned."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or os.environ.get("MPBENCH_TEST_PIN") == "0":
        return
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS: no affinity to set
        return
    if len(cores) > 1:
        _WORKER_CORES.update(cores)
        os.sched_setaffinity(0, {cores[int(worker[2:]) % len(cores)]})


_WORKER_CORES: set[int] = set()  # every core, where this worker was pinned to one


_one_core_per_worker()


@pytest.fixture(scope="module", autouse=True)
def _all_cores_where_asked(request: pytest.FixtureRequest):
    """A module marked `pytestmark = pytest.mark.all_cores` (data-parallel runs: a CPU
    replica needs a core of its own) runs on every core the machine gave the test run, its
    module fixtures included (an autouse fixture is set up first in its scope)."""
    if request.node.get_closest_marker("all_cores") is None or not _WORKER_CORES:
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _WORKER_CORES)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


@pytest.fixture(scope="module", autouse=True)
def _earlier_modules_objects_frozen():
    """What earlier modules left alive (torch, TensorFlow, pytest's own reports: 479k tracked
    objects in a process with torch and TensorFlow imported) is moved out of the garbage
    collector's sight (gc.freeze) once collected, at each module's start. Otherwise every
    full collection walks all of it, and a test that allocates much in a long-lived worker
    ran far slower than alone (test_data_hostile's million nested tuples: 1.0 s in a bare
    interpreter, 2.2 s beside TensorFlow's objects, 1.0 s with them frozen; 25.7 and 53 s in
    whole suites, 1.9 s with this). What this module allocates is collected as always; only
    objects alive here that later die in a cycle are never freed, a small cost in a test
    process."""
    gc.collect()  # cheap: only what the last module left beside the frozen objects
    gc.freeze()
    yield


FAKE_PYNVML = Path(__file__).with_name("fakes") / "pynvml_fake.py"


def _load_fake_pynvml():
    """A fresh copy of the fake pynvml (its own state), named like the real module."""
    spec = importlib.util.spec_from_file_location("pynvml", FAKE_PYNVML)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_pynvml():
    """The fake module itself (unconfigured, not installed), and where its source lives
    (`SOURCE`: a subprocess finds it on PYTHONPATH as pynvml.py)."""
    module = _load_fake_pynvml()
    module.SOURCE = FAKE_PYNVML
    return module


@pytest.fixture
def fake_nvml(monkeypatch):
    """Install a fresh, configured fake as `pynvml`: fake_nvml("A100", "T4", driver_version=...,
    call_errors=...) (tests/fakes/pynvml_fake.py's configure). CUDA_VISIBLE_DEVICES and
    CUDA_DEVICE_ORDER are unset, so the fake's GPUs are the ones a test sees whatever machine
    runs it."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)

    def install(*gpus, **config):
        fake = _load_fake_pynvml()
        fake.configure(gpus=gpus, **config)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return install


TIERS = Path(__file__).with_name("tiers.json")
SLOW_S = 0.15  # the inner loop: ~1,500 tests, under a minute on 2 workers of a 2-core machine

# What in a module's source says its tests start processes or train (unmeasured tests only).
_SLOW_SOURCE = re.compile(
    r"\bsubprocess\b|\bPopen\b|\bmpbench_cli\b|\brun_cell\(|\.fit\(|torchrun|\bstart\(|"
    r"\bmpbench\(|\brun\(tiny"
)
# What says a module's tests use a framework: importing it (or mpbench's backend for it), at
# the top or in a test, or importorskip. A module that runs the framework only in processes it
# starts (`mpbench run`) says so itself: `pytestmark = pytest.mark.torch`, or needs_torch /
# needs_tensorflow (tests/frameworks.py) on the module or the test.
_MODULES = {  # what, imported, means a framework's code runs here
    "torch": r"torch|mpbench\.backends\.torch",
    "tensorflow": r"tensorflow|keras|mpbench\.backends\.tensorflow",
}
_FRAMEWORKS = {
    name: re.compile(rf"^\s*(import|from) ({modules})\b|importorskip\([\"']({modules})\b", re.M)
    for name, modules in _MODULES.items()
}
_NEEDS = {"torch": needs_torch.mark, "tensorflow": needs_tensorflow.mark}
# A module that imports a framework at its top (torch, TensorFlow, or mpbench's backend for
# one) takes seconds to import, whatever its tests take (`python -c "import torch._dynamo"`
# 4.7-6.0 s, `import tensorflow` 6.2-7.2 s on a 2-core Xeon), many times SLOW_S. Its tests
# are slow, and a run that leaves slow tests out (the inner loop) does not import it at all
# (pytest_ignore_collect).
_IMPORTS_A_FRAMEWORK = re.compile(
    rf"^(import|from) ({'|'.join(_MODULES.values())})\b|"
    rf"^\w+ = pytest\.importorskip\([\"'](({'|'.join(_MODULES.values())})\b)",
    re.M,
)


# Warm fork servers (runner/launchers/warm.py) for the whole session: the suite starts ~60
# `mpbench run`s, each of which would otherwise start a torch or TensorFlow server that
# imports the framework again (4.6-5.5 s of CPU each for torch here). Set in the controller
# before xdist starts its workers, so that they and every run they start share one folder;
# a run whose import state differs (another environment, CPU affinity; the working directory
# only where mpbench is found under it, as this checkout's is) gets a warm server of its own.
# Tests about servers themselves turn it off.
# MPBENCH_TEST_WARM=0: no warm servers.
_WARM_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    from mpbench.runner.launchers.warm import IDLE_ENV, IGNORE_ENV, WARM_ENV

    if hasattr(config, "workerinput") or WARM_ENV in os.environ:
        return
    if os.environ.get("MPBENCH_TEST_WARM", "1") == "0":
        return
    folder = Path(tempfile.mkdtemp(prefix="mpw-"))  # short: a socket's path has 107 bytes
    os.environ[WARM_ENV] = str(folder)
    # What tests set per test and only a running cell reads (the fault to inject, the cache
    # folder, the temporary folder: a fork computes its own, zygote.py; the terminal's size
    # and kind, which the terminal tests set and a console reads when a run makes one, never
    # an import; the mark of tests/processes.py, which no mpbench code reads: each cost a warm
    # server of its own, 2.9-4.7 s of torch import): runs differing only in them share a warm
    # server. A fork of a warm server shows the warm server's environment in
    # /proc/PID/environ, not the run's, so a test whose run is served by one finds the run's
    # processes by the files they hold open (processes.py's `holding`), not by the mark.
    # They stay ten minutes idle: a whole suite on two workers (2,688 tests, 960 s, 2-core
    # AMX Xeon) started 45 warm servers for 27 import states when they left after one
    # minute, 18 of them a state whose server had just left (torch or TensorFlow imported
    # again, ~4-5 CPU-s each), its next run coming 2-324 s later. Replayed on that run's
    # starts and exits, ten minutes keep all of those, with at most ~22 alive at once
    # (226 MB private for a torch one, 246 MB for TensorFlow: /proc/PID/smaps_rollup).
    os.environ[IGNORE_ENV] = "MPBENCH_FAULT,MPBENCH_MARK,MPBENCH_CACHE,TMPDIR,COLUMNS,LINES,TERM"
    os.environ[IDLE_ENV] = "600"
    config.stash[_WARM_DIR] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's warm servers end with it (they would leave after minutes idle)."""
    from mpbench.runner.launchers.warm import IDLE_ENV, IGNORE_ENV, WARM_ENV, stop_warm_servers

    folder = config.stash.get(_WARM_DIR, None)
    if folder is not None:
        stop_warm_servers(folder)
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(WARM_ENV, None)
        os.environ.pop(IGNORE_ENV, None)
        os.environ.pop(IDLE_ENV, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-tiers",
        action="store_true",
        help="time every test and rewrite tests/tiers.json (run the whole suite, quietly)",
    )


def _tiers() -> dict:
    try:
        return json.loads(TIERS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The fixtures of this suite (not pytest's own, such as tmp_path_factory) that `item`
    shares with other tests: those of a scope wider than the function."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {
        f"{defs[-1].baseid}::{name}"
        for name, defs in info.name2fixturedefs.items()
        # Not this file's own: its module-scoped autouse fixture is every module's.
        if defs and defs[-1].scope != "function" and defs[-1].baseid not in ("", "tests")
    }


_sources: dict[Path, str] = {}


def _source(path: Path) -> str:
    if path not in _sources:
        _sources[path] = path.read_text(encoding="utf-8")
    return _sources[path]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Not imported at all: a test module importing a framework at its top, where the run's
    marker expression (-m) selects none of its tests. They are all slow (above), and carry
    only the markers its source names; `-m "not slow"` collects none of them, `-m torch` or
    `-m "not slow or runs_without_tensorflow"` with such a test in the module still do."""
    expression = config.getoption("markexpr", "")
    path = Path(collection_path)
    if not expression or path.suffix != ".py" or not path.name.startswith("test_"):
        return None
    source = _source(path)
    if not _IMPORTS_A_FRAMEWORK.search(source):
        return None
    marks = {"slow", *_FRAMEWORKS, *re.findall(r"\bmark\.(\w+)", source)}
    selected = Expression.compile(expression).evaluate(lambda name, **_: name in marks)
    return None if selected else True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = _tiers()
    measured = tiers.get("seconds", {})
    # A shared fixture that took seconds to set up was timed in the first test that used it;
    # whichever of its tests runs first pays it, so all of them are slow.
    by_id = {item.nodeid: item for item in items}
    costly = set().union(
        *(_shared_fixtures(by_id[i]) for i in tiers.get("slow_setup", []) if i in by_id)
    )
    unmeasured = 0
    module_s: dict[Path, float] = {}
    for item in items:
        source = _source(item.path)
        for marker, pattern in _FRAMEWORKS.items():
            if pattern.search(source) or _NEEDS[marker] in item.iter_markers("skipif"):
                item.add_marker(marker)
        seconds = measured.get(item.nodeid)
        if seconds is None:
            unmeasured += 1
            slow = bool(_SLOW_SOURCE.search(source))
            seconds = UNMEASURED_S[slow]
        else:
            slow = seconds >= SLOW_S or bool(costly & _shared_fixtures(item))
        slow = slow or bool(_IMPORTS_A_FRAMEWORK.search(source))
        if slow and not item.get_closest_marker("slow"):
            item.add_marker("slow")
        module_s[item.path] = module_s.get(item.path, 0.0) + seconds
    config.stash[_UNMEASURED] = unmeasured
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _longest_modules_first(items, module_s)


# What an unmeasured test is guessed to take, by whether its module looks slow (above).
UNMEASURED_S = {True: 2.0, False: 0.02}


def _longest_modules_first(items: list[pytest.Item], module_s: dict[Path, float]) -> None:
    """pytest-xdist hands its workers one module at a time, in the order collected (CI's
    `--dist loadfile --no-loadscope-reorder`; without that option xdist puts the modules
    with the most tests first instead): the longest modules go first, so that no long
    module starts last while the other worker has nothing left to do
    (longest-processing-time-first). Every worker collects, and sorts, the same way; a
    module's tests keep their own order."""
    rank = {path: n for n, path in enumerate(sorted(module_s, key=lambda p: (-module_s[p], p)))}
    items.sort(key=lambda item: rank[item.path])


_UNMEASURED = pytest.StashKey[int]()
# Each test's setup, call and teardown, summed, and the tests whose setup took SLOW_S or more.
# Reports reach this hook in the process that writes tiers.json: pytest-xdist's controller
# receives every worker's, so `--record-tiers -n 2` times the suite as CI runs it.
_times: dict[str, float] = {}
_slow_setups: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _times[report.nodeid] = round(_times.get(report.nodeid, 0.0) + report.duration, 3)
    if report.when == "setup" and report.duration >= SLOW_S:
        _slow_setups.add(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    times = _times
    if hasattr(config, "workerinput"):
        return  # an xdist worker: its controller has its reports, and writes the file
    if config.getoption("--record-tiers") and times:
        # A partial run updates its own tests and keeps the others' times; a test whose file
        # is gone is dropped (renamed tests: the whole suite's run drops their old names).
        tiers = _tiers()
        measured, slow_setup = tiers.get("seconds", {}), set(tiers.get("slow_setup", []))
        if session.config.args == [] or set(session.config.args) == {"tests"}:
            measured, slow_setup = {}, set()
        measured.update(times)
        slow_setup = (slow_setup - set(times)) | _slow_setups
        root = session.config.rootpath

        def exists(nodeid: str) -> bool:
            return (root / nodeid.split("::")[0]).exists()

        written = {
            "slow_s": SLOW_S,
            "seconds": {k: v for k, v in sorted(measured.items()) if exists(k)},
            "slow_setup": sorted(k for k in slow_setup if exists(k)),
        }
        TIERS.write_text(json.dumps(written, indent=0, sort_keys=True) + "\n", encoding="utf-8")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    unmeasured = config.stash.get(_UNMEASURED, 0)
    if unmeasured and not config.getoption("--record-tiers"):
        terminalreporter.write_line(
            f"tiers: {unmeasured} tests have no time in tests/tiers.json and were filed by "
            "their module; `python -m pytest --record-tiers` measures them"
        )
