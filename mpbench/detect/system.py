"""The machine's tuning state for benchmarking, as `pyperf system show` reports it.

pyperf (pyperf/_system.py) checks what makes timings unsteady on Linux: the CPU scaling
governor, Turbo Boost, isolated CPUs (isolcpus=, nohz_full=, rcu_nocbs=), ASLR. mpbench reads
the same files, adds SMT, transparent huge pages, this process's CPU affinity and how busy the
machine is right now, and says what to change where it matters. It changes nothing (pyperf's
`system tune` writes to sysfs as root; mpbench only reports).

Every path is read under `root` (default "/"), so a test can build a fake sysfs/procfs tree.
A file that is not there is "not exposed", never an error: VMs usually have no cpufreq, macOS
has no /sys at all. Imports only the standard library, psutil and mpbench.results.contention.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpbench.results.contention import ContentionReading, busy_warning, measure_now

NO_CPUFREQ = "not exposed (no cpufreq: usual in a VM)"
PERFORMANCE = "performance"
CMDLINE_KEYS = ("isolcpus", "nohz_full", "rcu_nocbs")
_ASLR = {0: "off (no randomization)", 1: "conservative randomization", 2: "full randomization"}


# --- CPU lists: the kernel's "0-3,8,10-11" format ------------------------------------------


def parse_cpu_list(text: str | None) -> list[int]:
    """CPUs in the kernel's list format ("0-3,8"); [] for "", "(null)" or garbage. isolcpus=
    may carry flags first ("managed_irq,domain,2-3"): those are skipped."""
    cpus: set[int] = set()
    for part in (text or "").strip().split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?(?::\d+/\d+)?", part.strip())
        if match:
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) else first
            cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in [*ordered, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(parts)


# --- the readings --------------------------------------------------------------------------


@dataclass(frozen=True)
class TuningItem:
    """One line of the report: what it is, its state, and what to do about it."""

    name: str
    state: str
    tuned: bool | None  # True: as a benchmark wants it; False: worth changing; None: a fact
    advice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "tuned": self.tuned, "advice": self.advice}


@dataclass
class TuningState:
    """What `pyperf system show` would say about this machine, plus the load at start.
    None / empty where the machine does not expose it."""

    cpus: int | None  # logical CPUs online
    affinity: list[int] | None  # the CPUs this process may run on (taskset, cpuset)
    governors: dict[int, str]  # CPU -> scaling governor; {} when cpufreq is not exposed
    scaling_driver: str | None  # cpu0's cpufreq driver: intel_pstate, amd-pstate, acpi-cpufreq
    turbo: bool | None  # Turbo Boost / boost enabled; None when not exposed
    turbo_source: str | None  # the file it comes from
    smt_active: bool | None  # /sys/devices/system/cpu/smt/active
    smt_control: str | None  # on, off, forceoff, notsupported, notimplemented
    isolated: list[int]  # /sys/devices/system/cpu/isolated
    nohz_full: list[int]  # /sys/devices/system/cpu/nohz_full
    cmdline: dict[str, str]  # isolcpus= / nohz_full= / rcu_nocbs= as the kernel was booted
    aslr: int | None  # /proc/sys/kernel/randomize_va_space: 0, 1, 2
    thp: str | None  # transparent huge pages: always, madvise, never
    load_1min: float | None
    runnable: int | None  # runnable threads right now (procs_running, this one included)
    busy: ContentionReading | None = None  # a short window of other processes' CPU use
    items: list[TuningItem] = field(default_factory=list)

    @property
    def contended_at_start(self) -> bool:
        return self.busy is not None and busy_warning(self.busy) is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "affinity": self.affinity,
            "governors": {str(cpu): name for cpu, name in sorted(self.governors.items())},
            "scaling_driver": self.scaling_driver,
            "turbo": self.turbo,
            "turbo_source": self.turbo_source,
            "smt_active": self.smt_active,
            "smt_control": self.smt_control,
            "isolated": self.isolated,
            "nohz_full": self.nohz_full,
            "cmdline": dict(self.cmdline),
            "aslr": self.aslr,
            "transparent_hugepage": self.thp,
            "load_1min": self.load_1min,
            "runnable_threads": self.runnable,
            "busy": self.busy.to_dict() if self.busy is not None else None,
            "busy_at_start": self.contended_at_start,
            "items": [item.to_dict() for item in self.items],
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _first(path: Path) -> str | None:
    text = _read(path)
    return None if text is None else (text.splitlines() or [""])[0].strip()


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _governors(cpu_dir: Path) -> dict[int, str]:
    out = {}
    for path in cpu_dir.glob("cpu[0-9]*/cpufreq/scaling_governor"):
        number = _int(path.parent.parent.name[3:])
        name = _first(path)
        if number is not None and name:
            out[number] = name
    return dict(sorted(out.items()))


def _turbo(cpu_dir: Path) -> tuple[bool | None, str | None]:
    no_turbo = _first(cpu_dir / "intel_pstate/no_turbo")
    if no_turbo in ("0", "1"):
        return no_turbo == "0", "intel_pstate/no_turbo"
    boost = _first(cpu_dir / "cpufreq/boost")  # acpi-cpufreq, amd-pstate
    if boost in ("0", "1"):
        return boost == "1", "cpufreq/boost"
    return None, None


def _cmdline(root: Path) -> dict[str, str]:
    text = _read(root / "proc/cmdline") or ""
    # The kernel's own arguments end at "--" (what follows goes to init).
    words = text.split(" -- ", 1)[0].split()
    found = {}
    for word in words:
        name, sep, value = word.partition("=")
        if sep and name in CMDLINE_KEYS:
            found[name] = value
    return found


def _thp(root: Path) -> str | None:
    text = _first(root / "sys/kernel/mm/transparent_hugepage/enabled")  # "always [madvise] never"
    match = re.search(r"\[(\w+)\]", text or "")
    return match.group(1) if match else None


def _runnable(root: Path) -> int | None:
    for line in (_read(root / "proc/stat") or "").splitlines():
        if line.startswith("procs_running "):
            return _int(line.split()[1])
    return None


def _load_1min(root: Path) -> float | None:
    text = _first(root / "proc/loadavg")  # "0.22 0.17 0.08 1/87 4289"
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


def _affinity() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return None


# A `run` checks how busy the machine is before its first cell and records the tuning in
# environment.json right after: one 0.5 s reading serves both.
_RECENT: tuple[float, ContentionReading] | None = None


def busy_at_start(max_age_s: float = 30.0, seconds: float = 0.5) -> ContentionReading:
    """contention.measure_now(seconds): other processes' CPU use over a short window, this
    process idle. A reading this process took less than `max_age_s` ago is reused."""
    global _RECENT
    now = time.monotonic()
    if _RECENT is not None and now - _RECENT[0] < max_age_s:
        return _RECENT[1]
    reading = measure_now(seconds)
    _RECENT = (time.monotonic(), reading)
    return reading


def read_tuning(
    root: str | os.PathLike[str] = "/",
    *,
    measure_busy: bool = True,
    busy: ContentionReading | None = None,
    affinity: Iterable[int] | None = None,
) -> TuningState:
    """Read the tuning state under `root`; never raises. `busy` is a contention reading to use
    (else one is taken when `measure_busy`: 0.5 s); `affinity` stands in for this process's."""
    base = Path(root)
    cpu_dir = base / "sys/devices/system/cpu"
    online = parse_cpu_list(_first(cpu_dir / "online"))
    turbo, turbo_source = _turbo(cpu_dir)
    active = _first(cpu_dir / "smt/active")
    if busy is None and measure_busy:
        busy = busy_at_start()
    state = TuningState(
        cpus=len(online) or os.cpu_count(),
        affinity=sorted(set(affinity)) if affinity is not None else _affinity(),
        governors=_governors(cpu_dir),
        scaling_driver=_first(cpu_dir / "cpu0/cpufreq/scaling_driver") or None,
        turbo=turbo,
        turbo_source=turbo_source,
        smt_active=None if active not in ("0", "1") else active == "1",
        smt_control=_first(cpu_dir / "smt/control") or None,
        isolated=parse_cpu_list(_first(cpu_dir / "isolated")),
        nohz_full=parse_cpu_list(_first(cpu_dir / "nohz_full")),
        cmdline=_cmdline(base),
        aslr=_int(_first(base / "proc/sys/kernel/randomize_va_space")),
        thp=_thp(base),
        load_1min=_load_1min(base),
        runnable=_runnable(base),
        busy=busy,
    )
    state.items = judge(state)
    return state


# --- the advice ----------------------------------------------------------------------------


def _governor_item(s: TuningState) -> TuningItem:
    name = "CPU scaling governor"
    if not s.governors:
        return TuningItem(name, NO_CPUFREQ, None)
    by_name: dict[str, list[int]] = {}
    for cpu, governor in s.governors.items():
        by_name.setdefault(governor, []).append(cpu)
    if len(by_name) == 1:
        (governor,) = by_name
        state = f"{governor} on all {len(s.governors)} CPUs"
    else:
        state = ", ".join(f"{g} on CPUs {format_cpu_list(c)}" for g, c in by_name.items())
    if s.scaling_driver:
        state += f" (driver {s.scaling_driver})"
    if set(by_name) == {PERFORMANCE}:
        return TuningItem(name, state, True)
    return TuningItem(
        name,
        state,
        False,
        "set the performance governor (cpupower frequency-set -g performance) for steadier "
        "timings: other governors change the clock with the load",
    )


def _turbo_item(s: TuningState) -> TuningItem:
    name = "Turbo Boost"
    if s.turbo is None:
        return TuningItem(name, "not exposed (no intel_pstate/no_turbo or cpufreq/boost)", None)
    where = f" ({s.turbo_source})"
    if not s.turbo:
        return TuningItem(name, "disabled" + where, True)
    if s.turbo_source == "intel_pstate/no_turbo":
        how = "echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo"
    else:
        how = "echo 0 > /sys/devices/system/cpu/cpufreq/boost"
    return TuningItem(
        name,
        "enabled" + where,
        False,
        "the clock rises and falls with temperature and the number of busy cores, so CPU "
        f"timings drift; for steadier (lower) clocks disable it ({how}), as pyperf advises",
    )


def _smt_item(s: TuningState) -> TuningItem:
    name = "SMT (hyper-threading)"
    if s.smt_active is None and s.smt_control is None:
        return TuningItem(name, "not exposed", None)
    if s.smt_active:
        return TuningItem(
            name,
            f"on (control: {s.smt_control or '?'})",
            False,
            "sibling hyper-threads share a core: a cell's threads slow each other and slow "
            "down when anything runs on the sibling; for steadier CPU timings use one thread "
            "per core (--threads <physical cores>) or turn SMT off "
            "(echo off > /sys/devices/system/cpu/smt/control)",
        )
    if s.smt_control in ("notsupported", "notimplemented"):
        return TuningItem(
            name, f"{s.smt_control} (a VM's vCPUs may still be a host core's siblings)", None
        )
    return TuningItem(name, f"off (control: {s.smt_control or '?'})", True)


def _isolation_item(s: TuningState) -> TuningItem:
    name = "isolated CPUs"
    given = ", ".join(f"{k}={v}" for k, v in s.cmdline.items())
    if not s.isolated and not s.nohz_full:
        state = "none" + (f" (kernel command line: {given})" if given else "")
        if (s.cpus or 1) < 2:
            return TuningItem(name, state, None)
        return TuningItem(
            name,
            state,
            None,
            "for the steadiest CPU timings, isolate CPUs (kernel parameters isolcpus=, "
            "nohz_full=, rcu_nocbs=) and run mpbench on them with taskset -c",
        )
    parts = []
    if s.isolated:
        parts.append(f"isolated {format_cpu_list(s.isolated)} of {s.cpus or '?'}")
    if s.nohz_full:
        parts.append(f"nohz_full {format_cpu_list(s.nohz_full)}")
    state = ", ".join(parts) + (f" (kernel command line: {given})" if given else "")
    quiet = set(s.isolated or s.nohz_full)
    advice = []
    tuned: bool | None = None
    if s.affinity is not None:
        if set(s.affinity) <= quiet:
            tuned = True
            state += f"; this process runs on {format_cpu_list(s.affinity)}"
        else:
            tuned = False
            advice.append(
                f"this process may run on CPUs {format_cpu_list(s.affinity)}, not only the "
                f"isolated ones: run it with taskset -c {format_cpu_list(quiet)}"
            )
    if s.isolated and "rcu_nocbs" not in s.cmdline:
        advice.append("add rcu_nocbs= for the isolated CPUs, so RCU callbacks run elsewhere")
    if (
        s.nohz_full
        and s.scaling_driver == "intel_pstate"
        and set(s.governors.values()) != {PERFORMANCE}
    ):
        tuned = False
        advice.append(
            "intel_pstate updates the clock from the scheduler tick, which nohz_full CPUs "
            "lack: set the performance governor on them (pyperf's warning)"
        )
    return TuningItem(name, state, tuned, "; ".join(advice) or None)


def _aslr_item(s: TuningState) -> TuningItem:
    name = "ASLR"
    if s.aslr is None:
        return TuningItem(name, "not exposed", None)
    state = f"{_ASLR.get(s.aslr, 'unknown')} (randomize_va_space={s.aslr})"
    if s.aslr == 2:
        return TuningItem(name, state, True)
    return TuningItem(
        name,
        state,
        False,
        "write 2 into /proc/sys/kernel/randomize_va_space: with full randomization the "
        "repeats average over memory layouts instead of all landing on one (pyperf's advice)",
    )


def _thp_item(s: TuningState) -> TuningItem:
    name = "transparent huge pages"
    if s.thp is None:
        return TuningItem(name, "not exposed", None)
    if s.thp == "always":
        return TuningItem(
            name,
            "always",
            None,
            "whether a tensor gets huge pages depends on how fragmented memory is, so step "
            "times can differ between runs; madvise (the usual default) leaves it to the program",
        )
    return TuningItem(name, s.thp, None)


def _cpus_item(s: TuningState) -> TuningItem:
    name = "CPUs and affinity"
    state = f"{s.cpus or '?'} logical CPUs online"
    if s.affinity is None:
        return TuningItem(name, state + "; affinity not readable on this OS", None)
    if s.cpus is not None and len(s.affinity) >= s.cpus:
        return TuningItem(
            name, state + f"; this process may run on all ({format_cpu_list(s.affinity)})", None
        )
    return TuningItem(
        name,
        state + f"; this process may run on {len(s.affinity)}: {format_cpu_list(s.affinity)}",
        None,
        f"taskset or a cgroup cpuset narrows this process: cells get {len(s.affinity)} "
        "threads by default (--threads)",
    )


def _load_item(s: TuningState) -> TuningItem:
    name = "load at start"
    parts = []
    if s.load_1min is not None:
        parts.append(f"load average {s.load_1min:.2f} (1 min)")
    if s.runnable is not None:
        parts.append(f"{s.runnable} runnable thread(s)")
    busy = s.busy
    if busy is None:
        parts.append("other processes' CPU use not measured")
        return TuningItem(name, ", ".join(parts), None)
    parts.append(
        f"other processes used {busy.other_cores:.2f} of {busy.cpus} cores over {busy.wall_s:.1f} s"
    )
    if busy.steal_pct:
        parts.append(f"{busy.steal_pct:.1f} % steal")
    if busy_warning(busy) is None:
        return TuningItem(name, ", ".join(parts), True)
    return TuningItem(
        name,
        ", ".join(parts),
        False,
        f"other processes use {busy.other_cores:.2f} cores: results will be marked contended; "
        "stop them or wait for a quiet machine",
    )


def judge(state: TuningState) -> list[TuningItem]:
    """Each setting with its advice, in the order `detect` shows them."""
    return [
        _governor_item(state),
        _turbo_item(state),
        _smt_item(state),
        _isolation_item(state),
        _aslr_item(state),
        _thp_item(state),
        _cpus_item(state),
        _load_item(state),
    ]
