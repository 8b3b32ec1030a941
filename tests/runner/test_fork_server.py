"""Fork servers (runner/launchers/zygote.py) with real servers and real forked cells: a cell
forked from its framework's server is a process of its own, with the descriptors, process
group, environment and exit status a new process would have, and every failure still ends
as the record it would have been."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from builders import cell_spec
from frameworks import needs_tensorflow, needs_torch
from processes import marked

from mpbench.backends.base import CellSpec
from mpbench.runner.launchers.cell_timeout import CELL_TIMEOUT_ENV
from mpbench.runner.launchers.process import run_in_child
from mpbench.runner.launchers.process_names import CELL_NAME, SERVER_NAME
from mpbench.runner.launchers.warm import WARM_ENV
from mpbench.runner.launchers.zygote import (
    FORK_SERVER_ENV,
    NVML_CHECK_ENV,
    ForkServer,
    ForkServers,
    ServerGone,
    usable,
)


@pytest.fixture(scope="module", autouse=True)
def _servers_of_the_runs_own():
    """These tests are about the server a run starts itself: no warm servers (the suite's
    conftest turns them on; tests/runner/test_warm_servers.py has theirs)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv(WARM_ENV, raising=False)
        yield


def spec(framework: str = "torch", repeat: int = 0, **changes) -> CellSpec:
    small = {"max_steps": 6, "synthetic_train_size": 512, "synthetic_test_size": 128}
    return cell_spec(framework=framework, repeat=repeat, **{**small, **changes})


class Cells:
    """Runs cells through one set of servers, noting each cell's process as it runs."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.warnings: list[str] = []
        self.servers = ForkServers(tmp_path / "logs", self.warnings.append)
        # (pid, parent's pid) of each repeat's cell, noted at a step while it ran.
        self.seen: dict[int, tuple[int, int]] = {}

    def run(self, cell: CellSpec, timeout_s: float = 120):
        def on_step(step: int, total: int) -> None:
            # A step event may be read after its cell has died (a cell killed with its server
            # leaves its last events in the pipe), and a cell's rerun steps under the same
            # repeat: note the cell at a step where exactly one is running, never raise here
            # (an exception would end the runner's loop, not fail the test).
            if cell.repeat not in self.seen:
                found = cell_processes()
                if len(found) == 1:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        self.seen[cell.repeat] = (found[0].pid, found[0].ppid())

        log = self.tmp_path / f"{cell.cell_id.replace('/', '__')}.log"
        return run_in_child(cell, timeout_s, log, on_step, fork_servers=self.servers)


class InBackground:
    """A call on a thread of its own whose result, or exception, the test reads back: a
    worker that died says why, not a KeyError on a result it never set."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self._result: list[Any] = []
        self._raised: list[BaseException] = []

        def work() -> None:
            try:
                self._result.append(call())
            except BaseException as exc:  # handed to the test by result()
                self._raised.append(exc)

        self._thread = threading.Thread(target=work)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def result(self) -> Any:
        assert not self._thread.is_alive(), "the call is still running"
        if self._raised:
            raise self._raised[0]
        return self._result[0]


def named(name: str, recursive: bool = True) -> list[psutil.Process]:
    """This test process's live descendants (children alone unless `recursive`) that `ps`
    calls `name`; one that ends while we look is not there."""
    found = []
    for process in psutil.Process().children(recursive=recursive):
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.name() == name and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def cell_processes() -> list[psutil.Process]:
    """The cells now running under this test process (forked by a server, or new)."""
    return named(CELL_NAME)


def wait_for_cell(within_s: float, poll_s: float = 0.1) -> psutil.Process:
    """The cell running under this test process, once it has started (within `within_s`)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = cell_processes()
        if found:
            return found[0]
        time.sleep(poll_s)
    raise AssertionError(f"no cell started within {within_s:g} s")


def server_processes() -> list[psutil.Process]:
    return named(SERVER_NAME, recursive=False)


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """One set of servers, as one run has them, read by several tests: a cell whose
    environment has a variable the others lack (its own server), then two cells of the
    run's environment (a new server, forking both), the servers closed; then the first of
    those cells again, started as a new interpreter. What each test checks is noted here, as
    it was when it happened."""
    tmp_path = tmp_path_factory.mktemp("one_run")
    seen = SimpleNamespace(server_ended=False)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("MPBENCH_MARK", str(tmp_path))
        cells = Cells(tmp_path)
        with cells.servers:
            monkeypatch.setenv("MPBENCH_SOMETHING_THE_IMPORT_READS", "1")
            seen.other_env = cells.run(spec(repeat=2))
            seen.servers_other_env = server_processes()
            monkeypatch.delenv("MPBENCH_SOMETHING_THE_IMPORT_READS")
            seen.outcomes = [cells.run(spec(repeat=r)) for r in range(2)]
            seen.servers_after = server_processes()
            seen.cells_seen = {r: cells.seen.get(r) for r in (0, 1)}
            server = seen.servers_after[0] if seen.servers_after else None
            if server is not None:
                environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
                seen.server_environ = environ
                # What the run hands the server's forks: the cell's environment, not its own.
                seen.server_env = dict(cells.servers._servers["torch"].env)
        seen.server = server
        # The same cell started as a new interpreter.
        seen.new = run_in_child(spec(repeat=0), 120, tmp_path / "new.log", lambda *_: None)
        # The run is over: the server and everything it forked are gone.
        with contextlib.suppress(psutil.TimeoutExpired):
            seen.server_ended = server is not None and (
                server.wait(10) is not None or not server.is_running()
            )
        deadline = time.monotonic() + 10
        while marked(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.left_running = marked(str(tmp_path))
    return seen


@needs_torch
def test_each_cell_is_a_new_fork_of_one_server_and_ends_as_a_new_process_would(one_run):
    outcomes = one_run.outcomes
    (server,) = one_run.servers_after
    assert all(o.status == "ok" for o in outcomes), [o.reason for o in outcomes]
    assert None not in one_run.cells_seen.values(), one_run.cells_seen  # each seen running
    (first, by), (second, by_too) = one_run.cells_seen[0], one_run.cells_seen[1]
    assert first != second
    assert by == by_too == server.pid  # forked by the server, not started by us
    # The same measurements as a cell started as a new interpreter: same steps, same loss
    # (same seed, fresh framework state), the same kinds of figures. The loss to float32's
    # rounding, not bit for bit: two processes may sum in another order (CI, loaded machine:
    # 2.2953649361928306 forked, 2.2953648964564004 new).
    new = one_run.new
    assert new.status == "ok", new.reason
    for outcome in outcomes:
        pair = (outcome.measurements, new.measurements)
        given = [{name for name, value in vars(m).items() if value is not None} for m in pair]
        assert given[0] == given[1]  # the same kinds of figures
        assert len(outcome.measurements.step_times_s) == len(new.measurements.step_times_s)
        assert outcome.measurements.epoch_losses == pytest.approx(
            new.measurements.epoch_losses, rel=1e-6
        )
        assert 0 < outcome.startup_s <= outcome.wall_s
    # The run is over: the server and everything it forked are gone.
    assert one_run.server_ended
    assert one_run.left_running == []


@needs_torch
def test_a_forked_cell_has_its_own_session_descriptors_and_environment(tmp_path, monkeypatch):
    """What the cell sees: its own process group, stdin (the lifeline), its log as stdout and
    stderr, the events pipe, and no socket of the server's; the cell's environment, with its
    own timeout, not the server's."""
    monkeypatch.setenv("MPBENCH_MARK", str(tmp_path))
    monkeypatch.setenv("MPBENCH_FAULT", "hang@r1")
    cells = Cells(tmp_path)
    with cells.servers:
        # A first cell starts the server, whose import (seconds on a busy machine) would
        # otherwise count against the 4 s timeout of the cell under test.
        assert cells.run(spec(repeat=0)).status == "ok"
        worker = InBackground(lambda: cells.run(spec(repeat=1), 4))
        try:
            cell = wait_for_cell(9, poll_s=0.02)
            log = str(tmp_path / "torch__mnist_dense__float32__r1.log")
            deadline = time.monotonic() + 3
            while b"injecting the hang fault" not in Path(log).read_bytes():
                assert time.monotonic() < deadline, "the cell never reached its fault"
                time.sleep(0.02)
            assert os.getpgid(cell.pid) == cell.pid  # a session of its own
            fds = {e.name: os.readlink(e) for e in os.scandir(f"/proc/{cell.pid}/fd")}
            assert not [t for t in fds.values() if t.startswith("socket:")], fds
            assert fds["1"] == log and fds["2"] == log
            pipes = {fd for fd, target in fds.items() if target.startswith("pipe:")}
            assert "0" in pipes and len(pipes) == 2, fds
            environ = Path(f"/proc/{cell.pid}/environ").read_bytes()  # the server's, at exec
            assert f"{CELL_TIMEOUT_ENV}=".encode() not in environ
            assert b"mpbench: injecting the hang fault" in Path(log).read_bytes()
        finally:
            worker.join(60)
    outcome = worker.result()
    assert outcome.status == "timeout", outcome.reason
    assert "4 s timeout" in outcome.reason  # the cell's timeout reached the cell's env


FAULTS = ("raise", "crash", "sigkill")


@pytest.fixture(scope="module")
def failures(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Each fault of FAULTS in a cell, each followed by a cell that trains, all forked by one
    server (MPBENCH_FAULT's list: one environment): repeat 2i fails with FAULTS[i], 2i + 1
    follows it. Outcomes by fault: (the failed cell's, the next cell's)."""
    tmp_path = tmp_path_factory.mktemp("failures")
    faults = ",".join(f"{fault}@r{2 * n}" for n, fault in enumerate(FAULTS))
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("MPBENCH_FAULT", faults)
        cells = Cells(tmp_path)
        with cells.servers:
            outcomes = [cells.run(spec(repeat=r)) for r in range(2 * len(FAULTS))]
            servers = server_processes()
    pairs = {fault: (outcomes[2 * n], outcomes[2 * n + 1]) for n, fault in enumerate(FAULTS)}
    return SimpleNamespace(outcomes=pairs, servers=servers, warnings=cells.warnings)


@needs_torch
@pytest.mark.parametrize(
    ("fault", "status", "reason"),
    [
        ("raise", "error", "RuntimeError: injected failure"),
        ("crash", "error", "cell process crashed with SIGABRT"),
        ("sigkill", "error", "killed by SIGKILL"),
    ],
)
def test_a_forked_cells_failure_is_reported_as_a_new_processs_would_be(
    failures, fault, status, reason
):
    failed, after = failures.outcomes[fault]  # after: the server lives on
    assert (failed.status, after.status) == (status, "ok"), (failed.reason, after.reason)
    assert reason in failed.reason
    assert failed.launcher == after.launcher == "fork server"
    assert len(failures.servers) == 1  # one server forked every cell
    assert failures.warnings == []


@needs_torch
def test_a_timed_out_cell_is_killed_with_its_group_and_the_server_serves_the_next(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("MPBENCH_FAULT", "spawn@r1")  # a grandchild that never ends either
    monkeypatch.setenv("MPBENCH_MARK", str(tmp_path))
    cells = Cells(tmp_path)
    with cells.servers:
        # A first cell starts the server: its import (seconds, over 8 on a busy machine)
        # would otherwise count against the hung cell's 4 s, whose time could then be up
        # before the fork had made its own process group (the warm server forks in ms).
        assert cells.run(spec(repeat=0)).status == "ok"
        hung = cells.run(spec(repeat=1), timeout_s=4)
        (server,) = server_processes()
        left = [p for p in marked(str(tmp_path)) if p.pid != server.pid]
        after = cells.run(spec(repeat=2))
    assert hung.status == "timeout" and after.status == "ok", (hung.reason, after.reason)
    assert [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


@needs_torch
def test_a_cell_whose_server_is_killed_under_it_runs_again_as_a_new_process(tmp_path, monkeypatch):
    """The cell died with its server, unmeasured: it is not recorded as an error of its own
    but runs again, as a new process (the server is gone), and says why; so do the next."""
    monkeypatch.setenv("MPBENCH_MARK", str(tmp_path))
    cells = Cells(tmp_path)
    with cells.servers:
        worker = InBackground(lambda: cells.run(spec(max_steps=40), 120))
        forked = wait_for_cell(30, poll_s=0.005)
        # Stopped where it is, the forked cell is still running whenever the server dies, on
        # a machine however busy, and its rerun need not be slow: a stopped process still
        # gets the kernel's SIGKILL when its parent dies (PR_SET_PDEATHSIG).
        with contextlib.suppress(psutil.NoSuchProcess):
            forked.suspend()
        (server,) = server_processes()
        assert forked.ppid() == server.pid
        server.send_signal(signal.SIGKILL)
        worker.join(120)
        assert not worker.is_alive()
        after = cells.run(spec(repeat=1))
    outcome = worker.result()
    assert outcome.status == "ok", outcome.reason
    assert outcome.launcher == "new process"
    said = (
        f"the torch fork server (pid {server.pid}) was killed by SIGKILL "
        f"while cell {forked.pid} ran"
    )
    assert outcome.warnings[0].startswith(said)
    assert outcome.warnings[0].endswith("that cell was not measured: it ran again as a new process")
    assert len(outcome.measurements.step_times_s) > 0
    assert outcome.rerun.startswith(said) and outcome.rerun.endswith("that cell was not measured")
    # The run says it once, and the framework's next cells start as new processes.
    assert len(cells.warnings) == 1 and cells.warnings[0].startswith(said)
    assert (after.status, after.launcher) == ("ok", "new process")


def test_a_server_that_cannot_import_its_framework_says_why(tmp_path):
    with pytest.raises(ServerGone, match=r"did not start: KeyError: 'no-such-framework'"):
        ForkServer("no-such-framework", dict(os.environ), tmp_path / "fs.log")
    assert "Traceback" in (tmp_path / "fs.log").read_text()


def test_which_cells_are_forked():
    environ = {}
    assert usable(spec("torch"), environ) and usable(spec("tensorflow"), environ)
    assert not usable(spec("torch"), {FORK_SERVER_ENV: "0"})
    # torch on CUDA: the fork creates its own context (the server never initialised CUDA).
    assert usable(spec("torch", device="cuda:0"), environ)
    assert usable(spec("torch", device="cuda"), environ)
    # TensorFlow on a GPU has not been verified forked; MPS is not Linux.
    assert not usable(spec("tensorflow", device="cuda:0"), environ)
    assert not usable(spec("torch", device="mps"), environ)
    assert not usable(spec("torch", nproc=2), environ)  # torchrun ranks are new anyway
    assert not usable(spec("jax"), environ)


@needs_tensorflow
def test_a_tensorflow_cell_forks_from_its_server_and_trains(tmp_path):
    cells = Cells(tmp_path)
    with cells.servers:
        outcomes = [cells.run(spec("tensorflow", repeat=r)) for r in range(2)]
        (server,) = server_processes()
        assert {r: parent for r, (_, parent) in cells.seen.items()} == {
            0: server.pid,
            1: server.pid,
        }
    assert [o.status for o in outcomes] == ["ok", "ok"], [o.reason for o in outcomes]
    first, second = (o.measurements.epoch_losses for o in outcomes)
    assert first == pytest.approx(second, rel=1e-6)  # float32's rounding, as above


@needs_torch
def test_a_cell_whose_environment_differs_gets_a_new_server(one_run):
    first, second = one_run.other_env, one_run.outcomes[0]
    (server,) = one_run.servers_other_env
    (new_server,) = one_run.servers_after
    assert (first.status, second.status) == ("ok", "ok")
    assert new_server.pid != server.pid


# --- CUDA: a torch server never initialises it, and a fork that finds it in use runs nothing.
# This machine has no GPU: what CUDA would do is faked in the server alone, by a
# sitecustomize.py that patches torch's own functions there (faithful to their signatures),
# while cells started as new processes get the real ones.

_CUDA_FAKES = {
    # torch.cuda.is_initialized() true from the server's first look: CUDA came up on import.
    "initialised on import": "torch.cuda.is_initialized = lambda: True",
    # ...true from the third look on: the server's import and first fork were clean, and then
    # something in the server initialised CUDA before its second fork.
    "initialised later": (
        "_looks = [0]\n"
        "def _is_initialized():\n"
        "    _looks[0] += 1\n"
        "    return _looks[0] > 2\n"
        "torch.cuda.is_initialized = _is_initialized"
    ),
    # torch's bad-fork flag set in the fork: the parent had initialised CUDA, unseen.
    "bad fork": "torch.cuda._is_in_bad_fork = lambda: True",
}


def _fake_cuda_in_the_server(tmp_path: Path, monkeypatch, fake: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "if 'mpbench.runner.launchers.zygote' in sys.orig_argv:\n"
        "    import torch\n"
        "    import torch.cuda\n"
        + "".join(f"    {line}\n" for line in _CUDA_FAKES[fake].splitlines())
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    )


@needs_torch
@pytest.mark.parametrize(
    ("fake", "launchers", "warning"),
    [
        (
            "initialised on import",
            ["new process", "new process"],
            "RuntimeError: torch initialised CUDA in the fork server while importing",
        ),
        (
            "initialised later",
            ["fork server", "new process"],
            "cannot fork: torch initialised CUDA in the fork server",
        ),
        (
            "bad fork",
            ["new process", "new process"],
            "cannot fork: the forked cell found CUDA initialised by its parent (a bad fork)",
        ),
    ],
)
def test_cuda_in_use_in_the_server_starts_cells_as_new_processes_with_a_warning(
    tmp_path, monkeypatch, fake, launchers, warning
):
    _fake_cuda_in_the_server(tmp_path, monkeypatch, fake)
    cells = Cells(tmp_path)
    with cells.servers:
        outcomes = [cells.run(spec(repeat=r)) for r in range(2)]
    assert [o.status for o in outcomes] == ["ok", "ok"], [o.reason for o in outcomes]
    assert [o.launcher for o in outcomes] == launchers
    # One warning, once: the framework's later cells start as new processes without it.
    assert len(cells.warnings) == 1, cells.warnings
    assert warning in cells.warnings[0]
    assert cells.warnings[0].endswith("; its cells start as new processes")
    # The same training either way: the refused fork ran nothing of the cell (to float32's
    # rounding, as above).
    first, second = (o.measurements.epoch_losses for o in outcomes)
    assert first == pytest.approx(second, rel=1e-6)


@needs_torch
def test_the_torch_server_touches_no_cuda_and_starts_no_process(tmp_path):
    """What the server runs (preload) calls none of torch.cuda's functions that initialise
    CUDA or query a device, and leaves no child process (no compile-worker pool)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import json, psutil, torch, torch.cuda\n"
        "calls = []\n"
        "def spy(name, real):\n"
        "    def called(*args, **kwargs):\n"
        "        calls.append(name)\n"
        "        return real(*args, **kwargs)\n"
        "    return called\n"
        "for name in ('_lazy_init', 'init', 'is_available', 'device_count', 'current_device',\n"
        "             'get_device_capability', 'get_device_properties', 'get_device_name',\n"
        "             'set_device', 'synchronize', 'memory_allocated', 'mem_get_info'):\n"
        "    setattr(torch.cuda, name, spy(name, getattr(torch.cuda, name)))\n"
        "from mpbench.runner.launchers.zygote import preload\n"
        "preload('torch')\n"
        "print(json.dumps({'calls': calls, 'initialized': torch.cuda.is_initialized(),\n"
        "                  'children': len(psutil.Process().children(recursive=True))}))\n"
    )
    done = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"calls": [], "initialized": False, "children": 0}


@pytest.mark.torch  # the server imports torch, in its own process
def test_the_torch_server_asks_nvml_not_cuda_whether_a_gpu_is_there(one_run):
    """torch.cuda.is_available() initialises CUDA unless PYTORCH_NVML_BASED_CUDA_CHECK=1
    (torch's docs): a torch server gets it in its own environment, a cell never does."""
    assert one_run.server is not None, "no server ran"
    assert f"{NVML_CHECK_ENV}=1".encode() in one_run.server_environ
    assert NVML_CHECK_ENV not in one_run.server_env  # what its forks are given is the cell's
