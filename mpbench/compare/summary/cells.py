"""From result records to cells: repeats merged, grouped per machine, framework and workload.

A cell is identified by machine (hardware fingerprint + device), framework, workload, policy
and effective config (results/identity.py, shared with the runner). The seed is not part of
the identity (repeats may reseed), and the requested data mode is replaced by the kind of
data actually used (`auto` that found MNIST equals `real`; synthetic data never equals real
data). A cell that never loaded data (skipped before it started) joins the group of its
siblings.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from mpbench.compare.summary.comparison import Comparison
from mpbench.compare.summary.estimate import Estimate, of_repeats, step_time
from mpbench.errors import InvalidInput
from mpbench.policies import BASELINE, POLICIES
from mpbench.results import CellRecord, Status, StepTimeStats
from mpbench.results.contention import taken_share
from mpbench.results.identity import (
    CellKey,
    GroupKey,
    RecordKey,
    Row,
    cell_key,
    record_key,
    same_record_or_reason,
    timed_step_samples,
)
from mpbench.results.machine import Machine
from mpbench.results.schema import BottleneckStats, Fp8Prediction
from mpbench.results.step_stats import StepStats, median_of_present
from mpbench.results.variant import GROUP_RECIPE
from mpbench.results.variant import Layout as Layout  # a group's layout (GroupKey.layout)

FRAMEWORK_ORDER = ("torch", "tensorflow")
UNKNOWN_BOTTLENECK = "unknown"  # results.schema.BOTTLENECK_KINDS: no class, evidence missing
WORKLOAD_ORDER = (
    "mnist_dense",
    "cifar10_cnn",
    "transformer_lm",
    "transformer_lm_large",
)  # as the docs introduce them
_FAILED = (Status.DIVERGED, Status.OOM, Status.TIMEOUT, Status.ERROR)


def per_sample(stats: StepTimeStats, batch: int) -> StepTimeStats:
    """Step times divided by the samples a step trains: comparable across batch sizes."""
    return dataclasses.replace(
        stats,
        raw_s=[t / batch for t in stats.raw_s],
        median_s=stats.median_s / batch if stats.median_s else stats.median_s,
    )


_UNKNOWN_DATA = json.dumps(None)


def _adopt_orphans(by_key: dict[CellKey, list[CellRecord]]) -> None:
    """Cells that never trained join the group of their siblings.

    A skipped or failed cell has no measurements, so it lacks what a finished cell adds to
    its config (the data kind actually used, TensorFlow's input pipeline and jit state, ...).
    It joins the group that agrees on every config entry it does have; without this, a
    skipped tf32 cell would form a group, a label and a config line of its own. A group that
    has exactly its config keeps it (a diverged cell loaded its data: it knows its group), and
    a recipe entry it lacks is at its default, not unknown (records leave defaults out), so a
    plain cell never joins the accumulating or compiled group beside it."""
    trained = [k for k, records in by_key.items() if any(r.status is Status.OK for r in records)]
    trained_groups = {k.group for k in trained}
    for key in [k for k in by_key if k not in trained]:
        if key.group in trained_groups:
            continue
        have = {n: v for n, v in key.group.config if not (n == "data" and v == _UNKNOWN_DATA)}
        have.update(
            (n, json.dumps(default)) for n, default in GROUP_RECIPE.items() if n not in have
        )
        homes = [
            k
            for k in trained
            if (k.group.fingerprint, k.group.device, k.group.workload, k.group.framework)
            == (key.group.fingerprint, key.group.device, key.group.workload, key.group.framework)
            and all(_entry(k.group, n) == v for n, v in have.items())
            # A data-parallel layout is never unknown: world size 1 records none of it.
            and k.group.layout() == key.group.layout()
        ]
        groups = sorted({k.group for k in homes})
        if groups and groups[0] != key.group:
            target = CellKey(groups[0], key.row)
            by_key.setdefault(target, []).extend(by_key.pop(key))


def _entry(group: GroupKey, name: str) -> str | None:
    """A config entry of a group as JSON text; a recipe entry it lacks at its default."""
    config = dict(group.config)
    if name not in config and name in GROUP_RECIPE:
        return json.dumps(GROUP_RECIPE[name])
    return config.get(name)


RepeatKey = tuple[str, int]  # (run_id, repeat): how repeats of two policies pair up


@dataclass(frozen=True)
class Drift:
    """A repeat whose timed steps drifted (StepTimeStats.drifting): a warning, not an error."""

    run_id: str
    repeat: int
    first_half_s: float
    second_half_s: float


# Memory kinds, as the report names them. Training memory (schema v2) is what a policy changes;
# the process-lifetime peaks of v1 records also count the framework, the data and the model, so
# they are shown only for records without training memory, and never divided by each other.
_DEVICE_PEAK = "peak mem (device, whole process)"
_HOST_PEAK = "peak mem (host RSS, whole process)"


def memory_readings(record: CellRecord) -> dict[str, int]:
    """Every memory figure of a repeat, by kind, the preferred kind first."""
    memory = record.memory
    readings: dict[str, int] = {}
    if memory.training_bytes is not None and memory.training_source:
        readings[f"training mem ({memory.training_source})"] = memory.training_bytes
    # A zero process peak is "not measured" (nothing to divide by), not "no memory used".
    if memory.device_peak_allocated_bytes:
        readings[_DEVICE_PEAK] = memory.device_peak_allocated_bytes
    if memory.host_peak_rss_bytes:
        readings[_HOST_PEAK] = memory.host_peak_rss_bytes
    return readings


def is_training_memory(kind: str | None) -> bool:
    return bool(kind) and kind.startswith("training")


# What each kind of memory figure measures, as the tables' footnotes say it. The training
# memory of a torch cell on a GPU, a Keras cell on a GPU and any cell on a CPU are three
# different quantities (MemoryStats.training_source names which): figures of two kinds are
# shown apart, each with its meaning, and never divided by each other (memory_mismatch).
# Keys: the source as records spell it (a TensorFlow allocator's may name the allocator after
# it: "tensorflow allocator (cuda_malloc_async)"), or a process-peak kind.
MEMORY_MEANINGS = {
    "cuda allocator": (
        "from torch's CUDA allocator, the peak of live tensors while training less those at "
        "its start (its cache and the CUDA context not counted)"
    ),
    "tensorflow allocator": (
        "from TensorFlow's GPU allocator, the peak of bytes in use while training less those at "
        "its start"
    ),
    "process anonymous RSS sampled": (
        "the cell process's anonymous resident memory sampled every few ms (20 since schema "
        "14), its peak while training less its start (all the process allocates, a "
        "framework's own buffer pools included; a peak between two samples is missed)"
    ),
    "process RSS sampled": (
        "the cell process's whole resident memory sampled (code pages included, as mpbench "
        "measured it before the anonymous RSS), its peak while training less its start"
    ),
    _DEVICE_PEAK: "the device allocator's peak over the whole process (model, data, framework)",
    _HOST_PEAK: "the process's peak RSS over its whole life (framework, data and model included)",
}


def memory_text(kind: str) -> str:
    """`training mem (cuda allocator): from torch's CUDA allocator, the peak of live tensors
    ...`: a memory kind and what it measures (the kind alone where mpbench has no words)."""
    source = kind.removeprefix("training mem (").removesuffix(")")
    meaning = next((text for key, text in MEMORY_MEANINGS.items() if source.startswith(key)), None)
    return f"{kind}: {meaning}" if meaning else kind


def memory_mismatch(a: CellSummary, a_name: str, b: CellSummary, b_name: str) -> str | None:
    """Why the memory of `b` is not divided by `a`'s, where both have a figure: they measure
    different things (MEMORY_MEANINGS). None where they are alike, or a figure is missing."""
    if a.memory_kind is None or b.memory_kind is None or a.memory_kind == b.memory_kind:
        return None
    return (
        f"no ratio: {a_name}'s memory is {a.memory_kind}, {b_name}'s {b.memory_kind}: "
        "two different measures"
    )


@dataclass(frozen=True)
class Fp8Summary:
    """A float8 cell's fp8 as its finished repeats ran it (results.Fp8Stats, v9)."""

    mode: str  # "emulated" when any finished repeat was: no speed-up is shown then
    why: str
    gemm: str  # how its fp8 GEMMs ran, the record's words (from what ran: mpbench.fp8_rules)
    layers_fp8: int
    layers_total: int  # fp8 and kept in the base precision
    flop_share: float | None  # the fp8 GEMMs' share of the step's matmul FLOPs
    flop_share_note: str | None = None  # why the share is unknown or 0 (the record's words)
    # v12 (torch): its GEMMs' shapes and timings as the first repeat measured them, and the
    # gain over bf16 they predict, the median over the repeats (None: no prediction).
    prediction: Fp8Prediction | None = None
    predicted_gain: float | None = None
    # v13: layers mpbench swapped for an equivalent nn.Linear so that fp8 could take them
    # (name -> what was swapped), as the first repeat did.
    swapped_layers: dict[str, str] = field(default_factory=dict)

    @property
    def emulated(self) -> bool:
        return self.mode == "emulated"

    def coverage(self) -> str:
        """`fp8 covers 98 % of the step's matmul FLOPs`, or why that share is unknown. A
        count of layers is never the answer: GPT-2's one converted head is 1 of 3 layers and
        7 % of its FLOPs."""
        if self.flop_share == 0 and self.flop_share_note:
            return f"fp8 covers 0 % of the step's matmul FLOPs: {self.flop_share_note}"
        if self.share() is not None:
            return f"fp8 covers {self.share()} of the step's matmul FLOPs"
        why = self.flop_share_note or "the records do not say why"
        return f"fp8's share of the step's matmul FLOPs unknown: {why}"

    def share(self) -> str | None:
        """`98 %`: the fp8 GEMMs' share of the step's matmul FLOPs; None where unknown."""
        return None if self.flop_share is None else f"{self.flop_share * 100:.0f} %"

    def swapped(self) -> str | None:
        """`2 layers swapped for an equivalent nn.Linear so that fp8 could take them:
        transformers Conv1D (h.0.attn.c_attn, h.0.attn.c_proj)`; None where none was."""
        if not self.swapped_layers:
            return None
        by_what: dict[str, list[str]] = defaultdict(list)
        for name, what in self.swapped_layers.items():
            by_what[what].append(name)
        said = "; ".join(f"{what} ({_some(names)})" for what, names in by_what.items())
        count = len(self.swapped_layers)
        return (
            f"{count} layer{'s' if count > 1 else ''} swapped for an equivalent nn.Linear so "
            f"that fp8 could take {'them' if count > 1 else 'it'}: {said}"
        )


def _some(names: list[str], shown: int = 4) -> str:
    """`a, b, c, d and 8 more`: a long list of layer names, cut short."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


@dataclass
class CellSummary:
    """One cell with its repeats merged; every number comes with its interval (estimate.py)."""

    key: CellKey
    records: list[CellRecord]
    step_time_s: Estimate | None = None
    p10_s: float | None = None  # of every timed step of every ok repeat
    p90_s: float | None = None
    throughput: float | None = None  # samples/s, geometric mean over repeats
    memory_bytes: Estimate | None = None
    memory_kind: str | None = None  # "training mem (cuda allocator)", ... (memory_readings)
    dataset_device_bytes: float | None = None  # the preloaded dataset, not in training memory
    accuracy: Estimate | None = None  # fraction in [0, 1]
    test_loss: float | None = None  # median over the finished repeats
    loss_scale: float | None = None
    skipped_steps: int | None = None
    achieved_tflops: float | None = None
    mfu: float | None = None  # against the datasheet peak
    mfu_measured: float | None = None  # against the peak measured on this device
    peak_tflops: float | None = None  # the datasheet peak of the policy's dtype
    measured_peak_tflops: float | None = None
    end_to_end: Estimate | None = None  # samples/s without per-step synchronisation
    end_to_end_pipeline: str | None = None
    drift: list[Drift] = field(default_factory=list)
    # Telemetry (v4 records), medians over the finished repeats; None where not measured.
    cpu_util_pct: float | None = None  # mean CPU utilisation (100 = one core busy)
    gpu_util_pct: float | None = None
    # Mean power over the window: the energy counter's (v11, ΔE/Δt) where the repeats have
    # it, else the sampled mean; power_source says which ("energy counter", "sampled").
    power_w: float | None = None
    power_source: str | None = None
    energy_per_sample_j: float | None = None
    energy_source: str | None = None  # what measured it ("NVML total energy counter", ...)
    energy_reason: str | None = None  # why there is no energy, where the records say
    energy_windows: list[str] = field(default_factory=list)  # "timed steps", "steady window"
    # A sampled figure the records left out, and why (v11: a window too short for a mean):
    # metric (TelemetryStats field) -> the first repeat's reason.
    telemetry_missing: dict[str, str] = field(default_factory=dict)
    # What else ran (v6, docs/measurement.md): the finished repeats marked contended, and the
    # distinct reasons; step-time figures no device can produce (the verdict distrusts
    # them); figures the run voided (a measured peak that was too low), with why.
    contended_repeats: int = 0
    contended_why: list[str] = field(default_factory=list)
    # The largest share of the machine's CPU time others took in a contended repeat
    # (contention.taken_share): how far a timing gate must look past the condition.
    taken_share: float = 0.0
    implausible: list[str] = field(default_factory=list)
    voided: list[str] = field(default_factory=list)
    fp8: Fp8Summary | None = None  # float8 cells (v9)
    # What limited the step (v11, docs/measurement.md): the kind most finished repeats agree
    # on, with the evidence of the first of them; bottleneck_agree: (those repeats, the
    # repeats diagnosed).
    bottleneck: BottleneckStats | None = None
    bottleneck_agree: tuple[int, int] = (0, 0)

    @property
    def row(self) -> Row:
        return self.key.row

    @property
    def ok_records(self) -> list[CellRecord]:
        return [r for r in self.records if r.status is Status.OK]

    @property
    def ok(self) -> bool:
        """At least one repeat finished: numbers exist."""
        return bool(self.ok_records)

    @property
    def all_ok(self) -> bool:
        return all(r.status is Status.OK for r in self.records)

    @property
    def compiled(self) -> bool:
        """Its finished repeats ran under torch.compile (--compile, or a float8 cell's
        default): the record of a compiled cell holds its compile time."""
        return bool(self.ok_records) and all(r.compile is not None for r in self.ok_records)

    @property
    def failed(self) -> bool:
        """A repeat crashed, diverged, ran out of memory or timed out."""
        return any(r.status in _FAILED for r in self.records)

    @property
    def stopped(self) -> list[CellRecord]:
        """The repeats stopped early because they could not pay (their `stopped` figures say
        the ratio): measured, but no ratio, gate or verdict is taken from them."""
        return [r for r in self.records if r.status is Status.STOPPED]

    @property
    def status(self) -> str:
        """`ok` when every repeat is; otherwise the worst status among the repeats (a
        failure, then stopped, then skipped)."""
        if self.all_ok:
            return Status.OK.value
        bad = [r.status for r in self.records if r.status is not Status.OK]
        worst = next((s for s in (*_FAILED, Status.STOPPED) if s in bad), Status.SKIPPED)
        return worst.value

    @property
    def reason(self) -> str | None:
        """Every distinct reason of a repeat that did not finish, in order."""
        reasons = [r.reason for r in self.records if r.status is not Status.OK and r.reason]
        unique = list(dict.fromkeys(reasons))
        return "; ".join(unique) if unique else None

    @property
    def notes(self) -> str | None:
        """Warnings a finished repeat carried in its reason (the run keeps them there)."""
        reasons = [r.reason for r in self.records if r.status is Status.OK and r.reason]
        unique = list(dict.fromkeys(reasons))
        return "; ".join(unique) if unique else None

    @property
    def repeats(self) -> int:
        return len(self.records)

    @property
    def contended(self) -> bool:
        return self.contended_repeats > 0

    def busy_text(self) -> str | None:
        """`machine busy in 2 of 3 repeats (worst: other processes used 1.02 of 2 cores)`,
        or None."""
        if not self.contended:
            return None
        of = len(self.ok_records)
        worst = "; ".join(self.contended_why)
        return f"machine busy in {self.contended_repeats} of {of} repeats (worst: {worst})"

    # Per-repeat values, keyed for pairing with another policy's repeats.

    def step_times(self) -> dict[RepeatKey, StepTimeStats]:
        return {
            (r.run_id, r.repeat): r.step_time
            for r in self.ok_records
            if r.step_time is not None and r.step_time.median_s
        }

    def batch(self) -> int | None:
        """Samples per timed step (micro-batch × accumulation), as the records say."""
        sizes = (timed_step_samples(r.config) for r in self.records)
        return next((size for size in sizes if size is not None), None)

    def memory_values(self) -> dict[RepeatKey, int]:
        if self.memory_kind is None:
            return {}
        return {(r.run_id, r.repeat): memory_readings(r)[self.memory_kind] for r in self.ok_records}

    def accuracies(self) -> dict[RepeatKey, float]:
        return {
            (r.run_id, r.repeat): r.accuracy.test_accuracy
            for r in self.ok_records
            if r.accuracy.test_accuracy is not None
        }

    def end_to_end_rates(self) -> dict[RepeatKey, tuple[float, str]]:
        return {
            (r.run_id, r.repeat): (r.end_to_end.samples_per_s, r.end_to_end.input_pipeline)
            for r in self.ok_records
            if r.end_to_end is not None and r.end_to_end.samples_per_s > 0
        }


def summarize(key: CellKey, records: list[CellRecord]) -> CellSummary:
    records = sorted(records, key=lambda r: (r.repeat, r.run_id, r.cell_id))
    cell = CellSummary(key, records)
    ok = cell.ok_records
    timed = [r for r in ok if r.step_time is not None and r.step_time.median_s]
    if timed:
        cell.step_time_s = step_time([r.step_time for r in timed])
        raw = [t for r in timed for t in r.step_time.raw_s]
        cell.p10_s, cell.p90_s = _pooled_p10_p90(timed, raw)
    throughputs = [r.throughput_samples_per_s for r in ok if r.throughput_samples_per_s]
    if throughputs:
        cell.throughput = of_repeats(throughputs).value
    cell.memory_kind = _memory_kind(ok)
    if cell.memory_kind is not None:
        cell.memory_bytes = of_repeats([float(b) for b in cell.memory_values().values()])
    cell.dataset_device_bytes = median_of_present(r.memory.dataset_device_bytes for r in ok)
    accuracies = list(cell.accuracies().values())
    if accuracies:
        cell.accuracy = of_repeats(accuracies, log=False)
    cell.test_loss = median_of_present(r.accuracy.test_loss for r in ok)
    scales = [r.loss_scale for r in ok if r.loss_scale is not None]
    cell.loss_scale = median_of_present(s.final_scale for s in scales)
    skipped = median_of_present(s.skipped_steps for s in scales)
    cell.skipped_steps = round(skipped) if skipped is not None else None
    cell.achieved_tflops = median_of_present(r.achieved_tflops for r in ok)
    cell.mfu = median_of_present(r.mfu for r in ok)
    cell.mfu_measured = median_of_present(r.mfu_measured for r in ok)
    cell.peak_tflops = median_of_present(r.peak_tflops for r in ok)
    cell.measured_peak_tflops = median_of_present(r.measured_peak_tflops for r in ok)
    rates = cell.end_to_end_rates()
    if rates:
        cell.end_to_end = of_repeats([rate for rate, _ in rates.values()])
        cell.end_to_end_pipeline = "; ".join(dict.fromkeys(p for _, p in rates.values()))
    _summarize_telemetry(cell, ok)
    _summarize_trust(cell, ok)
    cell.fp8 = _summarize_fp8(ok)
    cell.bottleneck, cell.bottleneck_agree = _bottleneck(ok)
    cell.drift = [
        Drift(r.run_id, r.repeat, r.step_time.first_half_median_s, r.step_time.second_half_median_s)
        for r in timed
        if r.step_time.drifting
        and r.step_time.first_half_median_s is not None
        and r.step_time.second_half_median_s is not None
    ]
    return cell


def _summarize_telemetry(cell: CellSummary, ok: list[CellRecord]) -> None:
    """Device utilisation, power and energy per sample of the finished repeats (v4)."""
    telemetry = [r.telemetry for r in ok if r.telemetry is not None]
    cell.cpu_util_pct = median_of_present(t.mean_cpu_util_pct for t in telemetry)
    cell.gpu_util_pct = median_of_present(t.mean_gpu_util_pct for t in telemetry)
    energy = [r.energy for r in ok if r.energy is not None]
    counted = median_of_present(e.mean_power_w for e in energy)
    sampled = median_of_present(t.mean_power_w for t in telemetry)
    cell.power_w = counted if counted is not None else sampled
    if cell.power_w is not None:
        cell.power_source = "energy counter" if counted is not None else "sampled"
    cell.energy_windows = list(dict.fromkeys(e.window for e in energy if e.window))
    for metric, value in _SAMPLED.items():
        if value(cell) is None:
            why = next((t.unavailable[metric] for t in telemetry if metric in t.unavailable), None)
            if why:
                cell.telemetry_missing[metric] = why
    measured = [e for e in energy if e.joules_per_sample is not None]
    cell.energy_per_sample_j = median_of_present(e.joules_per_sample for e in measured)
    if measured:
        cell.energy_source = "; ".join(dict.fromkeys(e.source for e in measured if e.source))
        cell.energy_source = cell.energy_source or None
    else:
        # A cell with no finished repeat: why its repeats measured no energy, if they say.
        tried = energy or [r.energy for r in cell.records if r.energy is not None]
        reasons = dict.fromkeys(e.reason for e in tried if e.reason)
        cell.energy_reason = "; ".join(reasons) if reasons else None


# The sampled telemetry figures a record may leave out with a reason (TelemetryStats field ->
# the cell's figure): power only where no energy counter gave it either.
_SAMPLED = {
    "mean_cpu_util_pct": lambda c: c.cpu_util_pct,
    "mean_gpu_util_pct": lambda c: c.gpu_util_pct,
    "mean_power_w": lambda c: c.power_w,
}


def _summarize_fp8(ok: list[CellRecord]) -> Fp8Summary | None:
    """The fp8 of the finished repeats: emulated if any was (the step times then mix in the
    cost of emulation), the layer counts and FLOP share of the first."""
    ran = [r.fp8 for r in ok if r.fp8 is not None]
    if not ran:
        return None
    emulated = [f for f in ran if f.mode == "emulated"]
    first = (emulated or ran)[0]
    return Fp8Summary(
        mode=first.mode,
        why=first.why,
        gemm=first.gemm,
        layers_fp8=len(first.layers_fp8),
        layers_total=len(first.layers_fp8) + len(first.skipped_layers),
        flop_share=median_of_present(f.flop_share_fp8 for f in ran),
        # Why the share is unknown, or 0 (no layer ran in fp8): the records' words.
        flop_share_note=next((f.flop_share_note for f in ran if not f.flop_share_fp8), None),
        swapped_layers=dict(first.swapped_layers),
        prediction=next((f.prediction for f in ran if f.prediction is not None), None),
        predicted_gain=median_of_present(f.prediction.predicted_gain for f in ran if f.prediction),
    )


# MFU against a datasheet peak above this is no measurement but a wrong step time or peak.
MFU_LIMIT = 1.0


def _summarize_trust(cell: CellSummary, ok: list[CellRecord]) -> None:
    """Contended repeats and implausible figures (v6), each said once."""
    busy = [r.contention for r in ok if r.contention is not None and r.contention.contended]
    cell.contended_repeats = len(busy)
    if busy:  # the busiest repeat's reasons speak for the others
        cell.contended_why = max(busy, key=lambda c: c.other_cores).why
        cell.taken_share = max(taken_share(c) for c in busy)
    voided = [f"{name} dropped: {why}" for r in ok for name, why in r.implausible.items()]
    cell.voided = list(dict.fromkeys(voided))
    if cell.mfu is not None and cell.mfu > MFU_LIMIT:
        cell.implausible = [
            f"MFU {cell.mfu * 100:.0f} % of the datasheet peak: no device runs above its peak"
        ]


def _memory_kind(ok: list[CellRecord]) -> str | None:
    """The preferred memory kind that every finished repeat recorded (one kind per cell)."""
    if not ok:
        return None
    readings = [memory_readings(r) for r in ok]
    return next((kind for kind in readings[0] if all(kind in r for r in readings)), None)


def _pooled_p10_p90(timed: list[CellRecord], raw: list[float]) -> tuple[float | None, float | None]:
    if raw and len(timed) > 1:
        pooled = StepStats(raw)
        return pooled.p10, pooled.p90
    stats = timed[0].step_time if len(timed) == 1 else None
    if stats is not None:
        return stats.p10_s, stats.p90_s
    return (
        median_of_present(r.step_time.p10_s for r in timed),
        median_of_present(r.step_time.p90_s for r in timed),
    )


@dataclass
class PolicyGroup:
    """The policies of one framework × workload × config on one machine.

    Ratios to float32 pair repeats by (run_id, repeat): float32 r0 with bf16 r0 of the same
    run, which the runner interleaved in time. A repeat without a partner is left out. The
    ratios are taken once, by summary/build.py, into `comparisons`.
    """

    key: GroupKey
    cells: dict[Row, CellSummary] = field(default_factory=dict)  # row -> cell, in order
    # row -> its comparison against float32, computed once (summary/build.py) and only read
    comparisons: dict[Row, Comparison] = field(default_factory=dict)

    @property
    def data_names(self) -> list[str]:
        """The datasets the cells trained on ("synthetic-mnist", "mnist"), never guessed."""
        names = (r.data.name for c in self.cells.values() for r in c.records if r.data)
        return sorted(set(names))

    @property
    def reference(self) -> CellSummary | None:
        """The float32 cell ratios are taken against, when it finished."""
        cell = self.cells.get(BASELINE)
        return cell if cell is not None and cell.ok else None

    def emulated(self, policy: str) -> bool:
        """An emulated fp8 cell: its step time and memory are the cost of emulating fp8, so
        no speed-up, memory ratio or end-to-end speed-up is taken of them (docs/policies.md)."""
        cell = self.cells.get(policy)
        return bool(cell and cell.fp8 and cell.fp8.emulated)

    def unpaired(self, policy: str) -> tuple[list[RepeatKey], list[RepeatKey]]:
        """Timed repeats of (float32, policy) that have no partner in the other cell."""
        ref, cell = self.reference, self.cells.get(policy)
        if ref is None or cell is None or not cell.ok:
            return [], []
        a, b = ref.step_times(), cell.step_times()
        return sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())

    @property
    def batch_scaled(self) -> bool:
        """Some row runs another batch than float32 (--batch-scale-16bit)."""
        return any(row.batch_scaled for row in self.cells)


@dataclass
class Section:
    """One workload on one machine: every framework's group, torch and TensorFlow side by side."""

    fingerprint: str
    device: str
    workload: str
    groups: list[PolicyGroup] = field(default_factory=list)
    # Its scaling table's rows (data-parallel cells against world size 1), taken once with the
    # comparisons (summary/build.py) and only read: summary/scaling.py's ScalingRow, unnamed
    # here because scaling.py builds on this module.
    scaling: list = field(default_factory=list)

    @property
    def machine(self) -> Machine:
        """The section's machine, as every report names it (its groups share it)."""
        if self.groups:
            return self.groups[0].key.machine()
        return Machine(self.fingerprint, self.device)


def policy_rank(row: Row) -> tuple[int, str, list]:
    """The contract's policy order, then the rows of one policy by their numbers (@256 before
    @1024, loss scale 1024 before 1e+30)."""
    names, policy = list(POLICIES), row.policy
    parts = re.findall(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?|\D+", row)
    natural = [(0, float(p), "") if p[0].isdigit() else (1, 0.0, p) for p in parts]
    return (names.index(policy) if policy in names else len(names), policy, natural)


def _rank(order: tuple[str, ...], name: str) -> tuple[int, str]:
    return (order.index(name) if name in order else len(order), name)


def display_order(key: CellKey) -> tuple:
    """Machine, workload, torch before TensorFlow, config (the plain recipe before the
    accumulating or compiled ones; each config at world size 1 first, then its data-parallel
    groups), then the policies' canonical order."""
    group = key.group
    config = group.config_dict()
    recipes = sum(config.get(n, default) != default for n, default in GROUP_RECIPE.items())
    return (
        group.fingerprint,
        group.device,
        _rank(WORKLOAD_ORDER, group.workload),
        _rank(FRAMEWORK_ORDER, group.framework),
        recipes,
        group.single().config,
        group.layout().order(),
        group.config,
        policy_rank(key.row),
    )


def _bottleneck(ok: list[CellRecord]) -> tuple[BottleneckStats | None, tuple[int, int]]:
    """The diagnosis most repeats agree on (an "unknown" only where no repeat has a kind)."""
    found = [r.bottleneck for r in ok if r.bottleneck is not None]
    known = [b for b in found if b.kind != UNKNOWN_BOTTLENECK]
    if not known:
        return (found[0] if found else None), (0, len(found))
    kinds = Counter(b.kind for b in known)
    kind, count = kinds.most_common(1)[0]
    return next(b for b in known if b.kind == kind), (count, len(known))


def summarize_all(records: list[CellRecord]) -> dict[CellKey, CellSummary]:
    """Every cell of the records, repeats merged.

    The reader (results.io.read_runs) already refuses two different records of one repeat,
    naming both places; records handed over directly (the run summary) are held to the same
    rule (results/identity.py's same_record_or_reason): an identical copy counts once, a
    different one is an error, never dropped."""
    seen: dict[RecordKey, CellRecord] = {}
    by_key: dict[CellKey, list[CellRecord]] = defaultdict(list)
    for record in records:
        first = seen.get(record_key(record))
        if first is None:
            seen[record_key(record)] = record
            by_key[cell_key(record)].append(record)
        elif reason := same_record_or_reason(first, record):
            raise InvalidInput(reason)
    _adopt_orphans(by_key)
    return {key: summarize(key, recs) for key, recs in by_key.items()}


def group_sections(cells: dict[CellKey, CellSummary]) -> list[Section]:
    """The cells by section and group, in display order; no comparison taken yet
    (summary/build.py's build_sections takes them)."""
    groups: dict[GroupKey, PolicyGroup] = {}
    for key in sorted(cells, key=display_order):
        groups.setdefault(key.group, PolicyGroup(key.group)).cells[key.row] = cells[key]
    sections: dict[tuple[str, str, str], Section] = {}
    for group in groups.values():
        where = (group.key.fingerprint, group.key.device, group.key.workload)
        sections.setdefault(where, Section(*where)).groups.append(group)
    return list(sections.values())
