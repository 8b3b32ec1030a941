"""Results over time and across machines: `mpbench history` (change points over commits, a CI
gate against the history), the fleet (`--by device`) and the `mpbench store` commands.
docs/history.md says how to use them."""

from mpbench.result_options import DEFAULT_STORE

__all__ = ["DEFAULT_STORE"]
