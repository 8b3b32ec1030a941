"""A cell's float32 twin: the same framework, workload, recipe and repeat under float32,
measured earlier in the same run. Its median step is what a cell that cannot pay is held to
(backends/stopping.py; docs/measurement.md, "A cell that cannot pay stops early")."""

from __future__ import annotations

from mpbench.backends.base import CellSpec
from mpbench.policies import BASELINE
from mpbench.results import CellRecord, Status
from mpbench.results.identity import group_entries, timed_step_samples


def float32_step_s(spec: CellSpec, records: list[CellRecord]) -> float | None:
    """The twin's median step per this cell's batch (a 16-bit cell at K times the batch is
    held to K times float32's step): the same repeat's twin, else the latest ok one of another
    repeat (the same repeat failed, or a resumed run lost it); None for a float32 cell, or
    where no twin finished ok yet."""
    if spec.policy == BASELINE:
        return None
    twins = [r for r in records if _twin_of(spec, r)]
    twins.sort(key=lambda r: r.repeat == spec.repeat)  # the same repeat's last, so chosen
    if not twins:
        return None
    twin = twins[-1]
    assert twin.step_time is not None and twin.step_time.median_s
    theirs, ours = timed_step_samples(twin.config), timed_step_samples(spec.config())
    if theirs and ours:
        return twin.step_time.median_s * ours / theirs
    return twin.step_time.median_s


def _twin_of(spec: CellSpec, record: CellRecord) -> bool:
    """Whether `record` is an ok float32 cell of this cell's group (results/identity.py)."""
    if (
        record.policy != BASELINE
        or record.status is not Status.OK
        or record.fallback_of is not None
        or (record.framework, record.workload, record.run_id)
        != (spec.framework, spec.workload, spec.run_id)
        or record.step_time is None
        or not record.step_time.median_s
    ):
        return False
    ours = group_entries(spec.policy, spec.config())
    theirs = group_entries(record.policy, record.config)
    return all(theirs.get(key) == value for key, value in ours.items())
