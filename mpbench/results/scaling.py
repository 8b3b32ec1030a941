"""Scaling figures of data-parallel cells (docs/distributed.md): one formula, used by `run`
(which writes it into the record) and by `compare` (its scaling table)."""

from __future__ import annotations

from mpbench.results.step_stats import StepStats


def weak_scaling_efficiency(
    throughput: float | None, reference_throughput: float | None, world_size: int
) -> float | None:
    """thr_N / (N * thr_1): mpbench keeps each replica's batch fixed (weak scaling), so N
    replicas that cost nothing to coordinate would train N times the samples per second.
    None when either throughput is missing."""
    if not throughput or not reference_throughput or world_size < 1:
        return None
    return throughput / (world_size * reference_throughput)


def straggler_ratio(rank_medians: list[float]) -> float | None:
    """The slowest rank's median step over the median rank's: 1.0 when the ranks keep pace.
    None with fewer than two ranks."""
    if len(rank_medians) < 2:
        return None
    ranks = StepStats(rank_medians)
    return ranks.max / ranks.median
