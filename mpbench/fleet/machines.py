"""The driver's side of each machine of the fleet (one fleet kind's run: engine.py says what
a fleet kind is): its run directory under the fleet's, what its node has sent so far, and
what happened to it. The files here are what a resumed node is seeded with, so a record the
driver has is never measured again; the records a node sends enter through the one writer
(results/writer.py: validated, fsynced, never written twice)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mpbench.errors import InvalidInput
from mpbench.fleet.node import Event, read_files
from mpbench.results.io import RESULTS_FILE
from mpbench.results.writer import append_lines, write_atomically

FLEET_FILE = "fleet.json"  # the fleet's own record: its kinds, nodes and outcomes


@dataclass
class FleetMachine:
    """One machine of the fleet: a fleet kind and its run."""

    fleet_kind: str  # a Ray accelerator type, a Slurm partition (never a device.kind)
    run_dir: Path
    run_id: str
    status: str = "waiting"  # waiting, running, done, failed, lost, no node, interrupted
    why: str = ""  # what went wrong, for the closing lines
    exit_code: int | None = None  # the node's `mpbench run`
    records: int = 0  # records received
    nodes: list[str] = field(default_factory=list)  # every node it ran on, in order
    facts: dict[str, str | None] = field(default_factory=dict)  # the last node's versions
    attempts: int = 0

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")

    def seed(self) -> dict[str, bytes]:
        """What a node continues from: every file of the run the driver holds."""
        return {
            name: data
            for name, data in read_files(self.run_dir).items()
            if not name.startswith("logs/") and name != "node-output.log"
        }

    def receive(self, event: Event) -> None:
        """Keep what a node sent: records appended as they come, files as they are."""
        if event.kind == "started":
            self.facts = event.facts
            self.nodes.append(event.facts.get("node") or "?")
            self.status = "running"
        elif event.kind == "records":
            self.records += append_lines(self.run_dir, event.lines)
        elif event.kind in ("file", "done"):
            for name, data in event.files.items():  # results.jsonl: at "done" only
                if name == RESULTS_FILE:  # the node's whole file: the records not held yet
                    complete = data[: data.rfind(b"\n") + 1]  # as new_lines sends them
                    self.records += append_lines(self.run_dir, complete.decode().splitlines())
                    continue
                path = self.run_dir / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            if event.kind == "done":
                self.exit_code = event.exit_code
                # 0: every cell ran; 1: a cell failed to run (its record says why)
                self.status = "done" if event.exit_code in (0, 1) else "failed"
                self.why = ""  # a node lost on the way is in `nodes`
                if self.status == "failed":
                    self.why = _last_line(event.output) or f"mpbench run exited {event.exit_code}"

    def to_dict(self) -> dict:
        return {
            "kind": self.fleet_kind,
            "run_dir": self.run_dir.name,
            "run_id": self.run_id,
            "status": self.status,
            "why": self.why or None,
            "exit_code": self.exit_code,
            "nodes": self.nodes,
            "versions": self.facts,
        }


@dataclass
class FleetRecord:
    """fleet.json's own fields: the command that started the fleet, the store it named (an
    absolute path, so a resume run from elsewhere finds it), and each `--resume` since."""

    engine: str
    command_line: str
    store: str | None = None
    resumes: list[dict] = field(default_factory=list)  # {"command_line", "at"} each


def read_fleet(fleet_dir: Path) -> FleetRecord:
    """The fleet.json a fleet wrote (one of an older mpbench: no store); InvalidInput in one
    line where it is damaged."""
    path = fleet_dir / FLEET_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise InvalidInput(f"{path}: cannot read the fleet's record ({why})") from None
    except ValueError as exc:
        raise InvalidInput(f"{path}: damaged (not JSON: {exc}); restore it from a copy") from None
    texts = (
        [raw.get(k) for k in ("engine", "command_line", "store")] if isinstance(raw, dict) else []
    )
    if not texts or not all(isinstance(t, (str, type(None))) for t in texts):
        raise InvalidInput(f"{path}: damaged (not the fleet record mpbench writes)")
    resumes = raw.get("resumes")
    return FleetRecord(
        texts[0] or "", texts[1] or "", texts[2], resumes if isinstance(resumes, list) else []
    )


def write_fleet(fleet_dir: Path, record: FleetRecord, machines: list[FleetMachine]) -> None:
    """fleet.json: what ran where, rewritten as the machines go on. A fleet kind this
    command does not run (`--resume --fleet` naming fewer) keeps its entry as it was."""
    path = fleet_dir / FLEET_FILE
    entries = {m.fleet_kind: m.to_dict() for m in machines}
    try:
        before = json.loads(path.read_text())["machines"]
    except (OSError, ValueError, KeyError, TypeError):
        before = []
    kept = [e for e in before if isinstance(e, dict) and e.get("kind") not in entries]
    text = json.dumps(
        {
            "engine": record.engine,
            "command_line": record.command_line,
            "store": record.store,
            "resumes": record.resumes,
            "machines": [*kept, *entries.values()],
        },
        indent=2,
    )
    write_atomically(path, text + "\n")


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""
