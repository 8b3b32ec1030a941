"""`mpbench run --on ray|slurm`: the same run on each kind of machine, into one folder.

The driver checks the configuration as `mpbench run` does (bad input: one line, exit 2,
before anything is dispatched), asks the cluster which kinds it has (a kind it lacks: one
line listing those it has, exit 2), warns where nodes run other versions, writes each
machine's run.json, then runs every machine at once, each on one node of its kind. A machine
whose node is lost is started again on another node of its kind from the records already
received; with none left, it is reported and the fleet exits 1. Ctrl-C cancels every
machine and keeps what each has sent (exit 130); `--resume` continues them.

Layout: OUT/fleet.json, and OUT/KIND/ one run directory per machine, as `mpbench run` makes
it, which `mpbench compare`, `store add` and `history --by device` read as they are.

The driver sits below the commands: it adds to a store through results/store_ops.py, as
`store add` does, and its closing table is handed in by cli.py, as `mpbench run`'s is. A
kind here is always a fleet kind (engine.py), never a record's device.kind.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from mpbench import __version__
from mpbench.errors import InvalidInput
from mpbench.fleet.engine import FleetEngine
from mpbench.fleet.machines import FLEET_FILE, FleetMachine, FleetRecord, read_fleet, write_fleet
from mpbench.fleet.node import Event
from mpbench.fleet.options import FleetOptions
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.loop import Warnings, new_run_id
from mpbench.runner.records import now_iso
from mpbench.runner.rundir import (
    RUN_FILE,
    RunLock,
    RunState,
    check_out_path,
    make_dir,
    read_state,
    write_state,
)
from mpbench.runner.signals import interrupted_exit_code, stop_on_termination

# Where each node's versions must agree for one fleet's numbers to be read side by side.
COMPARED_VERSIONS = ("mpbench", "python", "torch", "tensorflow")

# The fleet's closing table of its finished machines' run directories (cli.py's
# `_fleet_summary`: history --by device); InvalidInput where there is nothing to tabulate.
FleetSummary = Callable[[list[Path]], None]


def run_fleet(options: RunOptions, fleet: FleetOptions, summary: FleetSummary) -> int:
    """Run the matrix on each fleet kind of the cluster, closing with `summary` of the
    finished machines; the exit code (0, 1 a machine failed or was lost, 2 bad input, 130
    interrupted)."""
    if options.measure_peak:
        raise InvalidInput("--measure-peak: run `mpbench detect --measure` on each node instead")
    console = _console()
    warn = Warnings()  # stderr, each warning once (runner/loop.py)
    with stop_on_termination():  # SIGTERM / SIGHUP are Ctrl-C from here on (runner.signals)
        if options.resume:
            return _resume(options, fleet, console, warn, summary)
        return _new_fleet(options, fleet, console, warn, summary)


def _new_fleet(
    options: RunOptions,
    fleet: FleetOptions,
    console: Console,
    warn: Warnings,
    summary: FleetSummary,
) -> int:
    config = build_config(options)  # every check of the configuration, before dispatch
    fleet_id = new_run_id()
    fleet_dir = options.out if options.out is not None else config.out_dir / fleet_id
    check_out_path(fleet_dir, "--out" if options.out is not None else "[run] out_dir")
    engine = _engine(fleet, config.device, warn)
    engine.connect()
    try:
        fleet_kinds = _fleet_kinds(engine, fleet)
        make_dir(fleet_dir)
        with RunLock(fleet_dir):
            if (fleet_dir / FLEET_FILE).exists() or (fleet_dir / RUN_FILE).exists():
                raise InvalidInput(
                    f"{fleet_dir} already holds a run: continue it with "
                    f"'mpbench run --on {options.on} --out {fleet_dir} --resume', "
                    "or pass another --out"
                )
            machines = []
            for kind in fleet_kinds:
                machine = FleetMachine(kind, fleet_dir / kind, f"{fleet_id}-{kind}")
                make_dir(machine.run_dir)
                state = RunState(
                    machine.run_id, now_iso(), options.command_line, __version__, config
                )
                write_state(machine.run_dir, state)
                machines.append(machine)
            store = str(fleet.store.resolve()) if fleet.store is not None else None
            record = FleetRecord(engine.engine, options.command_line, store)
            return _run(engine, fleet, machines, fleet_dir, record, options, console, warn, summary)
    finally:
        engine.close()


def _resume(
    options: RunOptions,
    fleet: FleetOptions,
    console: Console,
    warn: Warnings,
    summary: FleetSummary,
) -> int:
    """Continue the fleet in --out: its machines' runs, into the store the command that
    started it named (fleet.json keeps it), unless this command names one; fleet.json keeps
    that command's line, and adds this one to its `resumes`."""
    fleet_dir = options.out
    if fleet_dir is None:
        raise InvalidInput("--resume needs --out DIR: the fleet's folder to continue")
    check_out_path(fleet_dir)
    if not (fleet_dir / FLEET_FILE).is_file():
        raise InvalidInput(f"--resume: {fleet_dir} holds no fleet run ({FLEET_FILE} missing)")
    record = read_fleet(fleet_dir)
    resume = {"command_line": options.command_line, "at": now_iso()}
    if fleet.store is not None:
        resume["store"] = str(fleet.store.resolve())
    elif record.store is not None:
        fleet = dataclasses.replace(fleet, store=Path(record.store))
    record.resumes.append(resume)
    states = {
        p.name: read_state(p) for p in sorted(fleet_dir.iterdir()) if (p / RUN_FILE).is_file()
    }
    machines = [
        FleetMachine(kind, fleet_dir / kind, state.run_id)
        for kind, state in states.items()
        if not fleet.kinds or kind in fleet.kinds
    ]
    device = states[machines[0].fleet_kind].config.device if machines else "auto"
    engine = _engine(fleet, device, warn)
    engine.connect()
    record.engine = engine.engine
    try:
        with RunLock(fleet_dir):
            return _run(engine, fleet, machines, fleet_dir, record, options, console, warn, summary)
    finally:
        engine.close()


def _engine(fleet: FleetOptions, device: str, warn: Warnings) -> FleetEngine:
    if fleet.engine == "ray":
        from mpbench.fleet.ray_engine import RayFleet

        return RayFleet(fleet, device)
    from mpbench.fleet.slurm_engine import SlurmFleet

    return SlurmFleet(fleet, device, warn)


def _fleet_kinds(engine: FleetEngine, fleet: FleetOptions) -> list[str]:
    """The fleet kinds to run on: those asked, each of which the cluster must have (exit 2
    before anything runs), or every kind it has."""
    available = engine.fleet_kinds()
    has = ", ".join(f"{k} ({n} node{'s' * (n != 1)})" for k, n in sorted(available.items()))
    missing = [k for k in fleet.kinds if k not in available]
    if missing:
        raise InvalidInput(
            f"--fleet: the cluster has no node of kind {', '.join(missing)}; "
            f"it has: {has or 'no nodes'}"
        )
    kinds = list(fleet.kinds) or engine.default_fleet_kinds(available)
    if not kinds:
        raise InvalidInput(
            f"--on {engine.engine}: the cluster has no machine kind to run on (it has: "
            f"{has or 'no nodes'}); name one with --fleet, or pass --device cpu for CPU nodes"
        )
    return kinds


def _run(
    engine: FleetEngine,
    fleet: FleetOptions,
    machines: list[FleetMachine],
    fleet_dir: Path,
    record: FleetRecord,
    options: RunOptions,
    console: Console,
    warn: Warnings,
    summary: FleetSummary,
) -> int:
    stored = f"; store: {fleet.store}" if fleet.store is not None else ""
    console.print(
        f"mpbench fleet on {engine.engine}: {len(machines)} machine kinds "
        f"({', '.join(m.fleet_kind for m in machines)}); results: {fleet_dir}{stored}"
    )
    lock = threading.Lock()
    write_fleet(fleet_dir, record, machines)
    stopped = _check_gpus(engine, machines)
    if len(stopped) < len(machines):  # said now, as others run (else the closing says it)
        for machine in stopped:
            console.print(f"  {machine.fleet_kind}: {_outcome(machine)}")
    _check_versions(engine, [m for m in machines if m.status != "no node"], warn)
    write_fleet(fleet_dir, record, machines)

    def keep(machine: FleetMachine, event: Event) -> None:
        with lock:
            before = machine.status
            machine.receive(event)
            if event.kind == "started" and before != "running":
                node = event.facts.get("node")
                console.print(f"  {machine.fleet_kind}: running on {node}")
            elif event.kind == "records":
                console.print(f"  {machine.fleet_kind}: {machine.records} cells measured")
            elif event.kind == "done":
                console.print(f"  {machine.fleet_kind}: {_outcome(machine)}")
                _store(machine, fleet.store, console)
            write_fleet(fleet_dir, record, machines)

    def say(machine: FleetMachine, text: str) -> None:
        with lock:
            console.print(f"  {machine.fleet_kind}: {text}")
            write_fleet(fleet_dir, record, machines)

    threads = [
        threading.Thread(
            target=_serve, args=(engine, m, keep, say), name=f"fleet-{m.fleet_kind}", daemon=True
        )
        for m in machines
        if m.status != "no node"
    ]
    interrupted: KeyboardInterrupt | None = None
    for thread in threads:
        thread.start()
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
    except KeyboardInterrupt as exc:
        interrupted = exc
        console.print("[yellow]Interrupted[/yellow]: stopping every machine's run ...")
        engine.stop()
        for thread in threads:
            thread.join(timeout=60)
    write_fleet(fleet_dir, record, machines)
    _closing(machines, fleet_dir, console, summary)
    if interrupted is not None:
        console.print(
            f"Kept what each machine measured; continue with: mpbench run --on {options.on} "
            f"--out {fleet_dir} --resume"
        )
        return interrupted_exit_code(interrupted)
    return 0 if all(m.status == "done" and m.exit_code == 0 for m in machines) else 1


def _serve(
    engine: FleetEngine,
    machine: FleetMachine,
    keep: Callable[[FleetMachine, Event], None],
    say: Callable[[FleetMachine, str], None],
) -> None:
    """One machine, until its run ends on a node, or no node of its fleet kind is left."""
    while True:
        machine.attempts += 1
        try:
            ended = engine.run(machine, machine.seed(), lambda event: keep(machine, event))
        except KeyboardInterrupt:
            machine.status = "interrupted"
            return
        except TimeoutError:
            machine.status = "no node"
            machine.why = (
                f"no node of kind {machine.fleet_kind} took it within --fleet-timeout "
                f"({engine.options.timeout_s:g} s)"
            )
            return
        except Exception as exc:  # the node's side failed: reported, the others go on
            machine.status = "failed"
            lines = str(exc).strip().splitlines()
            machine.why = f"{type(exc).__name__}: {lines[-1] if lines else 'no message'}"
            return
        if ended:
            return
        lost = machine.why
        kind = machine.fleet_kind
        if not engine.has_node(kind):
            machine.status = "lost"
            machine.why = f"its node was lost ({lost}) and no node of kind {kind} is left"
            return
        machine.status = "waiting"
        say(machine, f"its node was lost ({lost}); resuming on another node of kind {kind}")


def _check_gpus(engine: FleetEngine, machines: list[FleetMachine]) -> list[FleetMachine]:
    """A machine whose cells ask a GPU (any --device but cpu) of a kind whose nodes have
    none is stopped at once, with the way out: no node of it would ever take it, and the
    driver would wait --fleet-timeout for one. The engine says what it knows of the kind's
    nodes (Ray's resources, Slurm's generic resources), or None where it cannot tell.
    Returns the machines it stopped."""
    stopped = []
    for machine in [] if engine.cpu_cells else machines:
        evidence = engine.no_gpu(machine.fleet_kind)
        if evidence is not None:
            machine.status = "no node"
            machine.why = (
                f"no node of kind {machine.fleet_kind} has a GPU ({evidence}); pass --device cpu "
                "to run its cells on their CPUs"
            )
            stopped.append(machine)
    return stopped


def _check_versions(engine: FleetEngine, machines: list[FleetMachine], warn: Warnings) -> None:
    """Each kind's versions, asked of a node of it before the first cell; a warning where
    they differ (the numbers are still each machine's own)."""
    seen: dict[str, dict] = {}
    answers = engine.facts([m.fleet_kind for m in machines])
    for machine in machines:
        facts = answers[machine.fleet_kind]
        if facts is None:
            machine.status = "no node"
            machine.why = (
                f"no node of kind {machine.fleet_kind} answered within --fleet-timeout "
                f"({engine.options.timeout_s:g} s)"
            )
            continue
        machine.facts = facts
        seen[machine.fleet_kind] = facts
    for name in COMPARED_VERSIONS:
        versions = {kind: facts.get(name) for kind, facts in seen.items()}
        if len(set(versions.values())) > 1:
            said = ", ".join(f"{kind} {v or 'none'}" for kind, v in versions.items())
            warn(f"the machines run different {name} versions ({said}): each is recorded")


def _store(machine: FleetMachine, store: Path | None, console: Console) -> None:
    """Add a finished machine's run to the store (again after a resume: replaced, never
    doubled: the store keys a run by its id)."""
    if store is None or machine.status != "done":
        return
    from mpbench.results.store_ops import add_runs

    kind = machine.fleet_kind
    try:
        for _, result in add_runs([machine.run_dir], store):
            console.print(f"  {kind}: {result.outcome} in {store} ({result.records} records)")
    except InvalidInput as exc:  # the run is on disk: say why the store did not take it
        machine.why = f"not added to {store}: {exc}"
        console.print(f"  [yellow]{kind}[/yellow]: {machine.why}")


def _outcome(machine: FleetMachine) -> str:
    if machine.status == "done":
        failed = " (a cell failed: its record says why)" if machine.exit_code == 1 else ""
        return f"done, {machine.records} cells{failed}"
    return f"{machine.status}: {machine.why}" if machine.why else machine.status


def _closing(
    machines: list[FleetMachine], fleet_dir: Path, console: Console, summary: FleetSummary
) -> None:
    finished = [m for m in machines if m.status == "done"]
    for machine in machines:
        if machine.status != "done":
            console.print(f"[yellow]{machine.fleet_kind}[/yellow]: {_outcome(machine)}")
    if not finished:
        return
    try:
        summary([m.run_dir for m in finished])
    except InvalidInput as exc:  # no finished cell to compare: the runs are on disk
        console.print(f"No fleet table: {exc}")
    for note in _one_machine_notes(finished):
        console.print(f"[yellow]Note[/yellow]: {note}")
    # `*/`: the machines' run directories, not fleet.json beside them
    console.print(f"Results: {fleet_dir} (mpbench history --by device {fleet_dir}/*/)")


def _one_machine_notes(machines: list[FleetMachine]) -> list[str]:
    """Fleet kinds whose runs are one machine to mpbench (their nodes gave them one
    MPBENCH_MACHINE name, on the same hardware): the fleet table shows one column, the newest
    run, so say which kinds it stands for rather than drop one silently."""
    kinds: dict[str, list[str]] = {}
    for machine in machines:
        fingerprint = _fingerprint(machine.run_dir)
        if fingerprint is not None:
            kinds.setdefault(fingerprint, []).append(machine.fleet_kind)
    return [
        f"kinds {', '.join(same)} are one machine (the same hardware and MPBENCH_MACHINE "
        "name): the table shows its newest run; give their nodes different names to see each"
        for same in kinds.values()
        if len(same) > 1
    ]


def _fingerprint(run_dir: Path) -> str | None:
    """The hardware fingerprint of a run's first record."""
    from mpbench.results.io import RESULTS_FILE

    try:
        with (run_dir / RESULTS_FILE).open(encoding="utf-8") as file:
            first = file.readline()
        return json.loads(first).get("hardware_fingerprint") if first.strip() else None
    except (OSError, ValueError, AttributeError):
        return None


def _console() -> Console:
    """Lines as they are, never wrapped (a log is read with grep); the fleet table is sized
    as `mpbench run`'s closing table is."""
    console = Console(soft_wrap=True)
    return console if console.is_terminal else Console(width=200, soft_wrap=True)
