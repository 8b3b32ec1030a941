"""Results over time and across machines: the store's readers, `mpbench history` (change
points over commits, a CI gate against the history) and the fleet (`--by device`).
docs/history.md says how to use them; each module says why it is as it is."""

from pathlib import Path

# Where `mpbench store add` writes and `mpbench history` reads when no path is given.
DEFAULT_STORE = Path("results") / "store.sqlite"
