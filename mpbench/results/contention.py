"""What else used the machine while a cell's timed steps ran (docs/measurement.md, "Contention").

A benchmark cannot tell from its own step times whether a slow process was slow by itself or
because something else ran: a whole process can run 50 % slow with its two halves agreeing.
So each cell reads the machine's counters at both ends of its timed window and derives:

- other_cores: CPU time of every process outside the cell's own process tree, in cores
  (busy time from /proc/stat through psutil, minus the tree's own CPU time);
- steal_pct: time the hypervisor gave this VM's CPUs to another VM (0 on bare metal);
- psi_some_pct: the share of the window in which some task waited for a CPU
  (/proc/pressure/cpu; system-wide, so it includes the cell's own threads);
- throttled_s: CPU-quota throttling of this process's cgroup (cpu.stat);
- load and runnable threads at both ends, and the CPU clock where cpufreq exposes it;
- on NVIDIA GPUs (filled in by telemetry/cell.py): other compute processes on the cell's GPU
  and the NVML clock-event reasons seen during the window.

`reasons()` is the one rule that marks a cell `contended`. This module imports nothing from
mpbench but the record's dataclass, and lives in results/ (which every package may use) so
that `detect`, the runner and telemetry read the same counters without `detect` importing
telemetry (telemetry imports detect for its NVML mapping: one direction).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil

from mpbench.results.schema import ContentionStats as ContentionReading

# The rule (docs/measurement.md, "Contention"): a quiet 2-core VM read other_cores 0.00-0.04
# (kernel threads, the parent's wait), one busy neighbour 1.02.
OTHER_CORES_LIMIT = 0.25  # another process used at least a quarter of a core ...
SATURATION = 0.9  # ... while the machine was (nearly) full: it took time we could have used
STEAL_PCT_LIMIT = 2.0  # the hypervisor ran another VM on our CPUs ...
# ... for at least this long: /proc/stat counts in ticks of 10 ms (USER_HZ 100), so in a
# half-second window on 2 cores two stray ticks already read 2 % (seen on a quiet VM).
STEAL_MIN_S = 0.05
# The CPU counters (/proc/stat, a process's utime and stime) advance in clock ticks of
# 1/USER_HZ s, so over a window of a few ticks rounding alone reads tenths of a core:
# 29-37 ms windows on a quiet 2-core VM read other_cores 0.27-0.35 and busy 2.26 of 2 cores.
# Over at least MIN_WINDOW_TICKS ticks a tick or two of rounding reads at most ~0.1 core,
# under OTHER_CORES_LIMIT; a shorter window cannot tell others' CPU use from rounding.
CLOCK_TICK_S = 1 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
MIN_WINDOW_TICKS = 20
MIN_WINDOW_S = MIN_WINDOW_TICKS * CLOCK_TICK_S
# NVML clock-event reasons that slow a GPU down (nvml.h "NvmlClocksEventReasons"). Idle (0x1),
# the application clock setting (0x2), sync boost (0x10) and the display clock (0x100) do not.
GPU_SLOWDOWN_REASONS = {
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
}
# Recorded, but no contention: the board holding its power limit, which any sustained full
# load reaches (an H200 did on every cell of transformer_lm_large, bf16 and fp8 alike). It is
# the GPU's sustained speed, the same for every cell of the run, not something else slowing it.
AT_POWER_LIMIT = ("SwPowerCap",)

PSI_CPU = Path("/proc/pressure/cpu")
CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def reasons(reading: ContentionReading) -> list[str]:
    """The rule: what makes a window contended, in words; [] when it was quiet."""
    r = reading
    out = []
    saturated = r.own_cores + r.other_cores > SATURATION * r.cpus
    measured = "other_cores" not in r.unavailable  # a window too short for the counters
    if measured and r.other_cores > OTHER_CORES_LIMIT and saturated:
        out.append(f"other processes used {r.other_cores:.2f} of {r.cpus} cores")
    stolen_s = (r.steal_pct or 0.0) / 100 * r.wall_s * r.cpus
    if r.steal_pct is not None and r.steal_pct > STEAL_PCT_LIMIT and stolen_s >= STEAL_MIN_S:
        out.append(f"{r.steal_pct:.1f} % of CPU time stolen by the hypervisor")
    if r.throttled_s:
        out.append(f"the cgroup's CPU quota throttled it for {r.throttled_s:.2f} s")
    if r.gpu_other_processes:
        out.append(f"{r.gpu_other_processes} other compute process(es) on the GPU")
    slowed = [x for x in r.gpu_clock_event_reasons or [] if x not in AT_POWER_LIMIT]
    if slowed:
        out.append("GPU clocks slowed: " + ", ".join(slowed))
    return out


def taken_share(reading: ContentionReading) -> float:
    """The share of the machine's CPU time that went elsewhere during the window: stolen by
    the hypervisor, or used by other processes (0.05: 5 % of every core's time)."""
    stolen = (reading.steal_pct or 0.0) / 100
    others = max(reading.other_cores, 0.0) / reading.cpus if reading.cpus else 0.0
    return stolen + others


# How far CPU time taken by others moved a timing figure, per unit of taken share: measured by
# benchmarks/steal_gate.py on the 2-core AMX Xeon (issue 55; docs/measurement.md, "Deciding on
# a busy machine"), a process busy 10 % and 20 % of one core standing in for steal (which
# cannot be made on purpose and takes CPU time the same way): a 5 % taken share moved torch
# mnist_dense's bf16 speed-up +3.1 to +10.1 % and float32's step time +9.6 to +11.5 %; a 10 %
# share -1.4 to +24.6 % and +14.0 to +26.9 %. Both figures move alike, up to 2.7 times the
# share: 3 leaves room.
SHIFT_PER_SHARE = 3.0
# A whole busy core (a 50 % share) moved the speed-up -56 % and the step time +621 % (torch's
# threads wait for the one that lost its core): past a 10 % share, the largest partial one
# measured, nothing bounds the shift and no decision is taken.
DECIDABLE_SHARE = 0.10


def busy_margin(share: float) -> float | None:
    """How far a taken `share` of the CPU time can have moved a speed-up, a scaling
    efficiency or a step time, as a fraction (0.15: ±15 %); None beyond what was measured."""
    if share > DECIDABLE_SHARE:
        return None
    return share * SHIFT_PER_SHARE


def judge(reading: ContentionReading) -> ContentionReading:
    """Mark the reading by the rule (in place) and return it."""
    reading.why = reasons(reading)
    reading.contended = bool(reading.why)
    return reading


def slowing_reasons(mask: int) -> list[str]:
    """The names of the slowing clock-event bits in an NVML reasons mask."""
    return [name for bit, name in GPU_SLOWDOWN_REASONS.items() if mask & bit]


# --- readers: each returns None where the machine does not have the counter ---------------


def _busy_and_steal() -> tuple[float, float | None]:
    """Seconds of busy CPU time since boot (all CPUs) and of steal. guest/guest_nice are
    already inside user/nice (psutil docs), iowait is idle time, steal is not ours."""
    t = psutil.cpu_times()
    busy = sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
    return busy, getattr(t, "steal", None)


def _tree_cpu(root: psutil.Process, descendants: bool = True) -> float:
    """CPU seconds of `root` and (`descendants`) its live descendants and reaped children."""
    total = 0.0
    try:
        times = root.cpu_times()
        total += times.user + times.system
        if not descendants:
            return total
        total += times.children_user + times.children_system
        children = root.children(recursive=True)
    except psutil.Error:
        return total
    for child in children:
        try:
            times = child.cpu_times()
        except psutil.Error:  # it ended between the listing and the read
            continue
        total += times.user + times.system
    return total


def _psi_total_us(path: Path = PSI_CPU) -> int | None:
    try:
        line = path.read_text().splitlines()[0]  # "some avg10=… avg60=… avg300=… total=<µs>"
        return int(line.rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def _cgroup_cpu_stat(root: Path = CGROUP_ROOT) -> Path | None:
    """This process's cgroup cpu.stat: v2 (the `0::` line) or v1's cpu controller."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        names = controllers.split(",")
        candidates = []
        if controllers == "":
            candidates.append(root / path.lstrip("/") / "cpu.stat")
        elif "cpu" in names:
            for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
                candidates.append(root / mount / path.lstrip("/") / "cpu.stat")
        for candidate in candidates:
            if candidate.is_file():
                return candidate
    return None


def _throttled_s(stat: Path | None) -> float | None:
    """Seconds throttled so far: v2 `throttled_usec`, v1 `throttled_time` (ns)."""
    if stat is None:
        return None
    try:
        fields = dict(line.split() for line in stat.read_text().splitlines() if " " in line)
    except (OSError, ValueError):
        return None
    if "throttled_usec" in fields:
        return int(fields["throttled_usec"]) / 1e6
    if "throttled_time" in fields:
        return int(fields["throttled_time"]) / 1e9
    return None


def _runnable() -> int | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _load_1min() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _cpu_mhz(path: Path = CPUFREQ) -> float | None:
    """The current clock where cpufreq exposes it (kHz in sysfs). Not psutil.cpu_freq(): in
    a VM it repeats /proc/cpuinfo's constant, which says nothing about throttling."""
    try:
        return int(path.read_text().strip()) / 1000
    except (OSError, ValueError):
        return None


# --- the window -----------------------------------------------------------------------------


def cell_root() -> psutil.Process:
    """The cell's process tree: this process, or for a torchrun rank the agent above it (the
    other ranks are the same cell, not contention)."""
    me = psutil.Process()
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        parent = me.parent()
        if parent is not None:
            return parent
    return me


class ContentionWindow:
    """start() and stop() around a timed window; stop() returns the judged reading. Never
    raises into the caller: a counter that cannot be read is None with the reason."""

    def __init__(self, root: psutil.Process | None = None, descendants: bool = True) -> None:
        self.root = root if root is not None else cell_root()
        self.descendants = descendants
        self._cgroup = _cgroup_cpu_stat()
        self._start: dict[str, Any] = {}

    def _read(self) -> dict[str, Any]:
        busy, steal = _busy_and_steal()
        return {
            "t": time.monotonic(),
            "busy": busy,
            "steal": steal,
            "own": _tree_cpu(self.root, self.descendants),
            "psi": _psi_total_us(),
            "throttled": _throttled_s(self._cgroup),
            "load": _load_1min(),
        }

    def start(self) -> ContentionWindow:
        self._start = self._read()
        return self

    def long_enough(self) -> bool:
        """Whether the window so far spans enough clock ticks for its CPU reading to mean
        anything (MIN_WINDOW_TICKS)."""
        return time.monotonic() - self._start["t"] >= MIN_WINDOW_S

    def stop(self) -> ContentionReading:
        a, b = self._start, self._read()
        wall = max(b["t"] - a["t"], 1e-9)
        cpus = psutil.cpu_count() or 1
        # Tick rounding (USER_HZ) can read more busy cores than exist, and the cell's own a
        # hair above the machine's busy time: neither is real.
        busy = min((b["busy"] - a["busy"]) / wall, float(cpus))
        own = min((b["own"] - a["own"]) / wall, busy)
        reading = ContentionReading(
            wall_s=round(wall, 3),
            cpus=cpus,
            busy_cores=round(busy, 3),
            own_cores=round(own, 3),
            other_cores=round(busy - own, 3),
            load_1min_start=a["load"],
            load_1min_end=b["load"],
            runnable_end=_runnable(),
            cpu_mhz=_cpu_mhz(),
        )
        unavailable = reading.unavailable
        if wall < MIN_WINDOW_S:
            unavailable["other_cores"] = (
                f"not measured (window too short): {wall * 1000:.0f} ms is under "
                f"{MIN_WINDOW_TICKS} ticks of the CPU counters ({MIN_WINDOW_S * 1000:.0f} ms), "
                "where their rounding alone reads tenths of a core"
            )
        if a["steal"] is not None and b["steal"] is not None:
            reading.steal_pct = round(100 * (b["steal"] - a["steal"]) / (wall * cpus), 2)
        else:
            unavailable["steal_pct"] = "this OS reports no steal time"
        if a["psi"] is not None and b["psi"] is not None:
            reading.psi_some_pct = round((b["psi"] - a["psi"]) / 1e4 / wall, 2)
        else:
            unavailable["psi_some_pct"] = f"{PSI_CPU} is not readable (kernel without PSI)"
        if a["throttled"] is not None and b["throttled"] is not None:
            reading.throttled_s = round(b["throttled"] - a["throttled"], 3)
        else:
            unavailable["throttled_s"] = "no cgroup cpu.stat with throttling counters"
        if reading.cpu_mhz is None:
            unavailable["cpu_mhz"] = "no cpufreq in sysfs (usual in a VM): clock not readable"
        return judge(reading)


def measure_now(seconds: float = 0.5) -> ContentionReading:
    """A short window of the machine as it is now (this process idle): for `run`'s start
    and for `detect --measure`. Everything busy is somebody else's, this process's
    children included."""
    window = ContentionWindow(psutil.Process(), descendants=False).start()
    time.sleep(seconds)
    return window.stop()


BUSY_AT_START_CORES = 0.5  # before a run: half a core of somebody else's work is worth a warning


def busy_warning(reading: ContentionReading) -> str | None:
    """One line when the machine is already busy before anything is measured; else None."""
    if reading.other_cores < BUSY_AT_START_CORES and not (
        reading.steal_pct and reading.steal_pct > STEAL_PCT_LIMIT
    ):
        return None
    load = (
        f", load average {reading.load_1min_end:.2f}" if reading.load_1min_end is not None else ""
    )
    steal = f", {reading.steal_pct:.1f} % steal" if reading.steal_pct else ""
    return (
        f"the machine is busy: other processes use {reading.other_cores:.2f} of "
        f"{reading.cpus} cores{steal}{load}; cells that run beside them will be marked "
        "contended and get no recommendation"
    )
