"""A named machine: `MPBENCH_MACHINE=NAME` in a node's environment, as a site names it.

Two machines whose hardware detect cannot tell apart (the same GPU behind another network, a
power cap, or stand-ins for GPU kinds on one test host) are still two machines when named:
the name enters the hardware fingerprint and each record's configuration (`machine`), so
their records are never pooled, and every report names the machine with it (docs/fleet.md).
Unset: the machine is what its hardware says, as before.

This module reads the name from the environment where a run starts; what a machine is to the
reports, its name included, is results/machine.py's `Machine`.
"""

from __future__ import annotations

import os
import re

from mpbench.errors import InvalidInput

MACHINE_ENV = "MPBENCH_MACHINE"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def machine_name() -> str | None:
    """This machine's name from MPBENCH_MACHINE; None where unset or empty."""
    name = os.environ.get(MACHINE_ENV, "").strip()
    if not name:
        return None
    if not NAME.fullmatch(name):
        raise InvalidInput(
            f"{MACHINE_ENV}={name!r}: a machine name is letters, digits, '.', '_' and '-' "
            "(at most 64)"
        )
    return name


def named_fingerprint(fingerprint: str, name: str | None) -> str:
    """The hardware fingerprint of a named machine (unchanged where unnamed)."""
    if name is None:
        return fingerprint
    from mpbench.detect.report import fingerprint as digest

    return digest({"hardware": fingerprint, "machine": name})
