"""Why do some whole mpbench cell processes run slow? One factor at a time (issue 22, item 3).

Every process here is a real mpbench cell: `python -m mpbench run -f FRAMEWORK -w mnist_dense
-p bf16 --units 1024 --batch-size 1024 --data synthetic --max-steps 30 --device cpu --repeat 1
--out DIR`, and its figure is the cell's median step time (results.jsonl,
record["step_time"]["median_s"]). Each arm is one setting of one suspect:

  baseline               nothing changed: the reference every other arm is compared with
  baseline-vs-baseline   a second, identical baseline arm (A/A): the spread with nothing changed
  memory-sampler         MPBENCH_MEMORY_SAMPLE_INTERVAL_S=0: no CPU memory-sampling thread
                         (--memory-interval S samples every S seconds instead)
  telemetry              MPBENCH_TELEMETRY=0: no device-telemetry sampler thread (4 Hz)
  binding                OMP_PROC_BIND=close OMP_PLACES=cores (OpenMP threads pinned; torch's
                         pools are OpenMP, TensorFlow's are not)
  thp                    transparent huge pages for the cell's big allocations: torch's
                         THP_MEM_ALLOC_ENABLE=1 and glibc's GLIBC_TUNABLES=glibc.malloc.hugetlb=1
                         (per process; they act where THP is `madvise` or `always`; numpy
                         already asks for huge pages for its big arrays). With --thp-sysfs MODE
                         (always or never), instead: /sys/kernel/mm/transparent_hugepage/enabled
                         is set to MODE around each process of this arm and restored after it
  malloc                 one arm per --malloc variant: arena1 (MALLOC_ARENA_MAX=1),
                         fixed-thresholds (glibc's mmap/trim thresholds fixed: no per-step
                         mmap/munmap or heap trimming), jemalloc / tcmalloc / a path (LD_PRELOAD)
  parent-poll            the mpbench parent on a pseudo-terminal, so it draws its live progress
                         display (rich, 10 redraws a second) while the cell runs; every other arm
                         writes to a file, as in CI

The design: K rounds; each round runs one process of every arm, in a random order (seeded), so
drift of the machine hits every arm alike and no arm always runs first. Every arm, the baseline
included, is measured the same way. For each arm the summary gives min / median / max of the
per-process medians, the spread (max/min - 1), the processes slower than SLOW_FACTOR x the arm's
median ("slow"), the 1-minute load average before and after its processes (median), the parent's
CPU while the cell ran, and how many processes mpbench marked contended (where it records it).

While a process runs, this script reads the mpbench parent's /proc/PID/stat and its children 4
times a second (the same for every arm) to measure the parent's own CPU while its cell ran.

    python benchmarks/slow_processes.py [--factor all | F ...] [--processes 12]
        [--framework torch [tensorflow]] [--units 1024] [--batch-size 1024] [--max-steps 30]
        [--malloc arena1 fixed-thresholds] [--memory-interval 0] [--thp-sysfs always|never]
        [--seed 0] [--json out.json] [--keep DIR] [-- EXTRA MPBENCH RUN OPTIONS]

Run it on a quiet machine: it measures the machine as much as mpbench.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import pty
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpbench.runner.launchers.process_names import CELL_NAME, SERVER_NAME

SLOW_FACTOR = 1.25  # a process slower than 1.25 x its arm's median is "slow" (issue 22)
POLL_S = 0.25  # how often the parent's CPU is read while a process runs
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
THP_DEFRAG = Path("/sys/kernel/mm/transparent_hugepage/defrag")
FACTORS = (
    "baseline-vs-baseline",
    "memory-sampler",
    "telemetry",
    "binding",
    "thp",
    "malloc",
    "parent-poll",
)
# Everything an arm may set: scrubbed from every process's environment first, so that the
# baseline is the baseline whatever the caller's shell exports.
EXPERIMENT_VARS = (
    "MPBENCH_MEMORY_SAMPLE_INTERVAL_S",
    "MPBENCH_TELEMETRY",
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "THP_MEM_ALLOC_ENABLE",
    "GLIBC_TUNABLES",
    "MALLOC_ARENA_MAX",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_TRIM_THRESHOLD_",
    "LD_PRELOAD",
)
PRELOADS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),  # Debian: apt-get install libjemalloc2
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),  # libtcmalloc-minimal4
}
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")
MIB = 2**20


@dataclass
class Arm:
    name: str  # "baseline", "thp", "malloc:arena1", ...
    framework: str
    what: str  # one line for the table
    env: dict[str, str] = field(default_factory=dict)
    pty: bool = False  # the parent runs on a pseudo-terminal (live progress display)
    thp_sysfs: str | None = None  # THP `enabled` mode to set around each process


@dataclass
class Process:
    arm: str
    framework: str
    order: int  # position in the whole run
    round: int
    status: str = "?"
    reason: str | None = None
    median_ms: float | None = None
    p10_ms: float | None = None
    p90_ms: float | None = None
    wall_s: float = 0.0
    cpu_s: float | None = None  # user + system of mpbench and the children it reaped
    parent_cpu_pct: float | None = None  # the parent's own CPU while its cell ran, % of a core
    load1_before: float = 0.0
    load1_after: float = 0.0
    contended: bool | None = None  # mpbench's own contention flag, where the record has one
    other_cores: float | None = None  # ... and what it read: other processes' CPU, in cores
    memory_samples: int | None = None  # knob checks: what the record says ran
    memory_interval_s: float | None = None
    telemetry_samples: int | None = None
    knob_warning: str | None = None


# --- the arms ------------------------------------------------------------------------------


def find_library(names: tuple[str, ...]) -> str | None:
    for directory in LIB_DIRS:
        for name in names:
            path = Path(directory) / name
            if path.exists():
                return str(path)
    return None


def malloc_arm(variant: str, framework: str) -> Arm:
    if variant == "arena1":
        return Arm(f"malloc:{variant}", framework, "MALLOC_ARENA_MAX=1", {"MALLOC_ARENA_MAX": "1"})
    if variant == "fixed-thresholds":
        env = {"MALLOC_MMAP_THRESHOLD_": str(32 * MIB), "MALLOC_TRIM_THRESHOLD_": str(2**32)}
        what = "MALLOC_MMAP_THRESHOLD_=32 MiB, MALLOC_TRIM_THRESHOLD_=4 GiB"
        return Arm(f"malloc:{variant}", framework, what, env)
    path = variant if "/" in variant else find_library(PRELOADS.get(variant, ()))
    if path is None or not Path(path).exists():
        known = ", ".join(["arena1", "fixed-thresholds", *PRELOADS])
        raise SystemExit(
            f"--malloc {variant}: no such library here (known: {known}, or a path; on Debian "
            "`apt-get install libjemalloc2` or `libtcmalloc-minimal4`)"
        )
    return Arm(f"malloc:{Path(path).name}", framework, f"LD_PRELOAD={path}", {"LD_PRELOAD": path})


def build_arms(args: argparse.Namespace) -> list[Arm]:
    arms: list[Arm] = []
    for framework in args.framework:
        arms.append(Arm("baseline", framework, "nothing changed"))
        for factor in args.factor:
            if factor == "baseline-vs-baseline":
                arms.append(Arm("baseline-2", framework, "nothing changed (A/A control)"))
            elif factor == "memory-sampler":
                value = f"{args.memory_interval:g}"
                what = "no memory-sampling thread" if args.memory_interval == 0 else value + " s"
                env = {"MPBENCH_MEMORY_SAMPLE_INTERVAL_S": value}
                arms.append(Arm("memory-sampler", framework, what, env))
            elif factor == "telemetry":
                env = {"MPBENCH_TELEMETRY": "0"}
                arms.append(Arm("telemetry", framework, "no telemetry sampler thread", env))
            elif factor == "binding":
                env = {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
                arms.append(Arm("binding", framework, "OMP_PROC_BIND=close OMP_PLACES=cores", env))
            elif factor == "thp":
                if args.thp_sysfs:
                    what = f"THP enabled={args.thp_sysfs} (system-wide, this arm only)"
                    arms.append(Arm("thp", framework, what, thp_sysfs=args.thp_sysfs))
                else:
                    env = {"THP_MEM_ALLOC_ENABLE": "1", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
                    what = "THP_MEM_ALLOC_ENABLE=1 GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
                    arms.append(Arm("thp", framework, what, env))
            elif factor == "malloc":
                arms.extend(malloc_arm(variant, framework) for variant in args.malloc)
            elif factor == "parent-poll":
                what = "parent on a pty: live progress display"
                arms.append(Arm("parent-poll", framework, what, pty=True))
    return arms


# --- the machine ---------------------------------------------------------------------------


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The bracketed choice of a THP sysfs file ("always [madvise] never" -> "madvise")."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else text.strip()


def set_thp(mode: str) -> None:
    THP_ENABLED.write_text(mode)
    if thp_mode() != mode:
        raise RuntimeError(f"{THP_ENABLED} did not take {mode!r}")


def machine_line() -> str:
    thp = thp_mode() or "unreadable"
    defrag = thp_mode(THP_DEFRAG) or "unreadable"
    preloads = [k for k, names in PRELOADS.items() if find_library(names)]
    return (
        f"{platform.node()}: {os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"python {platform.python_version()}, THP enabled={thp} defrag={defrag}, "
        f"other mallocs installed: {', '.join(preloads) or 'none'}"
    )


# --- one process ---------------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float | None:
    """The process's own user + system time (not its children's), from /proc/PID/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # fields[0] is field 3 (state)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def has_cell_child(pid: int) -> bool:
    """Whether the mpbench parent has a cell process running now: a child named mpbench-cell
    (launchers/cell.py names itself so), or a child of its fork server (launchers/zygote.py)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return False
    for child in children:
        try:
            name = Path(f"/proc/{child}/comm").read_text().strip()
        except OSError:
            continue
        if name == CELL_NAME or (name == SERVER_NAME and has_cell_child(int(child))):
            return True
    return False


def mpbench_command(framework: str, args: argparse.Namespace, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mpbench",
        "run",
        "-f",
        framework,
        "-w",
        "mnist_dense",
        "-p",
        args.policy,
        "--units",
        str(args.units),
        "--batch-size",
        str(args.batch_size),
        "--data",
        "synthetic",
        "--max-steps",
        str(args.max_steps),
        "--device",
        "cpu",
        "--repeat",
        "1",
        "--out",
        str(out),
        *args.extra,
    ]


def run_process(arm: Arm, process: Process, args: argparse.Namespace, out: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in EXPERIMENT_VARS}
    env.update(arm.env)
    log_path = out.with_suffix(".log")
    master = None
    log = open(log_path, "wb")  # noqa: SIM115 (closed below, also on Ctrl-C)
    try:
        if arm.pty:
            master, slave = pty.openpty()
            env.setdefault("TERM", "xterm-256color")
            stdout: Any = slave
        else:
            stdout = log
        process.load1_before = os.getloadavg()[0]
        started = time.monotonic()
        child = subprocess.Popen(
            mpbench_command(arm.framework, args, out),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        if master is not None:
            os.close(slave)
        try:
            status, usage = watch(child, process, master, log, started + args.process_timeout)
        except BaseException:
            stop(child)
            raise
        process.wall_s = time.monotonic() - started
        process.load1_after = os.getloadavg()[0]
        process.cpu_s = usage.ru_utime + usage.ru_stime if usage else None
        code = os.waitstatus_to_exitcode(status) if status is not None else None
        child.returncode = code  # reaped by os.wait4 in watch(): tell Popen
    finally:
        if master is not None:
            os.close(master)
        log.close()
    read_record(process, out, code, log_path)
    process.knob_warning = check_knob(arm, process)


def watch(
    child: subprocess.Popen, process: Process, master: int | None, log: Any, deadline: float
) -> tuple[int | None, Any]:
    """Wait for the mpbench parent, draining its pty, and read its own CPU while its cell
    runs. Returns its wait status and resource usage (None, None after a timeout)."""
    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid == child.pid:
            break
        if time.monotonic() > deadline:
            stop(child)
            process.reason = "no result within --process-timeout"
            return None, None
        if has_cell_child(child.pid):
            cpu = proc_cpu_s(child.pid)
            if cpu is not None:
                last = (time.monotonic(), cpu)
                first = first or last
        if master is None:
            time.sleep(POLL_S)
            continue
        ready, _, _ = select.select([master], [], [], POLL_S)
        if ready:
            with contextlib.suppress(OSError):  # EIO: the terminal's last writer is gone
                log.write(os.read(master, 65536))
    if master is not None:
        with contextlib.suppress(OSError):
            while select.select([master], [], [], 0)[0] and log.write(os.read(master, 65536)):
                pass
    if first and last and last[0] - first[0] >= 2 * POLL_S:
        process.parent_cpu_pct = 100 * (last[1] - first[1]) / (last[0] - first[0])
    return status, usage


def stop(child: subprocess.Popen) -> None:
    """SIGTERM mpbench (it kills its cell's process group), SIGKILL it after a grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def read_record(process: Process, out: Path, code: int | None, log_path: Path) -> None:
    try:
        lines = (out / "results.jsonl").read_text().splitlines()
        record = json.loads(lines[-1])
    except (OSError, IndexError, json.JSONDecodeError):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        process.status = "error"
        process.reason = process.reason or f"no record (exit {code}): {tail[0][:200]}"
        return
    process.status = record.get("status") or "?"
    process.reason = record.get("reason")
    steps = record.get("step_time") or {}
    if steps.get("median_s"):
        process.median_ms = steps["median_s"] * 1e3
        process.p10_ms = (steps.get("p10_s") or 0) * 1e3 or None
        process.p90_ms = (steps.get("p90_s") or 0) * 1e3 or None
    memory = record.get("memory") or {}
    process.memory_samples = memory.get("samples")
    process.memory_interval_s = memory.get("sample_interval_s")
    telemetry = record.get("telemetry") or {}
    process.telemetry_samples = telemetry.get("samples")
    contention = record.get("contention")
    if isinstance(contention, dict) and "contended" in contention:
        process.contended = bool(contention["contended"])
        process.other_cores = contention.get("other_cores")


def check_knob(arm: Arm, process: Process) -> str | None:
    """A knob that did not reach the cell makes the comparison meaningless: say so."""
    if process.status != "ok":
        return None
    interval = arm.env.get("MPBENCH_MEMORY_SAMPLE_INTERVAL_S")
    if interval is not None and float(interval) == 0 and process.memory_interval_s:
        return "the memory sampler still ran"
    if arm.name == "telemetry" and process.telemetry_samples:
        return "the telemetry sampler still ran"
    if arm.name.startswith("baseline") and process.memory_interval_s is None:
        return "the baseline ran no memory sampler"
    return None


# --- the report ----------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def summary_rows(arms: list[Arm], processes: list[Process]) -> list[list[str]]:
    rows = []
    baselines: dict[str, float] = {}
    for arm in arms:
        mine = [p for p in processes if p.arm == arm.name and p.framework == arm.framework]
        medians = sorted(p.median_ms for p in mine if p.median_ms is not None)
        failed = len(mine) - len(medians)
        parent = [p.parent_cpu_pct for p in mine if p.parent_cpu_pct is not None]
        flags = [p.contended for p in mine if p.contended is not None]
        if not medians:
            rows.append([arm.framework, arm.name, arm.what, f"0/{len(mine)}"] + ["–"] * 10)
            continue
        middle = statistics.median(medians)
        if arm.name == "baseline":
            baselines[arm.framework] = middle
        base = baselines.get(arm.framework)
        versus = "–" if base is None or arm.name == "baseline" else f"{middle / base - 1:+.1%}"
        slow = sum(m > SLOW_FACTOR * middle for m in medians)
        rows.append(
            [
                arm.framework,
                arm.name,
                arm.what,
                f"{len(medians)}/{len(mine)}" + (f" ({failed} failed)" if failed else ""),
                fmt(medians[0]),
                fmt(middle),
                fmt(medians[-1]),
                f"{medians[-1] / medians[0] - 1:.1%}",
                str(slow),
                versus,
                fmt(statistics.median(p.load1_before for p in mine)),
                fmt(statistics.median(p.load1_after for p in mine)),
                fmt(statistics.median(parent), ".1f") if parent else "–",
                f"{sum(flags)}/{len(flags)}" if flags else "n/a",
            ]
        )
    return rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


SUMMARY_HEADER = [
    "framework",
    "arm",
    "what changed",
    "ok",
    "min ms",
    "median ms",
    "max ms",
    "spread",
    f"slow (>{SLOW_FACTOR}× median)",
    "median vs baseline",
    "load1 before",
    "load1 after",
    "parent CPU % (cell running)",
    "contended",
]
PROCESS_HEADER = [
    "#",
    "round",
    "framework",
    "arm",
    "status",
    "median ms",
    "p10 ms",
    "p90 ms",
    "wall s",
    "CPU s",
    "parent CPU %",
    "other cores",
    "load1 before",
    "load1 after",
    "note",
]


def process_rows(processes: list[Process]) -> list[list[str]]:
    rows = []
    for p in processes:
        note = p.knob_warning or (p.reason or "")[:80]
        if p.contended:
            note = ("contended; " + note).strip("; ")
        rows.append(
            [
                str(p.order + 1),
                str(p.round + 1),
                p.framework,
                p.arm,
                p.status,
                fmt(p.median_ms),
                fmt(p.p10_ms),
                fmt(p.p90_ms),
                fmt(p.wall_s, ".1f"),
                fmt(p.cpu_s, ".1f"),
                fmt(p.parent_cpu_pct, ".1f"),
                fmt(p.other_cores),
                fmt(p.load1_before),
                fmt(p.load1_after),
                note.replace("|", "/"),
            ]
        )
    return rows


# --- main ----------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Arguments after -- go to `mpbench run` as they are (e.g. -- --threads 2).",
    )
    parser.add_argument(
        "--factor",
        nargs="+",
        default=["all"],
        choices=["all", *FACTORS],
        help="the suspects to test against the baseline (default: all)",
    )
    parser.add_argument("--processes", "-k", type=int, default=12, help="processes per arm")
    parser.add_argument(
        "--framework", nargs="+", default=["torch"], choices=["torch", "tensorflow"]
    )
    parser.add_argument("--policy", default="bf16")
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument(
        "--malloc",
        nargs="+",
        default=["arena1", "fixed-thresholds"],
        help="malloc arms: arena1, fixed-thresholds, jemalloc, tcmalloc or a library path",
    )
    parser.add_argument(
        "--memory-interval",
        type=float,
        default=0.0,
        help="the memory-sampler arm's interval in seconds (0: no thread)",
    )
    parser.add_argument(
        "--thp-sysfs",
        choices=["always", "never"],
        help="thp arm: set the system's THP mode to this around its processes, restoring it "
        "after each (root); default: per-process THP through the environment",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the order within rounds")
    parser.add_argument("--process-timeout", type=float, default=600.0)
    parser.add_argument("--json", type=Path, help="also write every process's figures here")
    parser.add_argument("--keep", type=Path, help="keep the run directories and logs here")
    args = parser.parse_args(argv)
    args.extra = extra
    if "all" in args.factor:
        args.factor = list(FACTORS)
    if args.processes < 1 or args.memory_interval < 0:
        parser.error("--processes must be >= 1 and --memory-interval >= 0")
    return args


def interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    args = parse(argv)
    arms = build_arms(args)
    original_thp = thp_mode()
    if any(arm.thp_sysfs for arm in arms) and not os.access(THP_ENABLED, os.W_OK):
        raise SystemExit(f"--thp-sysfs: {THP_ENABLED} is not writable (run as root)")
    inherited = sorted(k for k in EXPERIMENT_VARS if k in os.environ)
    rng = random.Random(args.seed)
    schedule = []
    for round_ in range(args.processes):
        order = list(arms)
        rng.shuffle(order)
        schedule += [(round_, arm) for arm in order]

    print(f"# slow processes: {len(arms)} arms x {args.processes} processes", flush=True)
    print(machine_line())
    command = " ".join(mpbench_command("FRAMEWORK", args, Path("DIR"))[1:])
    print(f"each process: python {command}")
    if inherited:
        print(f"(left out of every process's environment: {', '.join(inherited)})")
    print()

    processes: list[Process] = []
    workdir = Path(tempfile.mkdtemp(prefix="mpbench-slow-"))
    started = time.monotonic()
    interrupted = False
    # SIGTERM (a CI cancel, `timeout`) ends the run like Ctrl-C: the current process is
    # stopped, the THP mode restored, and what was measured is printed.
    signal.signal(signal.SIGTERM, interrupt)
    try:
        for index, (round_, arm) in enumerate(schedule):
            process = Process(arm.name, arm.framework, index, round_)
            out = workdir / f"{index:03d}-{arm.framework}-{arm.name.replace(':', '-')}"
            try:
                if arm.thp_sysfs:
                    set_thp(arm.thp_sysfs)
                run_process(arm, process, args, out)
            finally:
                if arm.thp_sysfs and original_thp and thp_mode() != original_thp:
                    set_thp(original_thp)
            processes.append(process)
            elapsed = time.monotonic() - started
            left = elapsed / (index + 1) * (len(schedule) - index - 1)
            print(
                f"[{index + 1}/{len(schedule)}] {arm.framework} {arm.name}: {process.status} "
                f"median {fmt(process.median_ms)} ms, load1 {process.load1_before:.2f}"
                f"->{process.load1_after:.2f}"
                + (f", parent {process.parent_cpu_pct:.1f} % CPU" if process.parent_cpu_pct else "")
                + (f"  ({process.knob_warning})" if process.knob_warning else "")
                + (f"  ({process.reason})" if process.status != "ok" else "")
                + f"  [~{left / 60:.1f} min left]",
                file=sys.stderr,
                flush=True,
            )
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: the processes so far", file=sys.stderr)
    finally:
        if args.keep:
            shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)

    total = time.monotonic() - started
    print(
        f"\n## Per process (in the order run; {total / 60:.1f} min"
        + (", interrupted" if interrupted else "")
        + ")\n"
    )
    print(markdown(PROCESS_HEADER, process_rows(processes)))
    print(
        f"\n## Per arm: {args.policy}, mnist_dense, units {args.units}, batch {args.batch_size}, "
        f"max-steps {args.max_steps}, {args.processes} processes per arm, order seed {args.seed}\n"
    )
    print(markdown(SUMMARY_HEADER, summary_rows(arms, processes)))
    print(
        f"\nspread = max/min - 1 of the per-process median step times; slow = processes above "
        f"{SLOW_FACTOR} x the arm's median; load1 = 1-minute load average (median over the arm's "
        "processes); parent CPU = the mpbench parent's own CPU while its cell ran, % of one "
        "core; contended = processes mpbench marked contended (n/a: the record has no flag)."
    )
    if args.json:
        payload = {
            "machine": machine_line(),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "arms": [asdict(arm) for arm in arms],
            "processes": [asdict(p) for p in processes],
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
