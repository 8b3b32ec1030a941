"""run_in_child with real child processes, the OOM-kill evidence reader, and classify()."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from builders import cell_spec
from processes import marked

from mpbench.runner.launchers import process as execute
from mpbench.runner.launchers.cell import classify
from mpbench.runner.launchers.oom import memory_cgroup, oom_kill_count
from mpbench.runner.launchers.process import run_in_child
from mpbench.runner.launchers.process_names import CELL_NAME

torch = pytest.importorskip("torch")


def run(tmp_path: Path, timeout_s: float = 120) -> tuple[execute.Outcome, list[tuple]]:
    steps: list[tuple[int, int]] = []
    outcome = run_in_child(
        cell_spec(), timeout_s, tmp_path / "cell.log", lambda *step_total: steps.append(step_total)
    )
    return outcome, steps


def none_left(mark: str, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while marked(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def wait_gone(pid: int, within_s: float = 10) -> bool:
    """True once `pid` has exited (a zombie waiting for its reaper counts as gone)."""
    import psutil

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_cell_reports_its_steps_and_measurements_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("MPBENCH_MARK", str(tmp_path))
    outcome, steps = run(tmp_path)
    assert outcome.status == "ok", outcome.reason
    assert len(outcome.measurements.step_times_s) == 8
    assert outcome.measurements.warmup_steps == 2
    assert steps and steps[-1][0] == steps[-1][1]  # progress reached the end
    assert list((tmp_path / "tmp").iterdir()) == []  # the spec went over stdin
    assert none_left(str(tmp_path), within_s=5)  # the watcher ended when stdin closed


@pytest.mark.parametrize(
    ("fault", "status", "reason"),
    [
        ("alloc", "oom", "DefaultCPUAllocator: can't allocate memory: you tried to allocate"),
        ("sigkill", "error", "killed by SIGKILL (log: "),
        ("crash", "error", "cell process crashed with SIGABRT"),
    ],
)
def test_a_failing_cell_becomes_an_outcome(tmp_path, monkeypatch, fault, status, reason):
    monkeypatch.setenv("MPBENCH_FAULT", fault)
    outcome, _ = run(tmp_path)
    assert (outcome.status, outcome.measurements) == (status, None), outcome.reason
    assert reason in outcome.reason
    assert "\n" not in outcome.reason


@pytest.mark.parametrize("fault", ["hang", "silent", "spawn"])
def test_a_cell_that_never_answers_times_out_and_leaves_nothing(tmp_path, monkeypatch, fault):
    """`silent` holds the GIL in a C call, `spawn` has started a grandchild: the SIGTERM to
    the process group ends them all the same."""
    monkeypatch.setenv("MPBENCH_FAULT", fault)
    monkeypatch.setenv("MPBENCH_MARK", str(tmp_path))
    started = time.monotonic()
    outcome, _ = run(tmp_path, timeout_s=2)
    assert outcome.status == "timeout" and "2 s timeout" in outcome.reason
    assert time.monotonic() - started < 10
    assert none_left(str(tmp_path), within_s=5)


def test_sigkill_is_oom_when_the_cgroup_counted_an_oom_kill(tmp_path, monkeypatch):
    counts = iter([3, 4])  # before the cell, after it: the kernel's OOM killer struck
    monkeypatch.setattr(execute, "memory_cgroup", lambda: tmp_path)
    monkeypatch.setattr(execute, "oom_kill_count", lambda _path: next(counts))
    monkeypatch.setenv("MPBENCH_FAULT", "sigkill")
    outcome, _ = run(tmp_path)
    assert outcome.status == "oom"
    assert outcome.reason.startswith("killed by SIGKILL from the out-of-memory killer (log: ")


@pytest.mark.parametrize(("before", "after"), [(3, 3), (None, None), (None, 1), (1, None)])
def test_sigkill_without_evidence_is_an_error(tmp_path, monkeypatch, before, after):
    counts = iter([before, after])
    monkeypatch.setattr(execute, "memory_cgroup", lambda: tmp_path)
    monkeypatch.setattr(execute, "oom_kill_count", lambda _path: next(counts))
    monkeypatch.setenv("MPBENCH_FAULT", "sigkill")
    outcome, _ = run(tmp_path)
    assert outcome.status == "error"
    assert outcome.reason == f"killed by SIGKILL (log: {tmp_path / 'cell.log'})"


V2_EVENTS = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
V1_OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"


@pytest.mark.parametrize(
    ("files", "count"),
    [
        ({"memory.events": V2_EVENTS}, 2),
        ({"memory.oom_control": V1_OOM_CONTROL}, 5),
        ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n"}, None),  # kernel < 4.13
        ({"memory.events": "oom_kill many\n"}, None),
        ({}, None),
    ],
)
def test_the_oom_kill_count_is_read_from_the_cgroup_files(tmp_path, files, count):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert oom_kill_count(tmp_path) == count


def test_an_unreadable_or_missing_cgroup_is_no_evidence(tmp_path):
    (tmp_path / "memory.events").mkdir()  # reading it fails, even as root
    assert oom_kill_count(tmp_path) is None
    assert oom_kill_count(tmp_path / "gone") is None
    assert oom_kill_count(None) is None


@pytest.mark.parametrize(
    ("proc_cgroup", "found"),
    [
        ("0::/user.slice/session-2.scope\n", "user.slice/session-2.scope"),  # cgroup v2
        ("0::/job\n", "unified/job"),  # hybrid: v2 mounted at unified/, no v1 memory
        ("4:memory:/job\n1:cpu,cpuacct:/job\n0::/\n", "memory/job"),  # v1 memory controller
        ("4:memory:/elsewhere\n0::/nowhere\n", None),
    ],
)
def test_the_memory_cgroup_is_found_from_proc_self_cgroup(tmp_path, proc_cgroup, found):
    root = tmp_path / "sys-fs-cgroup"
    (root / "user.slice/session-2.scope").mkdir(parents=True)
    (root / "user.slice/session-2.scope/memory.events").write_text(V2_EVENTS)
    (root / "unified/job").mkdir(parents=True)
    (root / "unified/job/memory.events").write_text(V2_EVENTS)
    (root / "memory/job").mkdir(parents=True)
    (root / "memory/job/memory.oom_control").write_text(V1_OOM_CONTROL)
    (tmp_path / "cgroup").write_text(proc_cgroup)
    expected = None if found is None else root / found
    assert memory_cgroup(tmp_path / "cgroup", root) == expected
    assert memory_cgroup(tmp_path / "no-proc", root) is None


def test_torchs_failed_cpu_allocation_is_classified_oom():
    with pytest.raises(RuntimeError) as caught:
        torch.empty((1 << 50,), dtype=torch.uint8)
    status, reason = classify(caught.value)
    assert status == "oom"
    assert reason.startswith("RuntimeError: ")
    assert "DefaultCPUAllocator: can't allocate memory: you tried to allocate" in reason
    assert "\n" not in reason


def test_the_child_gets_no_descriptor_but_its_stdin_and_events_pipe(tmp_path, monkeypatch):
    import psutil

    stray = os.open(tmp_path / "stray", os.O_CREAT | os.O_RDWR)
    os.set_inheritable(stray, True)  # what close_fds must keep out of the child
    monkeypatch.setenv("MPBENCH_FAULT", "hang")
    monkeypatch.setenv("MPBENCH_MARK", str(tmp_path))
    worker = threading.Thread(target=run, args=(tmp_path, 20))
    worker.start()
    try:
        child = None
        deadline = time.monotonic() + 15
        while child is None and time.monotonic() < deadline:
            time.sleep(0.1)
            for process in psutil.Process().children():
                if process.name() == CELL_NAME:
                    child = process
        assert child is not None
        time.sleep(1.0)  # the child is now asleep in the hang fault
        events_fd = child.cmdline()[-2]  # EVENTS_FD PARENT_PID
        fds = {entry.name: os.readlink(entry) for entry in os.scandir(f"/proc/{child.pid}/fd")}
        assert str(tmp_path / "stray") not in fds.values()
        pipes = {fd for fd, target in fds.items() if target.startswith("pipe:")}
        assert pipes == {"0", events_fd}, fds
        (watcher,) = child.children()
        assert os.listdir(f"/proc/{watcher.pid}/fd") == ["0"]  # the lifeline alone
        assert {p.pid for p in marked(str(tmp_path))} == {child.pid, watcher.pid}
        child.kill()
    finally:
        worker.join(30)
        os.close(stray)


def test_the_lifeline_kills_the_process_group_when_its_write_end_closes(tmp_path):
    script = (
        "import subprocess, sys, time\n"
        "from mpbench.runner.launchers.cell import watch_lifeline\n"
        "watch_lifeline()\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(grandchild.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    grandchild = int(process.stdout.readline())
    process.stdin.close()
    assert process.wait(timeout=10) == -signal.SIGKILL
    assert wait_gone(grandchild)


def test_a_child_whose_parent_already_died_kills_itself(tmp_path):
    """The parent pid on the command line is not the child's parent: it was re-parented, so
    the parent died before prctl could arm the parent-death signal."""
    read_fd, write_fd = os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "mpbench.runner.launchers.cell", str(write_fd), "1"],
        pass_fds=(write_fd,),
        stdin=subprocess.PIPE,  # kept open: it is not the lifeline that ends the child
        start_new_session=True,
    )
    os.close(write_fd)
    try:
        assert process.wait(timeout=30) == -signal.SIGKILL
        assert os.read(read_fd, 100) == b""  # it sent nothing
    finally:
        process.stdin.close()
        os.close(read_fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_parent_death_signal_kills_a_cell_stuck_holding_the_gil():
    """No lifeline watcher here: the kernel's SIGKILL alone ends a cell no Python runs in."""
    cell = (
        "import ctypes, os, sys\n"
        "from mpbench.runner.launchers.cell import die_with_parent\n"
        "die_with_parent(int(sys.argv[1]))\n"
        "print(os.getpid(), flush=True)\n"
        "ctypes.PyDLL(None).sleep(60)\n"
    )
    parent = (
        "import os, subprocess, sys, time\n"
        "command = [sys.executable, '-c', sys.argv[1], str(os.getpid())]\n"
        "subprocess.Popen(command, start_new_session=True)\n"
        "time.sleep(60)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", parent, cell], stdout=subprocess.PIPE, text=True
    )
    pid = int(process.stdout.readline())
    time.sleep(0.3)  # into the sleep
    process.kill()
    process.wait()
    assert wait_gone(pid, 5)


def test_an_interrupt_while_the_child_is_being_spawned_leaves_no_child(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM inside Popen after the fork: run_in_child never gets the process to
    kill, but Popen closes the child's stdin, its lifeline, and the child ends itself."""
    started: list[int] = []
    execute_child = subprocess.Popen._execute_child

    def interrupted(self, *args, **kwargs):
        execute_child(self, *args, **kwargs)
        started.append(self.pid)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "_execute_child", interrupted)
    monkeypatch.setenv("MPBENCH_FAULT", "hang")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path)
    monkeypatch.undo()
    (pid,) = started
    assert wait_gone(pid)
    with contextlib.suppress(ChildProcessError):  # reap it, unless subprocess did
        os.waitpid(pid, 0)
