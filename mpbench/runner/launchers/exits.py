"""How a process ended, in words, from its exit code: shared by the torchrun job (its
agent and ranks) and the fork servers, below both so that neither imports the other."""

from __future__ import annotations

import signal


def how_it_ended(code: int | None) -> str:
    """A process's end from its exit code (negative: the signal that killed it)."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code is not None:
        return f"exited with code {code}"
    return "failed"
