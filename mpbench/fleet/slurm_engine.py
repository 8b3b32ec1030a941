"""The fleet on Slurm, through submitit: one job per machine kind, a kind being a partition.

A Slurm site shares its file system between the login node and the compute nodes (submitit
requires it too), so a job continues its machine's run in the fleet's own folder
(node.py's `run_in_place`) and the driver reads what it writes there: nothing is sent back.
A job that ends unfinished (its node failed, it was preempted) is submitted again while
its partition has nodes up, and resumes from the records already written.

Where `sinfo` is missing, submitit's AutoExecutor runs the jobs on this machine as local
processes (its `local` executor), and the kinds are those --fleet names: the same code path,
without a scheduler. That is what this project's tests run; see docs/fleet.md.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from mpbench.errors import InvalidInput, first_line
from mpbench.fleet.engine import NodeFacts
from mpbench.fleet.machines import FleetMachine
from mpbench.fleet.node import Event, node_facts, run_in_place
from mpbench.fleet.options import FleetOptions, import_engine
from mpbench.results.io import RESULTS_FILE

POLL_S = 1.0
MAX_ATTEMPTS = 3  # a job that keeps ending unfinished is not submitted for ever
PENDING = {"PENDING", "UNKNOWN", "REQUEUED", "CONFIGURING"}


class SlurmFleet:
    """Submits each machine's job to its partition (the driver's FleetEngine, engine.py)."""

    engine = "slurm"

    def __init__(self, options: FleetOptions, device: str, say: Callable[[str], None]) -> None:
        self.options = options
        self.cpu_cells = device == "cpu"
        self.say = say
        self.submitit = import_engine("submitit", "submitit", "--on slurm", "slurm")
        self.local = shutil.which("sinfo") is None
        self._jobs: dict[str, Any] = {}
        self._gres: dict[str, set[str]] = {}  # partition -> its nodes' generic resources
        self._stopping = False

    def connect(self) -> None:
        if self.local:
            self.say(
                "--on slurm: no Slurm on this machine (sinfo not found); submitit runs each "
                "machine's job here, as a local process"
            )

    def close(self) -> None:
        pass

    def fleet_kinds(self) -> dict[str, int]:
        """Each partition with nodes up, and how many (locally: the kinds asked, one each).
        Keeps each partition's generic resources (gres), which say whether it has GPUs."""
        if self.local:
            return dict.fromkeys(self.options.kinds, 1)
        counts: dict[str, int] = {}
        for partition, nodes, state, gres in _sinfo("%R %D %t %G"):
            if state.rstrip("*~#") in ("idle", "mix", "alloc", "comp"):
                counts[partition] = counts.get(partition, 0) + int(nodes)
                self._gres.setdefault(partition, set()).update(gres.split(","))
        return counts

    def no_gpu(self, fleet_kind: str) -> str | None:
        """Why no node of partition `fleet_kind` can take a job that asks a GPU (sinfo lists no
        `gpu` among its nodes' generic resources), or None where one can, or where sinfo
        lists none of its nodes up (that is --fleet-timeout's to tell). Locally no GPU is
        asked: the run decides on its own."""
        if self.local:
            return None
        if fleet_kind not in self._gres:  # a resumed fleet has not asked sinfo yet
            self.fleet_kinds()
        gres = self._gres.get(fleet_kind)
        if gres is None or any(g.startswith("gpu") for g in gres):
            return None
        return "sinfo lists no gpu among its nodes' generic resources"

    def default_fleet_kinds(self, available: dict[str, int]) -> list[str]:
        return sorted(available)

    def facts(self, fleet_kinds: list[str]) -> dict[str, NodeFacts | None]:
        # A job would have to queue to say; each machine's environment.json records them.
        return {kind: node_facts() if self.local else {} for kind in fleet_kinds}

    def has_node(self, fleet_kind: str) -> bool:
        return fleet_kind in self.fleet_kinds()

    def run(
        self, machine: FleetMachine, seed: dict[str, bytes], receive: Callable[[Event], None]
    ) -> bool:
        if machine.attempts > MAX_ATTEMPTS:
            machine.why = f"{machine.why}; ended unfinished {MAX_ATTEMPTS} times"
            raise RuntimeError(machine.why)
        executor = self.submitit.AutoExecutor(
            folder=machine.run_dir.parent / ".submitit" / "%j",
            cluster="local" if self.local else "slurm",
        )
        parameters: dict[str, Any] = {"timeout_min": 24 * 60, "nodes": 1, "tasks_per_node": 1}
        if not self.local:
            parameters.update(slurm_partition=machine.fleet_kind)
            if not self.cpu_cells:
                parameters.update(gpus_per_node=1)
        executor.update_parameters(**parameters)
        if self._stopping:
            raise KeyboardInterrupt
        job = executor.submit(run_in_place, str(machine.run_dir), machine.fleet_kind)
        self._jobs[machine.fleet_kind] = job
        try:
            return self._watch(machine, job, receive)
        finally:
            self._jobs.pop(machine.fleet_kind, None)

    def _watch(self, machine: FleetMachine, job: Any, receive: Callable[[Event], None]) -> bool:
        submitted = time.monotonic()
        started = False
        while not job.done():
            if self._stopping:
                raise KeyboardInterrupt
            state = self._state(job)
            if not started and state not in PENDING:
                started = True
                facts = (
                    {**node_facts(), "node": f"job {job.job_id}"}
                    if self.local
                    else {"node": f"job {job.job_id}"}
                )
                receive(Event("started", facts=facts))
            if not started and time.monotonic() - submitted > self.options.timeout_s:
                job.cancel(check=False)
                raise TimeoutError
            time.sleep(POLL_S)
        if self._stopping:  # the job ended as it was cancelled: stopped, not failed
            raise KeyboardInterrupt
        if not started:
            receive(Event("started", facts={"node": f"job {job.job_id}"}))
        try:
            exit_code = job.result()
        except self.submitit.core.utils.UncompletedJobError as exc:  # node failure, preemption
            machine.why = first_line(exc)
            return False
        except self.submitit.core.utils.FailedJobError as exc:
            machine.why = first_line(exc)
            return False
        path = machine.run_dir / RESULTS_FILE
        machine.records = sum(1 for line in path.open() if line.strip()) if path.exists() else 0
        output = (machine.run_dir / "node-output.log").read_text(errors="replace")[-4000:]
        receive(Event("done", exit_code=exit_code, output=output))
        return True

    def _state(self, job: Any) -> str:
        """The job's state: submitit's (from sacct), else squeue's. A site without
        accounting storage has no sacct: every job is UNKNOWN to submitit, and one that
        runs would be cancelled at --fleet-timeout as if no node had taken it."""
        state = job.state
        if state != "UNKNOWN" or self.local:
            return state
        try:
            listed = subprocess.run(
                ["squeue", "--noheader", f"--jobs={job.job_id}", "--format=%T"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return state
        return listed.stdout.strip() or state

    def stop(self) -> None:
        """Ctrl-C: cancel every job (Slurm sends its run SIGTERM, which stops its cells as
        Ctrl-C does); each machine is then interrupted, with what its job wrote kept."""
        self._stopping = True
        for job in list(self._jobs.values()):
            job.cancel(check=False)


def _sinfo(fields: str) -> list[list[str]]:
    """sinfo's lines (`--format=FIELDS`) for the nodes that respond, split into fields."""
    try:
        listed = subprocess.run(
            ["sinfo", "--noheader", "--responding", f"--format={fields}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise InvalidInput("--on slurm: sinfo did not answer in 60 s") from None
    if listed.returncode != 0:
        said = (listed.stderr.strip().splitlines() or ["no message"])[-1]
        raise InvalidInput(f"--on slurm: sinfo failed ({said}): is slurmctld up?")
    width = len(fields.split())
    return [parts for line in listed.stdout.splitlines() if len(parts := line.split()) == width]
