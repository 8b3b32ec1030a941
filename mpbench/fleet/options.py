"""The fleet's options (`--on`, `--fleet`, `--fleet-timeout`, `--store`): checked once, here,
before anything is dispatched; bad input is one line and exit 2 (InvalidInput)."""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from mpbench.errors import InvalidInput
from mpbench.options import STORE
from mpbench.parsers import parse_seconds

ENGINES = ("ray", "slurm")
DEFAULT_TIMEOUT_S = 600.0
# A machine kind names a run directory and a Ray resource: letters, digits, '.', '_', '-'
# (Ray's accelerator types: H100, A100-80G, Intel-GPU-Max-1550, ...).
KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
CPU_KIND = "cpu"  # the nodes without an accelerator type (with --device cpu)


@dataclass(frozen=True)
class FleetOptions:
    engine: str  # "ray" or "slurm"
    address: str | None  # Ray: "auto", RAY_ADDRESS or ray://HOST:PORT; Slurm: None
    kinds: tuple[str, ...]  # () : every kind the cluster has
    timeout_s: float  # how long a machine may wait for a node before it is reported
    store: Path | None  # where each finished machine's run is added


def fleet_options(
    on: str | None, fleet: str | None, timeout: str | None, store: Path | None
) -> FleetOptions | None:
    """The fleet asked for, or None for a local run (where the fleet's options are refused)."""
    if on is None:
        given = (("--fleet", fleet), ("--fleet-timeout", timeout), (STORE.option, store))
        for option, value in given:
            if value is not None:
                raise InvalidInput(f"{option}: only with --on ray|slurm (a fleet run)")
        return None
    engine, address = _engine(on)
    timeout_s = parse_seconds("--fleet-timeout", timeout) if timeout else DEFAULT_TIMEOUT_S
    return FleetOptions(engine, address, _kinds(fleet), timeout_s, store)


def _engine(on: str) -> tuple[str, str | None]:
    text = on.strip()
    if text.lower() == "ray":
        return "ray", os.environ.get("RAY_ADDRESS") or "auto"
    if text.lower().startswith("ray://"):
        host, _, port = text[len("ray://") :].rpartition(":")
        if not host or not port.isdigit():
            raise InvalidInput(f"--on {on!r}: a Ray client address is ray://HOST:PORT")
        return "ray", text
    if text.lower() == "slurm":
        return "slurm", None
    raise InvalidInput(f"--on {on!r}: must be ray, ray://HOST:PORT or slurm")


def _kinds(fleet: str | None) -> tuple[str, ...]:
    if fleet is None:
        return ()
    kinds = [k.strip() for k in fleet.split(",")]
    for kind in kinds:
        if not kind:
            raise InvalidInput(f"--fleet {fleet!r}: an empty machine kind")
        if not KIND.fullmatch(kind):
            raise InvalidInput(
                f"--fleet {fleet!r}: {kind!r} is no machine kind (letters, digits, '.', '_', '-')"
            )
    return tuple(dict.fromkeys(kinds))


def import_engine(module: str, name: str, option: str, extra: str) -> ModuleType:
    """Ray or submitit, imported only by the engine that runs on it; missing: one line
    naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise InvalidInput(
            f"{option} needs {name}, which is not installed: pip install 'mpbench[{extra}]'"
        ) from None
