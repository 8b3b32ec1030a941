"""A cell's identity: which records are the same cell across repeats and runs, and which
cells share a group (where ratios to float32 are taken). One definition for the runner
(`--repeat auto` pairs its rounds with it, runner/adaptive.py) and compare
(compare/summary/cells.py), so that both pair the same records.

A cell is identified by machine (hardware fingerprint + device), framework, workload, policy
and effective config. The seed is not part of the identity (repeats may reseed), and the
requested data mode is replaced by the kind of data actually used (`auto` that found MNIST
equals `real`; synthetic data never equals real data).

A record is identified by its run, cell and repeat (`record_key`), and one rule says what a
record found twice is (`same_record_or_reason`): the readers (results/io.py, results/sources.py),
compare's summary and the writer all keep it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A machine's name and its fingerprint's short form are results/machine.py's; imported from
# here too by the tables that name a group's machine.
from mpbench.results.machine import SHORT_FINGERPRINT as SHORT_FINGERPRINT
from mpbench.results.machine import SITE_KEY, Machine, device_name, site_name
from mpbench.results.machine import short_fingerprint as short_fingerprint
from mpbench.results.schema import CellRecord
from mpbench.results.variant import FALLBACK, Layout, row_marks

# Figures a cell counted, which the runner keeps in its config beside its settings (a user
# workload's FLOPs, and how they were counted: runner/records.py): what the cell measured, not
# how it ran. Two cells of one config that counted differently are one cell, and no table
# names a row by a count.
COUNTED = ("flops_per_micro_batch", "flops_source")
# What a user workload chose for its cell's policy (UserWorkload.torch_policy: an hf: MoE's
# experts implementation): it differs between the policies of one group by design.
CHOSEN = "chosen_for_policy"
# Not what makes two cells comparable: the seed (repeats may reseed), the requested data mode
# and folder (the data actually used is), the device string (the machine is in the key), what
# was chosen per policy, and the counted figures.
_NOT_IDENTITY = ("seed", "data", "data_dir", "device", CHOSEN, *COUNTED)
# The data-parallel layout (docs/distributed.md): in a data-parallel cell's config only, so a
# world-size-1 cell has none of them. Each world size is a group of its own (ratios to float32
# are taken at one world size); the scaling table relates the groups across world sizes.
PARALLEL_KEYS = ("world_size", "nproc_per_node", "nnodes", "grad_comm")


RecordKey = tuple[str, str, int]  # (run id, cell id, repeat)


def record_key(record: CellRecord) -> RecordKey:
    """A record's identity: (run id, cell id, repeat). A results file, a store and a
    comparison hold at most one record per key; the repeats of one cell differ in `repeat`."""
    return (record.run_id, record.cell_id, record.repeat)


def same_record_or_reason(
    first: CellRecord, second: CellRecord, places: tuple[object, object] | None = None
) -> str | None:
    """The duplicate rule for two records of one `record_key`: None where they are the same
    record (an identical copy: the same run passed twice, as its directory and from a store,
    is read once), else the one line that refuses them. Keeping either of two different
    copies would drop a measurement without a word, and keeping both would count one repeat
    twice.

    `places`: where each copy was found (a file and line, a store), named in the line with
    the advice to pass each run once; without them the line names the record only."""
    if first == second:
        return None
    a, b = first.to_dict(), second.to_dict()
    differ = ", ".join(name for name in a if a[name] != b.get(name))
    run_id, cell_id, repeat = record_key(first)
    reason = (
        f"two different records of run {run_id}, cell {cell_id}, repeat {repeat} "
        f"(they differ in {differ})"
    )
    if places is None:
        return reason
    return f"{places[0]} and {places[1]}: {reason}; pass each run once"


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

    def machine(self) -> Machine:
        """The group's machine, as every report names it (its config holds the site's name)."""
        return Machine(self.fingerprint, self.device, site_name(self.config_dict().get(SITE_KEY)))

    def machine_free(self) -> GroupKey:
        """The same key with the machine blanked, to match across hardware when allowed."""
        return GroupKey("", "", self.workload, self.framework, self.config)

    def layout(self) -> Layout:
        return Layout.of(self.config_dict())

    def single(self) -> GroupKey:
        """The same group at world size 1: its config without the data-parallel entries (the
        world-size-1 cells of a run are recorded without them)."""
        config = tuple((n, v) for n, v in self.config if n not in PARALLEL_KEYS)
        return dataclasses.replace(self, config=config)


class Row(str):
    """A cell's row in its group: its policy and its variant, the row marks that set it apart
    from the policy's plain cell (`@512`, `[loss scale 1024]`, `(fallback)`; None for none).

    The two are separate fields, read as `row.policy` and `row.variant`, never split out of the
    text again. The row is also that text (`mixed_float16 [loss scale 1024]`), which is how every
    table, JSON report and plot names it, and the key of a group's cells and comparisons: as a
    str it is found by the plain policy's name too (`group.cells.get("float32")`)."""

    policy: str
    variant: str | None

    def __new__(cls, policy: str, variant: str | None = None) -> Row:
        row = super().__new__(cls, f"{policy} {variant}" if variant else policy)
        row.policy, row.variant = policy, variant or None
        return row

    def __getnewargs__(self) -> tuple[str, str | None]:  # copy and pickle keep the fields
        return (self.policy, self.variant)

    @property
    def fallback(self) -> bool:
        """The fallback of a diverged cell (--on-diverge fallback): its mark comes last."""
        return bool(self.variant and self.variant.endswith(FALLBACK))

    @property
    def batch_scaled(self) -> bool:
        """A 16-bit cell at a larger batch than float32's: its mark (`@512`) comes first."""
        return bool(self.variant and self.variant.startswith("@"))


@dataclass(frozen=True, order=True)
class CellKey:
    group: GroupKey
    row: Row  # the policy, plus the row marks that vary within the group (_row_marks)

    def machine_free(self) -> CellKey:
        return CellKey(self.group.machine_free(), self.row)


def cell_key(record: CellRecord) -> CellKey:
    config = {k: v for k, v in record.config.items() if k not in _NOT_IDENTITY}
    config["data"] = _data_kind(record)
    # --on-diverge fallback: a row of its own, never the policy's own cell
    row = Row(record.policy, _row_marks(record.policy, config, fallback=bool(record.fallback_of)))
    pairs = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in config.items()))
    device = device_name(record)
    group = GroupKey(record.hardware_fingerprint, device, record.workload, record.framework, pairs)
    return CellKey(group, row)


def group_entries(policy: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of a cell's config that its group's cells share (a 16-bit cell's batch as
    float32's): what the runner matches a cell's float32 twin by before either has a record
    (runner/twin.py), by the rule cell_key groups records by."""
    entries = {k: v for k, v in config.items() if k not in _NOT_IDENTITY}
    _row_marks(policy, entries, fallback=False)
    return entries


def _row_marks(policy: str, config: dict[str, Any], fallback: bool) -> str:
    """The cell's row marks in its group (results.variant.row_marks), whose entries are then
    taken out of `config` (the group identity).

    Two recipe axes apply to some policies only, so their cells share float32 as reference:
    the 16-bit batch factor (`mixed_bfloat16 @512` beside float32 at the configured batch,
    kept as `batch_size`) and the static loss scale (`mixed_float16 [loss scale 1024]`).
    Accumulation and compile apply to every policy and stay in the group identity."""
    marks = row_marks(policy, config, fallback)
    reference = config.pop("reference_batch_size", None)
    config.pop("batch_scale_16bit", None)
    config.pop("effective_batch_size", None)  # batch × accumulate: implied by both
    config.pop("loss_scale", None)
    if isinstance(reference, int):
        config["batch_size"] = reference
    return marks


def timed_step_samples(config: Mapping[str, Any]) -> int | None:
    """The samples one timed step trains, as a record's config says: the micro-batch times
    the micro-batches accumulated. Step times are divided by it where two cells' batches
    differ (--batch-scale-16bit), by compare's speed-ups and --repeat auto's rounds alike;
    None where the config does not say."""
    batch, accumulate = config.get("batch_size"), config.get("accumulate", 1)
    whole = all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (batch, accumulate)
    )
    return batch * accumulate if whole else None


def _data_kind(record: CellRecord) -> str | None:
    """ "real" or "synthetic"; None when the cell never loaded data and asked for `auto`."""
    if record.data is not None:
        return record.data.source
    requested = record.config.get("data")
    return requested if requested in ("real", "synthetic") else None
