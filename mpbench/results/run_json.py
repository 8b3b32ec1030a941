"""run.json: the one reader of the file, and its `adaptive` entry.

`read_run_json` is how every command reads a run's run.json (run --resume, compare, store add,
history), so a damaged file meets one rule everywhere: one line naming it, exit 2; a missing
one is None (a bare results.jsonl, a run made before run.json existed).

`AdaptiveBlock` is the `adaptive` entry, what `mpbench run --repeat auto` decided and why it
stopped: written by the runner after every round, read by compare, so both name its keys once.
The entry carries a version from 1 on; an older run.json wrote the same keys without one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mpbench.errors import InvalidInput

RUN_JSON = "run.json"


def read_run_json(directory: Path) -> dict[str, Any] | None:
    """The run.json of a run directory as a JSON object; None where there is none.

    A file that is not a JSON object is refused rather than ignored: its accuracy margin, its
    `--repeat auto` account and its settings would otherwise fall back to defaults unseen."""
    path = Path(directory) / RUN_JSON
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: cannot read the run's run.json ({_why(exc)})") from None
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(
            f"{path}: damaged (not JSON: {exc}); restore it from a copy, or move it aside to "
            "read the run's records without its settings"
        ) from None
    if not isinstance(raw, dict):
        raise InvalidInput(f"{path}: damaged (a JSON {type(raw).__name__}, not an object)")
    return raw


def _why(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)

ADAPTIVE_VERSION = 1


@dataclass(frozen=True)
class AdaptiveBlock:
    """One run's `--repeat auto` account. A key an older or hand-written run.json lacks
    reads as None (an empty table for the per-cell ones). from_dict keeps values as written,
    never coerced, so what reads a field checks its type (compare's note shows what it can)."""

    rule: str | None = None  # "stein two-stage"
    pilot: int | None = None  # n0: the pilot's rounds
    planned: int | None = None  # N, once the pilot decided it
    ran: int | None = None  # rounds run so far
    precision: float | None = None  # the target half-width, relative (0.05: ±5 %)
    max_repeats: int | None = None
    time_budget_s: float | None = None
    stopped: str | None = None  # why it stopped; None while it runs
    decision: str | None = None  # how N was sized
    s0: dict[str, float] = field(default_factory=dict)  # cell label -> the pilot's spread
    half_width: dict[str, float | None] = field(default_factory=dict)  # cell -> ± relative
    version: int = ADAPTIVE_VERSION

    def to_dict(self) -> dict[str, Any]:
        """The entry as run.json holds it: the version first, then the fields in order."""
        names = [f.name for f in fields(self) if f.name != "version"]
        return {"version": self.version, **{name: getattr(self, name) for name in names}}

    @classmethod
    def from_dict(cls, raw: Any) -> AdaptiveBlock | None:
        """The entry read back; None when it is not an entry at all (not a JSON object). A
        per-cell table that is not an object reads as empty; no version: written before the
        entry had one (1)."""
        if not isinstance(raw, dict):
            return None
        values = {f.name: raw.get(f.name) for f in fields(cls) if f.name in raw}
        for table in ("s0", "half_width"):
            if not isinstance(values.get(table), dict):
                values.pop(table, None)
        values.setdefault("version", 1)
        return cls(**values)
