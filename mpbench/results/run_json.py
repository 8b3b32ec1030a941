"""run.json's `adaptive` entry: what `mpbench run --repeat auto` decided and why it stopped.

Written by the runner (runner/adaptive.py, after every round) and read by compare
(compare/run.py), both through `AdaptiveBlock`, so the two sides name its keys once. The
entry carries a version from 1 on; an older run.json wrote the same keys without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

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
