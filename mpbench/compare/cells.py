"""From result records to cells: repeats merged, grouped per machine, framework and workload.

A cell is identified by machine (hardware fingerprint + device), framework, workload, policy
and effective config. The seed is not part of the identity (repeats may reseed), and the
requested data mode is replaced by the kind of data actually used (`auto` that found MNIST
equals `real`; synthetic data never equals real data). A cell that never loaded data (skipped
before it started) joins the group of its siblings.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from mpbench.compare.estimate import Estimate, median_interval
from mpbench.policies import BASELINE, POLICIES
from mpbench.results import CellRecord, Status

FRAMEWORK_ORDER = ("torch", "tensorflow")
WORKLOAD_ORDER = ("mnist_dense", "cifar10_cnn")  # as DESIGN.md introduces them
# Not what makes two cells comparable: the seed (repeats may reseed), the requested data mode
# and folder (the data actually used is), the device string (the machine is in the key).
_NOT_IDENTITY = ("seed", "data", "data_dir", "device")
_FAILED = (Status.DIVERGED, Status.OOM, Status.TIMEOUT, Status.ERROR)


@dataclass(frozen=True, order=True)
class GroupKey:
    """One framework × workload × config on one machine: where ratios to float32 are taken."""

    fingerprint: str
    device: str  # "cpu: AMD EPYC 9R14"
    workload: str
    framework: str
    config: tuple[tuple[str, str], ...]  # sorted (name, JSON value) pairs

    def config_dict(self) -> dict[str, Any]:
        return {name: json.loads(value) for name, value in self.config}

    def machine_free(self) -> GroupKey:
        """The same key with the machine blanked, to match across hardware when allowed."""
        return GroupKey("", "", self.workload, self.framework, self.config)


@dataclass(frozen=True, order=True)
class CellKey:
    group: GroupKey
    policy: str

    def machine_free(self) -> CellKey:
        return CellKey(self.group.machine_free(), self.policy)


def cell_key(record: CellRecord) -> CellKey:
    config = {k: v for k, v in record.config.items() if k not in _NOT_IDENTITY}
    config["data"] = _data_kind(record)
    pairs = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in config.items()))
    device = f"{record.device.kind}: {record.device.name}"
    group = GroupKey(record.hardware_fingerprint, device, record.workload, record.framework, pairs)
    return CellKey(group, record.policy)


def _data_kind(record: CellRecord) -> str | None:
    """ "real" or "synthetic"; None when the cell never loaded data and asked for `auto`."""
    if record.data is not None:
        return record.data.source
    requested = record.config.get("data")
    return requested if requested in ("real", "synthetic") else None


_UNKNOWN_DATA = json.dumps(None)


def _with_data(key: CellKey, value: str) -> CellKey:
    config = tuple((n, value if n == "data" else v) for n, v in key.group.config)
    return CellKey(dataclasses.replace(key.group, config=config), key.policy)


def _adopt_orphans(by_key: dict[CellKey, list[CellRecord]]) -> None:
    """Cells of unknown data kind join the group of the same config that knows it."""
    known: dict[CellKey, set[str]] = defaultdict(set)
    for key in by_key:
        data = dict(key.group.config).get("data")
        if data != _UNKNOWN_DATA:
            known[_with_data(key, _UNKNOWN_DATA)].add(data)
    for key in [k for k in by_key if dict(k.group.config).get("data") == _UNKNOWN_DATA]:
        siblings = {data for k, kinds in known.items() if k.group == key.group for data in kinds}
        if siblings:
            target = _with_data(key, sorted(siblings)[0])
            by_key.setdefault(target, []).extend(by_key.pop(key))


@dataclass
class CellSummary:
    """One cell with its repeats merged: medians of the ok repeats, spreads across them."""

    key: CellKey
    records: list[CellRecord]
    step_time_s: Estimate | None = None
    p10_s: float | None = None  # of every timed step of every ok repeat
    p90_s: float | None = None
    throughput: float | None = None  # samples/s
    memory_bytes: Estimate | None = None
    memory_source: str | None = None  # "device" or "host RSS"
    accuracy: Estimate | None = None  # fraction in [0, 1]
    loss_scale: float | None = None
    skipped_steps: int | None = None
    achieved_tflops: float | None = None
    mfu: float | None = None

    @property
    def policy(self) -> str:
        return self.key.policy

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
    def failed(self) -> bool:
        """A repeat crashed, diverged, ran out of memory or timed out."""
        return any(r.status in _FAILED for r in self.records)

    @property
    def status(self) -> str:
        """`ok` when every repeat is; otherwise the worst status among the repeats."""
        if self.all_ok:
            return Status.OK.value
        bad = [r.status for r in self.records if r.status is not Status.OK]
        worst = next((s for s in _FAILED if s in bad), Status.SKIPPED)
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


def summarize(key: CellKey, records: list[CellRecord]) -> CellSummary:
    records = sorted(records, key=lambda r: (r.repeat, r.run_id, r.cell_id))
    cell = CellSummary(key, records)
    ok = [r for r in records if r.status is Status.OK]
    timed = [r for r in ok if r.step_time is not None and r.step_time.median_s]
    if timed:
        medians = [r.step_time.median_s for r in timed]
        if len(timed) > 1:
            cell.step_time_s = Estimate.of_repeats(medians)
        else:
            stats = timed[0].step_time
            low, high = median_interval(stats.raw_s, stats.median_s)
            cell.step_time_s = Estimate(stats.median_s, low, high)
        raw = [t for r in timed for t in r.step_time.raw_s]
        cell.p10_s, cell.p90_s = _pooled_p10_p90(timed, raw)
    throughputs = [r.throughput_samples_per_s for r in ok if r.throughput_samples_per_s]
    if throughputs:
        cell.throughput = statistics.median(throughputs)
    cell.memory_bytes, cell.memory_source = _memory(ok)
    accuracies = [r.accuracy.test_accuracy for r in ok if r.accuracy.test_accuracy is not None]
    if accuracies:
        cell.accuracy = Estimate.of_repeats(accuracies)
    scales = [r.loss_scale for r in ok if r.loss_scale is not None]
    finals = [s.final_scale for s in scales if s.final_scale is not None]
    skipped = [s.skipped_steps for s in scales if s.skipped_steps is not None]
    cell.loss_scale = statistics.median(finals) if finals else None
    cell.skipped_steps = round(statistics.median(skipped)) if skipped else None
    tflops = [r.achieved_tflops for r in ok if r.achieved_tflops is not None]
    mfus = [r.mfu for r in ok if r.mfu is not None]
    cell.achieved_tflops = statistics.median(tflops) if tflops else None
    cell.mfu = statistics.median(mfus) if mfus else None
    return cell


def _pooled_p10_p90(timed: list[CellRecord], raw: list[float]) -> tuple[float | None, float | None]:
    if raw and len(timed) > 1:
        ordered = sorted(raw)
        return _percentile(ordered, 10), _percentile(ordered, 90)
    stats = timed[0].step_time if len(timed) == 1 else None
    if stats is not None:
        return stats.p10_s, stats.p90_s
    p10 = [r.step_time.p10_s for r in timed if r.step_time.p10_s is not None]
    p90 = [r.step_time.p90_s for r in timed if r.step_time.p90_s is not None]
    return (statistics.median(p10) if p10 else None, statistics.median(p90) if p90 else None)


def _percentile(ordered: list[float], pct: float) -> float:
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _memory(ok: list[CellRecord]) -> tuple[Estimate | None, str | None]:
    """Device peak allocated where the device reports it, else the cell process's peak RSS."""
    # A zero peak is "not measured" (nothing to divide by), not "no memory used".
    device = [r.memory.device_peak_allocated_bytes for r in ok]
    if ok and all(b for b in device):
        return Estimate.of_repeats([float(b) for b in device]), "device"
    host = [r.memory.host_peak_rss_bytes for r in ok if r.memory.host_peak_rss_bytes]
    if host:
        return Estimate.of_repeats([float(b) for b in host]), "host RSS"
    return None, None


@dataclass
class PolicyGroup:
    """The policies of one framework × workload × config on one machine."""

    key: GroupKey
    cells: dict[str, CellSummary] = field(default_factory=dict)  # policy -> cell, in order

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

    def speedup(self, policy: str) -> Estimate | None:
        """float32 step time / this policy's step time (above 1: faster than float32)."""
        ref, cell = self.reference, self.cells.get(policy)
        if ref is None or cell is None or not cell.ok:
            return None
        if ref.step_time_s is None or cell.step_time_s is None:
            return None
        return ref.step_time_s.ratio_to(cell.step_time_s)

    def memory_ratio(self, policy: str) -> Estimate | None:
        ref, cell = self.reference, self.cells.get(policy)
        if ref is None or cell is None or not cell.ok:
            return None
        if ref.memory_bytes is None or cell.memory_bytes is None:
            return None
        if ref.memory_source != cell.memory_source:
            return None
        return cell.memory_bytes.ratio_to(ref.memory_bytes)

    def accuracy_delta_pp(self, policy: str) -> Estimate | None:
        ref, cell = self.reference, self.cells.get(policy)
        if ref is None or cell is None or not cell.ok:
            return None
        if ref.accuracy is None or cell.accuracy is None:
            return None
        return cell.accuracy.minus(ref.accuracy).scaled(100)


@dataclass
class Section:
    """One workload on one machine: every framework's group, torch and TensorFlow side by side."""

    fingerprint: str
    device: str
    workload: str
    groups: list[PolicyGroup] = field(default_factory=list)


def _policy_rank(policy: str) -> tuple[int, str]:
    names = list(POLICIES)
    return (names.index(policy) if policy in names else len(names), policy)


def _rank(order: tuple[str, ...], name: str) -> tuple[int, str]:
    return (order.index(name) if name in order else len(order), name)


def display_order(key: CellKey) -> tuple:
    """Machine, workload, torch before TensorFlow, config, then the policies' canonical order."""
    group = key.group
    return (
        group.fingerprint,
        group.device,
        _rank(WORKLOAD_ORDER, group.workload),
        _rank(FRAMEWORK_ORDER, group.framework),
        group.config,
        _policy_rank(key.policy),
    )


def summarize_all(records: list[CellRecord]) -> dict[CellKey, CellSummary]:
    """Every cell of the records, repeats merged (a record read twice counts once)."""
    seen: set[tuple[str, str, int]] = set()
    by_key: dict[CellKey, list[CellRecord]] = defaultdict(list)
    for record in records:
        identity = (record.run_id, record.cell_id, record.repeat)
        if identity in seen:
            continue
        seen.add(identity)
        by_key[cell_key(record)].append(record)
    _adopt_orphans(by_key)
    return {key: summarize(key, recs) for key, recs in by_key.items()}


def build_sections(cells: dict[CellKey, CellSummary]) -> list[Section]:
    groups: dict[GroupKey, PolicyGroup] = {}
    for key in sorted(cells, key=display_order):
        groups.setdefault(key.group, PolicyGroup(key.group)).cells[key.policy] = cells[key]
    sections: dict[tuple[str, str, str], Section] = {}
    for group in groups.values():
        where = (group.key.fingerprint, group.key.device, group.key.workload)
        sections.setdefault(where, Section(*where)).groups.append(group)
    return list(sections.values())
