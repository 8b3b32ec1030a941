"""A cell's settings in (the settings marked `cell`, runner/matrix.py) and its answer out
(Measurements.to_dict in the cell's process, Measurements.from_dict in the runner's)."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builders import cell_spec

from mpbench.backends.base import BusyEvidence, CellSpec, Measurements
from mpbench.policies import DeviceTraits
from mpbench.results.schema import (
    DataInfo,
    DeviceInfo,
    EndToEndStats,
    LossScaleStats,
    MemoryStats,
    Status,
)
from mpbench.results.versions import load_record
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.launchers import process as execute
from mpbench.runner.matrix import PASSED_FROM_RUN, PASSED_FROM_WORKLOAD, WORKED_OUT, expand
from mpbench.runner.records import build_record
from mpbench.settings import SETTINGS, Setting

QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick.toml"
CPU = DeviceTraits("cpu", "a test CPU")

# --- the settings a cell takes ------------------------------------------------------------


def declaration_problems(
    spec: type, settings: tuple[Setting, ...], worked_out: frozenset[str]
) -> list[str]:
    """What is wrong between CellSpec's fields, the settings marked `cell` and the fields
    runner/matrix.py works out per cell: each field must be exactly one of the two."""
    fields = {f.name for f in dataclasses.fields(spec)}
    marked = [s for s in settings if s.cell]
    problems = []
    for setting in marked:
        if setting.home not in ("run", "workload"):
            problems.append(f"{setting.name}: marked cell, but its home is {setting.home}")
        if setting.target not in fields:
            problems.append(f"{setting.name}: marked cell, but CellSpec has no {setting.target}")
        if setting.target in worked_out:
            problems.append(f"{setting.name}: marked cell and worked out per cell too")
    problems += [f"{name}: worked out, but no CellSpec field" for name in worked_out - fields]
    declared = {s.target for s in marked} | worked_out
    problems += [f"{name}: neither marked nor worked out" for name in sorted(fields - declared)]
    return problems


def test_every_cellspec_field_is_a_marked_setting_or_worked_out_per_cell():
    assert declaration_problems(CellSpec, SETTINGS, WORKED_OUT) == []
    marked = {s.target for s in SETTINGS if s.cell}
    assert set(PASSED_FROM_RUN) | set(PASSED_FROM_WORKLOAD) == marked


def test_the_check_fails_on_a_field_or_a_setting_left_undeclared():
    @dataclasses.dataclass
    class Grown(CellSpec):
        new_knob: int = 0  # a CellSpec field nobody declared

    assert declaration_problems(Grown, SETTINGS, WORKED_OUT) == [
        "new_knob: neither marked nor worked out"
    ]
    orphan = Setting("no_such_field", int, 1, toml=("run",), cell=True)
    assert declaration_problems(CellSpec, (*SETTINGS, orphan), WORKED_OUT) == [
        "no_such_field: marked cell, but CellSpec has no no_such_field"
    ]
    unmarked = tuple(
        dataclasses.replace(s, cell=False) if s.name == "loop" else s for s in SETTINGS
    )
    assert declaration_problems(CellSpec, unmarked, WORKED_OUT) == [
        "loop: neither marked nor worked out"
    ]
    assert declaration_problems(CellSpec, SETTINGS, WORKED_OUT | {"epochs"}) == [
        "epochs: marked cell and worked out per cell too"
    ]


class Report:
    """Stands in for a DetectReport of a machine with a CPU only."""

    gpus = ()  # no NVIDIA GPU
    nvidia_device_files_present = False

    def device_traits(self, kind: str, index: int | None = None) -> DeviceTraits | None:
        return CPU if kind == "cpu" else None


def example_value(setting: Setting) -> Any:
    """The setting's example (text, as typed) as the value it gives."""
    if setting.from_text is not None:
        return setting.from_text(setting.name, setting.example)
    return json.loads(
        setting.example if setting.kind in (int, bool) else json.dumps(setting.example)
    )


def test_each_marked_setting_reaches_every_cell_as_it_is():
    options = RunOptions(
        config=QUICK, frameworks=["torch"], workloads=["mnist_dense"], policies=["fp32"], repeat=2
    )
    config = build_config(options)
    defaults = {f.name: f.default for f in dataclasses.fields(CellSpec)}
    given = {}
    for setting in (s for s in SETTINGS if s.cell):
        value = example_value(setting)
        assert value != defaults[setting.target], f"{setting.name}'s example is CellSpec's default"
        home = config if setting.home == "run" else config.workloads["mnist_dense"]
        setattr(home, setting.target, value)
        given[setting.target] = value
    _, _, cells = expand(config, Report(), "run-1")
    assert len(cells) == 2
    for cell in cells:
        assert {name: getattr(cell.spec, name) for name in given} == given
    # The fields worked out per cell still are: each repeat its own seed.
    assert [cell.spec.seed for cell in cells] == [config.seed, config.seed + 1]


# --- the answer -----------------------------------------------------------------------------


def full_measurements() -> Measurements:
    """Every field of Measurements set, as a finished float8 data-parallel cell sends them,
    numpy scalars among them as a framework hands them over."""
    return Measurements(
        framework_version="torch 2.13.0",
        device=DeviceInfo(kind="cpu", name="a test CPU", capability="avx512_bf16"),
        precision={"compute_dtype": "bfloat16", "tf32": False},
        step_times_s=[0.02, 0.011, 0.01, 0.012, 0.0105],
        warmup_steps=2,
        samples_per_step=128,
        epoch_losses=[2.25, 1.5],
        test_accuracy=np.float32(0.75),
        test_loss=1.25,
        params=np.int64(50890),
        memory=MemoryStats(host_peak_rss_bytes=123456789, training_bytes=4096, samples=12),
        loss_scale=LossScaleStats(final_scale=1024.0, skipped_steps=1, mode="dynamic"),
        data=DataInfo(name="synthetic-mnist", source="synthetic", train_size=4096, test_size=1024),
        extra_config={"flops_per_micro_batch": 1.5e9, "momentum": 0.9},
        end_to_end=EndToEndStats(samples_per_s=9000.5, steps=3, seconds=0.04, input_pipeline="x"),
        threads={"intra_op": 2, "inter_op": 2, "omp_num_threads": "2"},
        micro_batches_per_step=2,
        status="ok",
        reason=None,
        compile={"backend": "inductor", "compile_s": 3.5, "recompiles": 0, "frames_compiled": 2},
        telemetry=None,
        divergence=None,
        distributed={
            "world_size": 2,
            "nodes": 1,
            "nproc_per_node": 2,
            "launcher": "torchrun",
            "backend": "gloo",
            "grad_comm": "fp32",
            "devices": "shared",
            "rank_step_median_s": [0.011, 0.0115],
        },
        fp8={
            "mode": "emulated",
            "why": "--fp8-mode emulated",
            "requested": "emulated",
            "backend": "torchao 0.18.0 float8 training",
            "gemm": "emulated",
            "recipe": "tensorwise",
            "scaling": "dynamic",
            "formats": {"forward": "float8_e4m3fn"},
            "base_policy": "mixed_bfloat16",
            "layers_fp8": ["fc1"],
        },
        busy=BusyEvidence(
            source="process CPU time",
            host_cpu_s=0.05,
            host_wall_s=0.04,
            threads=2,
            unavailable={"device_busy_fraction": "a CPU"},
        ),
    )


# The cell's side: what its process does with its Measurements (launchers/cell.py's `done`).
CHILD = """
import ast, pickle, sys
from mpbench.runner.launchers.cell import Events

measurements = pickle.loads(sys.stdin.buffer.read())
figures = measurements.to_dict()
for name in sys.argv[2:]:  # the fields this test breaks on purpose
    name, _, value = name.partition("=")
    if value:
        figures[name] = ast.literal_eval(value)
    else:
        del figures[name]
Events(int(sys.argv[1])).send("done", measurements=figures)
"""


def answer(measurements: Measurements, *broken: str) -> execute.Outcome:
    """The outcome the runner reads (process.py's _collect) from a child process that sent
    `measurements`, with the fields `broken` names removed (`name`) or replaced (`name=expr`)."""
    read_fd, write_fd = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(write_fd), *broken],
        stdin=subprocess.PIPE,
        pass_fds=(write_fd,),
    )
    os.close(write_fd)
    try:
        child.stdin.write(pickle.dumps(measurements))
        child.stdin.close()
        outcome = execute._collect(child, read_fd, time.monotonic() + 60, lambda *_: None)
    finally:
        os.close(read_fd)
        if child.poll() is None:
            child.kill()
            child.wait()
    assert outcome is not None, "the child sent no final event"
    return outcome


def spec() -> CellSpec:
    return cell_spec(
        cell_id="torch/mnist_dense/float8@acc2@np2/r0",
        policy="float8",
        max_steps=5,
        accumulate=2,
        nproc=2,
    )


def test_the_answer_crosses_the_pipe_whole_and_typed():
    sent = full_measurements()
    outcome = answer(sent)
    assert (outcome.status, outcome.reason) == ("ok", None)
    assert outcome.measurements == sent  # every field, numpy scalars made numbers
    assert isinstance(outcome.measurements.device, DeviceInfo)
    assert isinstance(outcome.measurements.data, DataInfo)
    assert type(outcome.measurements.params) is int
    record = build_record(spec(), outcome, CPU, "fingerprint", "torch 2.13.0")
    assert record.device == sent.device and record.memory == sent.memory
    assert record.data == sent.data and record.end_to_end == sent.end_to_end
    assert record.loss_scale == sent.loss_scale
    assert record.step_time.count == 3 and record.step_time.micro_batches_per_step == 2
    assert record.throughput_samples_per_s == pytest.approx(128 / 0.0105)
    assert record.compile.compile_s == 3.5 and record.fp8.mode == "emulated"
    assert record.distributed.per_device_samples_per_s == pytest.approx(128 / 0.0105 / 2)
    # The busy figures reach the record's bottleneck; an emulated fp8 cell has no peak.
    assert record.bottleneck.host_busy_fraction == pytest.approx(0.05 / 0.08)
    assert record.bottleneck.kind == "unknown" and "emulated" in record.bottleneck.evidence
    assert record.config["momentum"] == 0.9
    # The record the runner writes reads back as valid.
    assert load_record(json.loads(json.dumps(record.to_dict()))) == record


def test_a_finished_cell_that_is_not_ok_keeps_its_status_and_measurements():
    sent = dataclasses.replace(
        full_measurements(), status="diverged", reason="most steps were skipped"
    )
    outcome = answer(sent)
    assert (outcome.status, outcome.reason) == ("diverged", "most steps were skipped")
    assert outcome.measurements == sent


@pytest.mark.parametrize(
    ("broken", "said"),
    [
        (["params"], "params is missing"),
        (["device"], "device is missing"),
        (["params='50890'"], "params: int expected, not str '50890'"),
        (["warmup_steps=True"], "warmup_steps: int expected, not true or false"),
        (["step_times_s=[0.01, None]"], "step_times_s[1]: a number was expected, not null"),
        (["step_times_s={}"], "step_times_s: a list was expected, not dict {}"),
        (["device={'kind': 'cpu'}"], "device: DeviceInfo.__init__() missing 1 required"),
        (["memory={'bytes': 1}"], "memory: MemoryStats.__init__() got an unexpected keyword"),
        (["fp8={'mode': 'hardware'}"], "fp8: why is missing"),
        (["distributed={'world_size': 2, 'ranks': 2}"], "distributed: unknown field(s) ranks"),
        (["status='fine'"], "status 'fine' is no record status"),
        (["seconds=3"], "unknown field(s) seconds"),
    ],
)
def test_a_malformed_answer_fails_the_cell_with_the_reason(broken, said):
    outcome = answer(full_measurements(), *broken)
    assert outcome.status == "error" and outcome.measurements is None
    assert outcome.reason.startswith("the cell's measurements cannot be read: ")
    assert said in outcome.reason
    record = build_record(spec(), outcome, CPU, "fingerprint", None)
    assert (record.status, record.reason) == (Status.ERROR, outcome.reason)
    assert record.step_time is None


def test_an_answer_that_is_no_object_fails_the_cell():
    outcome = execute._final({"event": "done", "measurements": [1, 2]}, ["a warning"])
    assert (outcome.status, outcome.warnings) == ("error", ["a warning"])
    assert (
        outcome.reason
        == "the cell's measurements cannot be read: an object was expected, not list [1, 2]"
    )
    assert execute._final({"event": "done"}, []).reason.endswith("an object was expected, not null")


@pytest.mark.parametrize(
    "event",
    [
        {"event": "failed", "reason": "it broke"},
        {"event": "failed", "status": "ok", "reason": "it broke"},
        {"event": "failed", "status": "oom"},
    ],
)
def test_a_failure_the_runner_cannot_read_is_an_error_not_a_traceback(event):
    outcome = execute._final(event, [])
    assert outcome.status == "error"
    assert outcome.reason.startswith("the cell's failure cannot be read (status ")


def test_a_real_cells_answer_becomes_a_valid_record(tmp_path):
    pytest.importorskip("torch")
    cell = dataclasses.replace(
        spec(),
        cell_id="torch/mnist_dense/float32/r0",
        policy="float32",
        accumulate=1,
        nproc=1,
        max_steps=6,
        synthetic_train_size=1024,
        synthetic_test_size=256,
    )
    outcome = execute.run_in_child(cell, 120, tmp_path / "cell.log", lambda *_: None)
    assert outcome.status == "ok", outcome.reason
    measured = outcome.measurements
    assert isinstance(measured, Measurements) and len(measured.step_times_s) == 6
    record = build_record(cell, outcome, CPU, "fingerprint", "torch")
    assert record.framework_version == measured.framework_version
    assert record.step_time.count == 6 - measured.warmup_steps
    assert load_record(json.loads(json.dumps(record.to_dict()))) == record
