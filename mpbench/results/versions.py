"""The schema's history and the one loader of records: every version this mpbench reads, what
each version added or renamed, and how a record of an older version is read as today's.

A parsed record goes through load_record and nothing else (pyperf's versioned loaders are the
model): its version is checked first, its renamed fields are moved to their new names, every
value is checked (validate.py), and the record must hold no field newer than its version. What
comes out has today's field names, so `compare` reads every version alike; the version the
record says is kept, and a field its version did not have reads as None. Adding a version:
docs/architecture.md, "The result contract".
"""

from __future__ import annotations

from typing import Any

from mpbench.results.schema import CellRecord, SchemaError, Status
from mpbench.results.validate import build, check_record, held, shown

# Versions this reader understands. A reader of version 4 refuses version 5 records by their
# version, not by a field.
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
# The fields each version added, as dotted paths (an object a version added is one path). An
# older record lacks them, and they read as None (or empty); one that holds a value in them
# is not what its version says, and is refused (load_record).
FIELDS_SINCE: dict[int, tuple[str, ...]] = {
    # training memory, end-to-end throughput, drift, threads, measured-peak MFU
    2: (
        "end_to_end",
        "measured_peak_tflops",
        "mfu_measured",
        "threads",
        "memory.training_bytes",
        "memory.training_start_bytes",
        "memory.training_peak_bytes",
        "memory.training_source",
        "memory.sample_interval_s",
        "memory.samples",
        "memory.dataset_device_bytes",
        "step_time.first_half_median_s",
        "step_time.second_half_median_s",
        "step_time.drifting",
    ),
    # the training recipes: loss-scale mode and counts, accumulation, torch.compile
    3: (
        "compile",
        "loss_scale.mode",
        "loss_scale.initial_scale",
        "loss_scale.counted_steps",
        "loss_scale.skip_unit",
        "step_time.micro_batches_per_step",
        "step_time.micro_batch_median_s",
    ),
    4: ("telemetry", "energy", "divergence", "fallback_of"),
    5: ("distributed",),
    6: ("contention", "implausible"),
    # how the cell's process started (a fork server or a new interpreter) and its cost
    8: ("startup",),
    # the float8 policy: how its fp8 ran (hardware or emulated), its layers and FLOP share
    9: ("fp8",),
    # a cell run again as a new process after its fork server died under it: why
    10: ("startup.rerun",),
    # what limited the step (compute, memory, launches, input), with the evidence measured
    11: (
        "bottleneck",
        # telemetry true over short windows: the window's length, energy's window and power
        "telemetry.window_s",
        "energy.window",
        "energy.steps",
        "energy.mean_power_w",
    ),
    # fp8: compiled or eager, and each fp8 GEMM's predicted gain over bf16
    12: ("fp8.compiled", "fp8.prediction"),
    # your model, measured right: non-trainable parameters apart, the layers swapped so fp8
    # can take them, and where the fp8 GEMM shapes came from
    13: ("params_non_trainable", "fp8.swapped_layers", "fp8.shapes_source"),
    # a cell that cannot pay stops early: what it measured and the rule that stopped it
    # ... and what share of a 16-bit CPU step converts dtypes (the diagnosis of a small gain)
    14: ("stopped", "bottleneck.cast_share", "bottleneck.cast_source"),
}
# The statuses each version added: an older record cannot hold them.
STATUSES_SINCE: dict[int, tuple[Status, ...]] = {
    14: (Status.STOPPED,),
}
# Fields a version renamed: {version: {old dotted path: new name}}. Read older records by
# moving the value to its new name before the checks (upgrade()).
RENAMED_IN: dict[int, dict[str, str]] = {
    # NVML's device-wide `used` (every process, contexts, reserves), not an allocator peak
    7: {"telemetry.peak_gpu_memory_bytes": "peak_nvml_device_used_bytes"},
}


def upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """A parsed record of an older readable version with its renamed fields under today's
    names (a shallow copy; the version it says stays, so its checks are its own)."""
    version = raw["schema_version"]
    out = dict(raw)
    for since, renames in RENAMED_IN.items():
        if version >= since:
            continue
        for path, new in renames.items():
            parent, old = path.rsplit(".", 1)
            inner = out.get(parent)
            if isinstance(inner, dict) and inner.get(new) is not None:
                raise SchemaError(
                    f"{parent}.{new} is the name schema version {since} gave {path}, but the "
                    f"record says version {version}"
                )
            if isinstance(inner, dict) and (old in inner or new in inner):
                inner = dict(inner)
                inner[new] = inner.pop(old, None)
                out[parent] = inner
    return out


def load_record(raw: Any) -> CellRecord:
    """A record from parsed JSON of any readable version, upgraded to today's field names and
    checked; SchemaError naming what is wrong."""
    if not isinstance(raw, dict):
        raise SchemaError("a record must be a JSON object")
    version = raw.get("schema_version")
    # The version first: a newer record may differ in any field, so say that, not which.
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise SchemaError(
            f"unknown schema version {shown(version)} (this mpbench reads versions {readable})"
        )
    record = build(CellRecord, upgrade(raw))
    _check_fields_since(record)
    check_record(record)
    return record


def _check_fields_since(record: CellRecord) -> None:
    """SchemaError when the record holds a field or a status newer than the version it says."""
    for version, statuses in STATUSES_SINCE.items():
        if record.schema_version < version and record.status in statuses:
            raise SchemaError(
                f"status {record.status.value} is of schema version {version}, but the record "
                f"says version {record.schema_version}"
            )
    for version, paths in FIELDS_SINCE.items():
        if record.schema_version >= version:
            continue
        for path in paths:
            if held(record, path):
                raise SchemaError(
                    f"{path} is a field of schema version {version}, but the record says "
                    f"version {record.schema_version}"
                )
