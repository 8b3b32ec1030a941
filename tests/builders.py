"""What tests build, in one place: a cell's CellSpec, the tiny run a test's `mpbench run`
trains, and result records shaped like a real run on this CPU. Every test folder imports it
(`pythonpath` in pyproject.toml puts tests/ on sys.path), so a test states only how its
cell, run or record differs from these.

The records follow a real `mpbench run` on this CPU (2-core AMD EPYC, avx512_bf16). The
committed compare fixtures under compare/fixtures/ are written from them by
compare/make_fixtures.py; tests build variations of them (slower cells, repeats, other
machines) with the same code. Numbers follow what this CPU measures: bf16 about 2.5x faster
than float32, fp16 several times slower (emulated), TF32 skipped (no such math mode on a
CPU). Records are of today's schema (training memory sampled from the process RSS, an
end-to-end window, drift) unless `v1=True` asks for an old record without those fields.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import zlib
from pathlib import Path

from mpbench.backends.base import CellSpec
from mpbench.backends.stopping import stopped_reason
from mpbench.results import (
    SCHEMA_VERSION,
    AccuracyStats,
    CellRecord,
    ContentionStats,
    DataInfo,
    DeviceInfo,
    DivergenceInfo,
    EndToEndStats,
    Fp8Stats,
    LossScaleStats,
    MemoryStats,
    Status,
    StepTimeStats,
    StopStats,
    append_record,
    load_record,
)

# --- a cell --------------------------------------------------------------------------------

# The cell a test trains unless it says otherwise: torch's mnist_dense at float32 on the CPU,
# 8 steps of a 32-unit model on synthetic data, a second or two in a process of its own.
CELL = dict(
    run_id="test",
    framework="torch",
    workload="mnist_dense",
    policy="float32",
    repeat=0,
    device="cpu",
    batch_size=64,
    epochs=1,
    max_steps=8,
    warmup_steps=2,
    units=32,
    seed=0,
    data="synthetic",
    synthetic_train_size=1024,
    synthetic_test_size=256,
)


def cell_spec(**overrides: object) -> CellSpec:
    """CELL with `overrides`; the cell id is the runner's plain one
    (framework/workload/policy/r<repeat>) unless given. The backends never read the ids: only
    the launchers do (fault injection, torchrun's rendezvous id)."""
    values = {**CELL, **overrides}
    values.setdefault(
        "cell_id",
        f"{values['framework']}/{values['workload']}/{values['policy']}/r{values['repeat']}",
    )
    return CellSpec(**values)


# --- a user workload ------------------------------------------------------------------------


def torch_only_workload(name: str, docstring: str = "") -> str:
    """The source of a module defining WORKLOAD, a torch-only UserWorkload called `name` (an
    MLP 8->16->2 on 640 separable rows): its module imports no framework until a cell builds
    it. Tests write it where a run, or an installed package, finds it."""
    head = f'"""{docstring}"""\n' if docstring else ""
    return (
        head
        + f"""import numpy as np

from mpbench.workloads import UserWorkload


def data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((640, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return x[:512], y[:512], x[512:], y[512:]


def torch_build(device):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1), nn.functional.cross_entropy


WORKLOAD = UserWorkload(name={name!r}, data=data, torch=torch_build, batch_size=64)
"""
    )


# --- a run ---------------------------------------------------------------------------------

# The run a test's `mpbench run` does unless it says otherwise: CELL's sizes as run.toml's
# tables (a smaller cifar10_cnn beside it), run_options() as the command line.
# The early stop's ratio rule is off: a tiny cell's ratio to float32 is mostly its overhead,
# and on a CPU that emulates a 16-bit dtype (fp16 everywhere but amx_fp16, bf16 on AVX2) it
# would stop cells these tests need finished (tests/backends/test_stop_early.py and
# tests/runner/test_stop_early_run.py test the rule itself).
TINY_RUN = {"data": "synthetic", "warmup_steps": 2, "timeout": 120, "stop_slower_than": "off"}
TINY_WORKLOADS = {
    "mnist_dense": {
        "batch_size": 64,
        "epochs": 1,
        "max_steps": 8,
        "units": 32,
        "synthetic_train_size": 1024,
        "synthetic_test_size": 256,
    },
    "cifar10_cnn": {
        "batch_size": 32,
        "epochs": 1,
        "max_steps": 4,
        "synthetic_train_size": 256,
        "synthetic_test_size": 64,
    },
}


def tiny_toml(run: dict | None = None, **workloads: dict | None) -> str:
    """A run.toml of TINY_RUN and TINY_WORKLOADS: `run` changes [run]'s keys, a workload's
    dict changes (or, for a workload not in TINY_WORKLOADS, is) its table, and None leaves a
    key or a table out."""
    tables = {"run": _merged(TINY_RUN, run or {})}
    for name in {**TINY_WORKLOADS, **workloads}:
        if name in workloads and workloads[name] is None:
            continue
        tables[f"workloads.{name}"] = _merged(TINY_WORKLOADS.get(name, {}), workloads.get(name))
    return "\n".join(
        f"[{table}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in keys.items())
        for table, keys in tables.items()
    )


def run_options(**overrides: object) -> list[str]:
    """TINY_RUN and mnist_dense's table as `mpbench run` options (one repeat, on the CPU);
    `overrides` by the option's name with underscores (`max_steps=4`), None leaving it out."""
    table = TINY_WORKLOADS["mnist_dense"]
    settings = {
        "workload": "mnist_dense",
        "data": TINY_RUN["data"],
        "units": table["units"],
        "batch_size": table["batch_size"],
        "max_steps": table["max_steps"],
        "warmup_steps": TINY_RUN["warmup_steps"],
        "repeat": 1,
        "device": "cpu",
        "timeout": TINY_RUN["timeout"],
        "stop_slower_than": TINY_RUN["stop_slower_than"],
    }
    options = []
    for name, value in _merged(settings, overrides).items():
        options += [f"--{name.replace('_', '-')}", str(value)]
    return options


def _merged(base: dict, changes: dict | None) -> dict:
    return {k: v for k, v in {**base, **(changes or {})}.items() if v is not None}


# --- records -------------------------------------------------------------------------------

# A cell's contention as a busy and a quiet 2-core machine record it (results' ContentionStats).
BUSY = ContentionStats(
    wall_s=3.0,
    cpus=2,
    busy_cores=2.0,
    own_cores=0.99,
    other_cores=1.01,
    steal_pct=0.0,
    contended=True,
    why=["other processes used 1.01 of 2 cores"],
)
QUIET = ContentionStats(wall_s=3.0, cpus=2, busy_cores=1.98, own_cores=1.97, other_cores=0.01)


CPU = DeviceInfo(kind="cpu", name="AMD EPYC")
CPU_FINGERPRINT = "cpu-3f9a1c07d2b84e51"
OTHER_CPU = DeviceInfo(kind="cpu", name="Intel Xeon Platinum 8488C")
OTHER_FINGERPRINT = "cpu-77c0e2a9b1d34f08"
MIB = 2**20
TF32_SKIP = "tf32 is unsupported on AMD EPYC: TF32 is an NVIDIA GPU math mode; CPUs have none"

VERSIONS = {"torch": "torch 2.13.0+cpu", "tensorflow": "tensorflow 2.21.0"}
PRECISION = {
    "float32": {"autocast_dtype": None, "tf32_enabled": False, "loss_scaling": False},
    "tf32": {},
    "mixed_float16": {"autocast_dtype": "float16", "tf32_enabled": False, "loss_scaling": True},
    "mixed_bfloat16": {"autocast_dtype": "bfloat16", "tf32_enabled": False, "loss_scaling": False},
}
OPTIMIZER = {
    "mnist_dense": {"optimizer": "rmsprop", "learning_rate": 0.001, "rho": 0.9, "epsilon": 1e-07},
    "cifar10_cnn": {
        "optimizer": "adam",
        "learning_rate": 0.001,
        "beta_1": 0.9,
        "beta_2": 0.999,
        "epsilon": 1e-07,
    },
}
WORKLOAD_CONFIG = {
    "mnist_dense": {"batch_size": 128, "epochs": 1, "max_steps": 60, "units": 64},
    "cifar10_cnn": {"batch_size": 128, "epochs": 1, "max_steps": 40, "units": None},
}
DATA = {
    "mnist_dense": DataInfo("synthetic-mnist", "synthetic", train_size=8192, test_size=2048),
    "cifar10_cnn": DataInfo("synthetic-cifar10", "synthetic", train_size=6144, test_size=1024),
}


def config(framework: str, workload: str, **overrides: object) -> dict:
    out = {**WORKLOAD_CONFIG[workload], "warmup_steps": 5, "seed": 0, "data": "synthetic"}
    if framework == "tensorflow":
        out.update(loop="fit", jit=False)
    out.update(device="cpu", data_dir=None, **OPTIMIZER[workload])
    out.update(overrides)
    return out


def step_times(median_ms: float, count: int, spread: float, seed_text: str) -> list[float]:
    """`count` step times (s) with a lognormal spread, rescaled so the median is exact."""
    rng = random.Random(zlib.crc32(seed_text.encode()))
    raw = [math.exp(rng.gauss(0.0, spread)) for _ in range(count)]
    ordered = sorted(raw)
    middle = (
        ordered[count // 2] if count % 2 else (ordered[count // 2 - 1] + ordered[count // 2]) / 2
    )
    return [median_ms / 1000 * t / middle for t in raw]


PIPELINE = {
    "torch": "preloaded tensors, shuffled index batches",
    "tensorflow": "tf.data from preloaded tensors",
}


def _training_memory(rec: CellRecord, training_mib: float | None, on_device: bool) -> None:
    if training_mib is None:
        return
    memory = rec.memory
    memory.training_bytes = int(training_mib * MIB)
    if on_device:
        memory.training_source = "cuda allocator"
        memory.training_start_bytes = memory.device_peak_allocated_bytes - memory.training_bytes
    else:
        memory.training_source = "process RSS sampled"
        memory.training_start_bytes = memory.host_peak_rss_bytes - memory.training_bytes
        memory.sample_interval_s = 0.01
        memory.samples = 120
    memory.training_peak_bytes = memory.training_start_bytes + memory.training_bytes


def record(
    framework: str,
    workload: str,
    policy: str,
    *,
    median_ms: float | None = None,
    accuracy: float | None = None,
    rss_mib: float | None = None,
    device_mib: float | None = None,
    status: Status = Status.OK,
    reason: str | None = None,
    repeat: int = 0,
    run_id: str = "20260301-101500-cpu",
    fingerprint: str = CPU_FINGERPRINT,
    device: DeviceInfo = CPU,
    loss_scale: tuple[float, int] | None = None,
    steps: int = 55,
    spread: float = 0.05,
    config_overrides: dict | None = None,
    training_mib: float | None = None,
    end_to_end: float | None = 0.93,
    v1: bool = False,
    recipe: str = "",
) -> CellRecord:
    """One cell's record. `training_mib`: training memory (v2), sampled RSS unless
    `device_mib` says the device has an allocator; `end_to_end`: end-to-end samples/s as a
    fraction of the synced throughput (None: no window); `v1`: an old record without either."""
    cfg = config(framework, workload, **(config_overrides or {}))
    cell_id = f"{framework}/{workload}/{policy}{recipe}/r{repeat}"  # recipe: "@bs2", as the runner
    rec = CellRecord(
        run_id=run_id,
        cell_id=cell_id,
        timestamp=f"2026-03-01T10:{15 + repeat:02d}:00+00:00",
        framework=framework,
        framework_version=VERSIONS.get(framework),
        workload=workload,
        policy=policy,
        repeat=repeat,
        device=dataclasses.replace(device),
        status=status,
        reason=reason,
        config=cfg,
        precision=dict(PRECISION.get(policy, {})),
        hardware_fingerprint=fingerprint,
        schema_version=1 if v1 else SCHEMA_VERSION,
    )
    if status is Status.SKIPPED:
        return rec  # decided before the cell started: no data loaded, nothing measured
    rec.data = dataclasses.replace(DATA[workload])
    if status is not Status.OK:
        return rec
    assert median_ms is not None
    raw = step_times(median_ms, steps, spread, f"{run_id}/{cell_id}")
    rec.step_time = StepTimeStats.from_samples(raw, warmup_steps=cfg["warmup_steps"])
    rec.throughput_samples_per_s = cfg["batch_size"] / rec.step_time.median_s
    rec.memory = MemoryStats(
        device_peak_allocated_bytes=int(device_mib * MIB) if device_mib is not None else None,
        device_peak_reserved_bytes=int(device_mib * 1.25 * MIB) if device_mib is not None else None,
        host_peak_rss_bytes=int(rss_mib * MIB) if rss_mib is not None else None,
    )
    if v1:
        rec.step_time.first_half_median_s = rec.step_time.second_half_median_s = None
        rec.step_time.drifting = None
    else:
        _training_memory(rec, training_mib, on_device=device_mib is not None)
        if end_to_end is not None:
            rate = rec.throughput_samples_per_s * end_to_end
            rec.end_to_end = EndToEndStats(
                samples_per_s=rate,
                steps=steps,
                seconds=steps * cfg["batch_size"] / rate,
                input_pipeline=PIPELINE[framework],
            )
    rec.accuracy = AccuracyStats(
        test_accuracy=accuracy,
        test_loss=None if accuracy is None else round(2.3 * (1 - accuracy), 4),
        train_loss_per_epoch=[] if accuracy is None else [round(2.4 * (1 - accuracy) + 0.05, 4)],
    )
    if loss_scale is not None:
        rec.loss_scale = LossScaleStats(final_scale=loss_scale[0], skipped_steps=loss_scale[1])
    rec.wall_s = round(median_ms * (steps + 5) / 1000 + 3.0, 3)
    return rec


# (median ms, test accuracy, peak RSS MiB, loss scale, training MiB) per framework, workload
# and policy. Training memory is what grew while training: activations, gradients, workspace.
CPU_RUN = {
    ("torch", "mnist_dense"): {
        "float32": (2.40, 0.9712, 612, None, 48.0),
        "mixed_float16": (13.1, 0.9706, 618, (65536.0, 1), 52.0),
        "mixed_bfloat16": (0.98, 0.9699, 604, None, 31.0),
    },
    ("torch", "cifar10_cnn"): {
        "float32": (48.0, 0.4512, 1130, None, 212.0),
        "mixed_float16": (262.0, 0.4489, 1152, (32768.0, 2), 236.0),
        "mixed_bfloat16": (19.5, 0.4475, 1098, None, 141.0),
    },
    ("tensorflow", "mnist_dense"): {
        "float32": (3.10, 0.9708, 1480, None, 96.0),
        "mixed_float16": (16.8, 0.9701, 1502, (32768.0, 0), 104.0),
        "mixed_bfloat16": (1.45, 0.9690, 1466, None, 70.0),
    },
    ("tensorflow", "cifar10_cnn"): {
        "float32": (61.0, 0.4470, 1890, None, 305.0),
        "mixed_float16": "timeout",
        "mixed_bfloat16": (27.5, 0.4431, 1844, None, 214.0),
    },
}


def cpu_run(run_id: str = "20260301-101500-cpu", **overrides: object) -> list[CellRecord]:
    """Every cell of a default run on this CPU: 2 frameworks x 2 workloads x 4 policies."""
    records = []
    for (framework, workload), cells in CPU_RUN.items():
        records.append(
            record(
                framework,
                workload,
                "tf32",
                status=Status.SKIPPED,
                reason=TF32_SKIP,
                run_id=run_id,
                **overrides,
            )
        )
        for policy, numbers in cells.items():
            if numbers == "timeout":
                records.append(
                    record(
                        framework,
                        workload,
                        policy,
                        status=Status.TIMEOUT,
                        reason="cell exceeded the 600 s timeout; killed",
                        run_id=run_id,
                        **overrides,
                    )
                )
                continue
            median_ms, accuracy, rss, scale, training = numbers
            records.append(
                record(
                    framework,
                    workload,
                    policy,
                    median_ms=median_ms,
                    accuracy=accuracy,
                    rss_mib=rss,
                    loss_scale=scale,
                    training_mib=None if overrides.get("v1") else training,
                    run_id=run_id,
                    **overrides,
                )
            )
    return sorted(records, key=lambda r: (r.framework != "torch", r.workload, r.policy))


def slower(records: list[CellRecord], factor: float, **where: str) -> list[CellRecord]:
    """Copies of `records` whose cells matching `where` take `factor` times as long per step."""
    out = []
    for rec in records:
        rec = load_record(rec.to_dict())
        if rec.step_time is not None and all(getattr(rec, k) == v for k, v in where.items()):
            raw = [t * factor for t in rec.step_time.raw_s]
            rec.step_time = StepTimeStats.from_samples(raw, rec.step_time.warmup_steps)
            if rec.schema_version == 1:  # old records carry no drift
                rec.step_time.first_half_median_s = rec.step_time.second_half_median_s = None
                rec.step_time.drifting = None
            rec.throughput_samples_per_s = rec.config["batch_size"] / rec.step_time.median_s
            if rec.end_to_end is not None:
                rec.end_to_end.samples_per_s /= factor
                rec.end_to_end.seconds *= factor
        out.append(rec)
    return out


def stopped(rec: CellRecord, float32_step_s: float, timeout_s: float = 900.0) -> CellRecord:
    """A copy of a finished record as the runner keeps a cell that could not pay: stopped
    after 3 timed steps, slower than float32 by its step over `float32_step_s`, its steps
    kept and no accuracy, end-to-end window or bottleneck (backends/stopping.py)."""
    rec = load_record(rec.to_dict())
    assert rec.step_time is not None and rec.step_time.median_s
    raw = rec.step_time.raw_s[:3]
    rec.step_time = StepTimeStats.from_samples(raw, rec.step_time.warmup_steps)
    step_s = rec.step_time.median_s
    ratio = step_s / float32_step_s
    rec.stopped = StopStats(
        rule="slower than float32",
        steps=3,
        planned_steps=rec.config["max_steps"] - rec.config["warmup_steps"],
        step_s=step_s,
        projected_s=5.0 + 100 * step_s,
        timeout_s=timeout_s,
        slower_than_float32=ratio,
        float32_step_s=float32_step_s,
        limit=10.0,
    )
    rec.status, rec.reason = Status.STOPPED, stopped_reason(rec.stopped)
    rec.accuracy, rec.end_to_end, rec.bottleneck = AccuracyStats(), None, None
    return rec


def write_run(run_dir: Path, records: list[CellRecord]) -> Path:
    for rec in records:
        append_record(run_dir, rec)
    return run_dir


# The recipe axes of docs/recipes.md as `mpbench run` records them: the config entries each
# one adds (left out at their default) and the mark it puts in the cell id.
ACCUMULATE_2 = {"accumulate": 2, "effective_batch_size": 256}
COMPILED = {"compile": True}
BATCH_SCALED_2 = {"batch_scale_16bit": 2, "reference_batch_size": 128, "batch_size": 256}


def variant_run(run_id: str = "20260305-120000-cpu") -> list[CellRecord]:
    """torch/mnist_dense run every way a policy can run on this CPU: plain float32, fp16 and
    bf16; float32 and bf16 with 2 accumulated micro-batches and compiled; fp16 at a static
    loss scale of 1024; bf16 at twice the batch; and fp16 at a static scale of 1e30, which
    diverged and fell back to bf16 (`--on-diverge fallback`)."""

    def cell(policy: str, ms: float, overrides: dict | None = None, recipe: str = "", **kw):
        return record("torch", "mnist_dense", policy, median_ms=ms, accuracy=0.97, rss_mib=600,
                      training_mib=40, run_id=run_id, config_overrides=overrides,
                      recipe=recipe, **kw)  # fmt: skip

    records = [
        cell("float32", 2.40),
        cell("mixed_float16", 13.1, loss_scale=(65536.0, 1)),
        cell("mixed_bfloat16", 0.98),
        cell("float32", 4.70, ACCUMULATE_2, "@acc2"),
        cell("mixed_bfloat16", 1.90, ACCUMULATE_2, "@acc2"),
        cell("float32", 2.10, COMPILED, "@compiled"),
        cell("mixed_bfloat16", 0.81, COMPILED, "@compiled"),
        cell("mixed_float16", 12.2, {"loss_scale": 1024.0}, "@ls1024", loss_scale=(1024.0, 0)),
        cell("mixed_bfloat16", 1.92, BATCH_SCALED_2, "@bs2"),
    ]
    diverged = record("torch", "mnist_dense", "mixed_float16", status=Status.DIVERGED,
                      reason="more than 50 % of the last 20 steps were skipped",
                      run_id=run_id, config_overrides={"loss_scale": 1e30},
                      recipe="@ls1e+30")  # fmt: skip
    diverged.divergence = DivergenceInfo("skipped_fraction", 20, {"skipped_fraction": 0.9})
    # runner/fallback.py: the same cell one step down, without the static scale, its id the
    # diverged one's with the fallback's policy after it.
    fallback = cell("mixed_bfloat16", 1.00)
    fallback.cell_id = "torch/mnist_dense/mixed_float16@ls1e+30~fallback-mixed_bfloat16/r0"
    fallback.fallback_of = diverged.cell_id
    return [*records, diverged, fallback]


def fp8_stats(**overrides: object) -> Fp8Stats:
    """An fp8 cell's `fp8` block as torchao on an H100 records it (hardware fp8, compiled, the
    MNIST dense model's two inner layers converted); `overrides` by field."""
    fields = dict(
        mode="hardware",
        why="fp8 GEMMs on fp8 Tensor Cores (compute capability >= 8.9)",
        requested="auto",
        backend="torchao 0.18.0 float8 training",
        gemm="torch._scaled_mm on fp8 Tensor Cores (cuBLASLt tensorwise)",
        recipe="tensorwise",
        scaling="dynamic (current) scaling, per tensor",
        formats={"input": "float8_e4m3fn"},
        base_policy="mixed_bfloat16",
        layers_fp8=["0", "2"],
        skipped_layers={},
        flop_share_fp8=0.998,
        compiled=True,
    )
    return Fp8Stats(**{**fields, **overrides})
