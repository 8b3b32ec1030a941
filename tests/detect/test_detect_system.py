"""The machine's tuning state (`pyperf system show`'s checks) read from fake sysfs/procfs trees.

Each tree holds the files a kernel really exposes, in their real formats ("performance\\n",
"2-3\\n", "always [madvise] never\\n", ...); the contention reading is injected, so nothing
here depends on how busy the test machine is, except the two tests that say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run_mpbench

from mpbench.detect import collect, system
from mpbench.detect.system import (
    NO_CPUFREQ,
    TuningState,
    busy_at_start,
    format_cpu_list,
    parse_cpu_list,
    read_tuning,
)
from mpbench.results.contention import ContentionReading, judge

QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick.toml"
CPU = "sys/devices/system/cpu"


def quiet(cpus: int = 4) -> ContentionReading:
    return judge(
        ContentionReading(
            wall_s=0.5, cpus=cpus, busy_cores=0.02, own_cores=0.0, other_cores=0.02, steal_pct=0.0
        )
    )


def busy(cpus: int = 2, other: float = 1.5) -> ContentionReading:
    return judge(
        ContentionReading(
            wall_s=0.5, cpus=cpus, busy_cores=other, own_cores=0.0, other_cores=other, steal_pct=0.0
        )
    )


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def proc_files(load: str = "0.05 0.10 0.12 1/345 6789\n", running: int = 1) -> dict[str, str]:
    stat = (
        "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 0 0\n"
        "cpu0 1393280 32966 572056 13343292 6130 0 17875 0 0 0\n"
        "intr 199292675 52 0 0\n"
        "ctxt 2222222\n"
        "btime 1700000000\n"
        "processes 123456\n"
        f"procs_running {running}\n"
        "procs_blocked 0\n"
    )
    return {
        "proc/loadavg": load,
        "proc/stat": stat,
        "proc/sys/kernel/randomize_va_space": "2\n",
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
    }


def governors(n: int, governor: str, driver: str = "intel_pstate") -> dict[str, str]:
    files = {}
    for cpu in range(n):
        files[f"{CPU}/cpu{cpu}/cpufreq/scaling_governor"] = f"{governor}\n"
        files[f"{CPU}/cpu{cpu}/cpufreq/scaling_driver"] = f"{driver}\n"
    return files


def item(state: TuningState, name: str):
    return next(i for i in state.items if i.name == name)


def test_cpu_lists_in_the_kernels_format():
    assert parse_cpu_list("2-3\n") == [2, 3]
    assert parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("managed_irq,domain,2-3") == [2, 3]  # isolcpus= flags
    assert parse_cpu_list("(null)\n") == [] and parse_cpu_list("\n") == []
    assert parse_cpu_list(None) == []
    assert format_cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpu_list([5]) == "5" and format_cpu_list([]) == ""


def test_a_tuned_bare_metal_box(tmp_path):
    root = make_tree(
        tmp_path,
        {
            f"{CPU}/online": "0-3\n",
            **governors(4, "performance"),
            f"{CPU}/intel_pstate/no_turbo": "1\n",
            f"{CPU}/smt/active": "0\n",
            f"{CPU}/smt/control": "off\n",
            f"{CPU}/isolated": "2-3\n",
            f"{CPU}/nohz_full": "2-3\n",
            "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro isolcpus=2-3 nohz_full=2-3 "
            "rcu_nocbs=2-3\n",
            **proc_files(),
        },
    )
    state = read_tuning(root, busy=quiet(4), affinity=[2, 3])
    assert state.cpus == 4 and state.affinity == [2, 3]
    assert state.governors == {
        0: "performance",
        1: "performance",
        2: "performance",
        3: "performance",
    }
    assert state.scaling_driver == "intel_pstate"
    assert (state.turbo, state.turbo_source) == (False, "intel_pstate/no_turbo")
    assert (state.smt_active, state.smt_control) == (False, "off")
    assert state.isolated == [2, 3] and state.nohz_full == [2, 3]
    assert state.cmdline == {"isolcpus": "2-3", "nohz_full": "2-3", "rcu_nocbs": "2-3"}
    assert (state.aslr, state.thp) == (2, "madvise")
    assert (state.load_1min, state.runnable) == (0.05, 1)
    assert not state.contended_at_start
    for name in ("CPU scaling governor", "Turbo Boost", "SMT (hyper-threading)", "ASLR"):
        assert item(state, name).tuned is True and item(state, name).advice is None, name
    isolation = item(state, "isolated CPUs")
    assert isolation.tuned is True and isolation.advice is None
    assert "isolated 2-3 of 4" in isolation.state and "this process runs on 2-3" in isolation.state
    assert item(state, "CPU scaling governor").state == (
        "performance on all 4 CPUs (driver intel_pstate)"
    )
    assert item(state, "load at start").tuned is True
    data = json.loads(json.dumps(state.to_dict()))
    assert data["governors"] == {"0": "performance", "1": "performance", "2": "performance",
                                 "3": "performance"}  # fmt: skip
    assert data["busy"]["other_cores"] == 0.02 and data["busy_at_start"] is False
    assert [i["name"] for i in data["items"]] == [i.name for i in state.items]


def test_a_vm_without_cpufreq(tmp_path):
    # What a Firecracker/KVM guest shows: no cpufreq, SMT not supported, nothing isolated.
    root = make_tree(
        tmp_path,
        {
            f"{CPU}/online": "0-1\n",
            f"{CPU}/cpufreq/.keep": "",  # the directory exists, empty
            f"{CPU}/smt/active": "0\n",
            f"{CPU}/smt/control": "notsupported\n",
            f"{CPU}/isolated": "\n",
            # Arguments after "--" go to init, not the kernel.
            "proc/cmdline": "console=ttyS0 quiet psi=1 -- --init isolcpus=1\n",
            **proc_files("0.22 0.17 0.08 1/87 4289\n"),
        },
    )
    state = read_tuning(root, busy=quiet(2), affinity=[0, 1])
    assert state.governors == {} and state.scaling_driver is None
    governor = item(state, "CPU scaling governor")
    assert governor.state == NO_CPUFREQ == "not exposed (no cpufreq: usual in a VM)"
    assert governor.tuned is None and governor.advice is None
    assert state.turbo is None and item(state, "Turbo Boost").state.startswith("not exposed")
    smt = item(state, "SMT (hyper-threading)")
    assert smt.state.startswith("notsupported") and smt.tuned is None
    assert state.isolated == [] and state.nohz_full == [] and state.cmdline == {}
    isolation = item(state, "isolated CPUs")
    assert isolation.state == "none" and "isolcpus=" in isolation.advice
    assert item(state, "CPUs and affinity").state == (
        "2 logical CPUs online; this process may run on all (0-1)"
    )
    load = item(state, "load at start")
    assert load.state.startswith("load average 0.22 (1 min), 1 runnable thread(s)")
    assert "other processes used 0.02 of 2 cores over 0.5 s" in load.state


def test_isolated_cpus_this_process_does_not_use(tmp_path):
    root = make_tree(
        tmp_path,
        {
            f"{CPU}/online": "0-3\n",
            **governors(4, "performance"),
            f"{CPU}/isolated": "2-3\n",
            f"{CPU}/nohz_full": "(null)\n",
            "proc/cmdline": "root=/dev/vda1 isolcpus=managed_irq,domain,2-3\n",
            **proc_files(),
        },
    )
    state = read_tuning(root, busy=quiet(4), affinity=[0, 1, 2, 3])
    assert state.isolated == [2, 3] and state.nohz_full == []
    assert state.cmdline == {"isolcpus": "managed_irq,domain,2-3"}
    isolation = item(state, "isolated CPUs")
    assert isolation.tuned is False
    assert "run it with taskset -c 2-3" in isolation.advice
    assert "rcu_nocbs=" in isolation.advice


def test_smt_on_powersave_and_turbo(tmp_path):
    root = make_tree(
        tmp_path,
        {
            f"{CPU}/online": "0-7\n",
            **governors(8, "powersave"),
            f"{CPU}/intel_pstate/no_turbo": "0\n",
            f"{CPU}/smt/active": "1\n",
            f"{CPU}/smt/control": "on\n",
            f"{CPU}/isolated": "\n",
            f"{CPU}/nohz_full": "(null)\n",
            "proc/cmdline": "BOOT_IMAGE=/vmlinuz ro quiet splash\n",
            **proc_files(),
            "proc/sys/kernel/randomize_va_space": "0\n",
            "sys/kernel/mm/transparent_hugepage/enabled": "[always] madvise never\n",
        },
    )
    state = read_tuning(root, busy=quiet(8), affinity=range(8))
    smt = item(state, "SMT (hyper-threading)")
    assert smt.tuned is False and "sibling hyper-threads share a core" in smt.advice
    governor = item(state, "CPU scaling governor")
    assert governor.state == "powersave on all 8 CPUs (driver intel_pstate)"
    assert governor.tuned is False
    assert "set the performance governor (cpupower frequency-set -g performance)" in (
        governor.advice
    )
    turbo = item(state, "Turbo Boost")
    assert turbo.tuned is False and "no_turbo" in turbo.advice
    aslr = item(state, "ASLR")
    assert aslr.tuned is False and "randomize_va_space" in aslr.advice
    assert state.thp == "always" and item(state, "transparent huge pages").advice


def test_mixed_governors_amd_boost_and_a_narrow_affinity(tmp_path):
    files = {**governors(4, "performance", "amd-pstate-epp"), **proc_files()}
    files[f"{CPU}/cpu3/cpufreq/scaling_governor"] = "schedutil\n"
    files[f"{CPU}/online"] = "0-3\n"
    files[f"{CPU}/cpufreq/boost"] = "1\n"
    state = read_tuning(make_tree(tmp_path, files), busy=quiet(4), affinity=[1])
    governor = item(state, "CPU scaling governor")
    assert governor.state == (
        "performance on CPUs 0-2, schedutil on CPUs 3 (driver amd-pstate-epp)"
    )
    assert governor.tuned is False
    assert (state.turbo, state.turbo_source) == (True, "cpufreq/boost")
    assert "cpufreq/boost" in item(state, "Turbo Boost").advice
    cpus = item(state, "CPUs and affinity")
    assert "this process may run on 1: 1" in cpus.state and "1 threads" in cpus.advice


def test_a_busy_machine_at_start(tmp_path):
    root = make_tree(tmp_path, {f"{CPU}/online": "0-1\n", **proc_files("2.10 1.5 1.0 3/90 1\n", 3)})
    state = read_tuning(root, busy=busy(2, 1.5), affinity=[0, 1])
    assert state.contended_at_start
    load = item(state, "load at start")
    assert load.tuned is False
    assert load.advice.startswith(
        "other processes use 1.50 cores: results will be marked contended"
    )
    assert state.to_dict()["busy_at_start"] is True


def test_nothing_exposed_is_no_error(tmp_path):
    # macOS, Windows, a container without /sys: every item says so, nothing raises.
    state = read_tuning(tmp_path / "missing", measure_busy=False)
    assert state.governors == {} and state.turbo is None and state.aslr is None
    assert state.busy is None and state.load_1min is None and state.runnable is None
    assert item(state, "ASLR").state == "not exposed"
    assert "not measured" in item(state, "load at start").state
    json.dumps(state.to_dict())


def test_this_machine(monkeypatch):
    state = read_tuning(measure_busy=False)  # whatever it is, it reads without raising
    assert state.cpus and state.cpus >= 1
    assert len(state.items) == 8


def test_one_busy_reading_serves_a_runs_start(monkeypatch):
    calls = []

    def fake(seconds=0.5):
        calls.append(seconds)
        return quiet(2)

    monkeypatch.setattr(system, "measure_now", fake)
    monkeypatch.setattr(system, "_RECENT", None)
    first = busy_at_start()
    assert busy_at_start() is first and len(calls) == 1
    assert busy_at_start(max_age_s=0) is not first and len(calls) == 2


def test_collect_reads_tuning_only_when_asked(monkeypatch, no_gpu):
    monkeypatch.setattr(system, "measure_now", lambda seconds=0.5: quiet(2))
    monkeypatch.setattr(system, "_RECENT", None)
    assert collect(environ={}).to_dict()["tuning"] is None
    data = collect(environ={}, tuning=True).to_dict()
    assert data["tuning"]["busy"]["other_cores"] == 0.02
    assert data["tuning"]["items"][0]["name"] == "CPU scaling governor"


def test_cli_shows_the_tuning_section():
    # The real machine: a real 0.5 s reading of how busy it is.
    done = run_mpbench("detect", env={"COLUMNS": "200"}, fork=False)
    assert done.returncode == 0, done.stderr
    assert "Machine tuning" in done.stdout
    for name in ("CPU scaling governor", "Turbo Boost", "ASLR", "load at start"):
        assert name in done.stdout
    done = run_mpbench("detect", "--json", fork=False)
    tuning = json.loads(done.stdout)["tuning"]
    assert tuning["busy"]["wall_s"] >= 0.4 and len(tuning["items"]) == 8


# --- `mpbench run`: the busy warning before the first cell, and environment.json ---


class _Report:
    gpus = ()

    def device_traits(self, kind, index):
        from mpbench.policies import DeviceTraits

        return DeviceTraits(kind="cpu", name="test cpu")

    def to_dict(self):
        return {}


def _plan():
    from mpbench.runner.config import RunOptions, build_config
    from mpbench.runner.matrix import expand

    options = RunOptions(
        config=QUICK, frameworks=["torch"], workloads=["mnist_dense"], policies=["fp32"],
        data="synthetic", repeat=1,
    )  # fmt: skip
    config = build_config(options)
    return options, config, expand(config, _Report(), "run")[2]


@pytest.mark.parametrize("reading", [busy(2, 1.5), quiet(2)], ids=["busy", "quiet"])
def test_run_warns_before_the_first_cell_when_busy(monkeypatch, reading):
    import importlib

    # mpbench.runner re-exports a function named preflight: import the module by name.
    module = importlib.import_module("mpbench.runner.preflight")
    monkeypatch.setattr(module, "busy_at_start", lambda: reading)
    _, config, cells = _plan()
    said: list[str] = []
    module.preflight(config, cells, said.append)
    warnings = [m for m in said if m.startswith("the machine is busy")]
    if reading.other_cores > 1:
        (line,) = warnings
        assert "other processes use 1.50 of 2 cores" in line and "contended" in line
    else:
        assert warnings == []


def test_environment_json_holds_the_tuning(monkeypatch):
    from mpbench.runner.loop import environment

    monkeypatch.setattr(system, "measure_now", lambda seconds=0.5: busy(2, 1.5))
    monkeypatch.setattr(system, "_RECENT", None)
    options, config, _ = _plan()
    data = json.loads(json.dumps(environment(options, config, _Report(), "cpu")))
    assert data["tuning"]["busy_at_start"] is True
    assert {i["name"] for i in data["tuning"]["items"]} >= {"ASLR", "load at start"}
