"""--nproc, --grad-comm and the node options: one check for TOML and the command line, cell
ids and config identity, the scaling reference, --resume contradictions, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_mpbench
from frameworks import TENSORFLOW_MISSING, needs_tensorflow, without_tensorflow

from mpbench.errors import InvalidInput
from mpbench.policies import DeviceTraits
from mpbench.runner.config import RunOptions, build_config, contradictions
from mpbench.runner.matrix import expand

pytestmark = pytest.mark.all_cores  # --nproc 2 on a CPU is checked against the cores

QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick.toml"


class _Report:
    gpus = ()

    def device_traits(self, kind, index):
        return DeviceTraits(kind="cpu", name="test cpu")


def _config(tmp_path: Path, distributed: str = "", **options):
    path = tmp_path / "c.toml"
    path.write_text(f"[distributed]\n{distributed}\n")
    return build_config(RunOptions(config=path, **options))


def _cells(**options):
    defaults = dict(
        config=QUICK,
        frameworks=["torch", "tensorflow"],
        workloads=["mnist_dense"],
        policies=["fp32", "bf16"],
        batch_size=64,
        repeat=1,
    )
    config = build_config(RunOptions(**{**defaults, **options}))
    return expand(config, _Report(), "run")[2]


@pytest.mark.parametrize(
    ("toml", "options", "expected"),
    [
        ("", {}, ([1], "fp32", 1)),
        ("nproc = [1, 2]\ngrad_comm = 'bf16'", {}, ([1, 2], "bf16", 1)),
        ("nproc = 4", {"nproc": ["1,2"]}, ([1, 2], "fp32", 1)),
        ("", {"nproc": ["2"], "grad_comm": "FP16"}, ([2], "fp16", 1)),
        (
            "nnodes = 2\nrdzv_endpoint = 'head:29500'",
            {"node_rank": 1},
            ([1], "fp32", 2),
        ),
    ],
)
def test_toml_and_options_merge(tmp_path, toml, options, expected):
    config = _config(tmp_path, toml, **options)
    assert (config.nproc, config.grad_comm, config.nnodes) == expected


@pytest.mark.parametrize(
    ("toml", "options", "message"),
    [
        ("nproc = 0", {}, "[distributed] nproc = 0: must be at least 1"),
        ("", {"nproc": ["two"]}, "--nproc 'two': must be a whole number"),
        ("grad_comm = 'int8'", {}, "[distributed] grad_comm: unknown value 'int8'"),
        (
            "",
            {"grad_comm": "fp8"},
            "--grad-comm: unknown value 'fp8'; valid choices: fp32, fp16, bf16",
        ),
        ("", {"nnodes": 2}, "--nnodes 2: the nodes meet at a rendezvous endpoint"),
        ("nnodes = 2\nrdzv_endpoint = 'head'", {}, "--rdzv-endpoint 'head': must be HOST:PORT"),
        ("", {"rdzv_endpoint": "h:70000"}, "must be HOST:PORT with a port from 1 to 65535"),
        ("", {"node_rank": 1}, "--node-rank 1: must be below --nnodes (1)"),
        ("workers = 2", {}, "unknown key in [distributed]"),
    ],
)
def test_bad_values_are_refused_with_one_line(tmp_path, toml, options, message):
    with pytest.raises(InvalidInput) as caught:
        _config(tmp_path, toml, **options)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_cells_per_world_size_with_their_ids_config_and_reference():
    cells = _cells(nproc=["1,2"], grad_comm="bf16")
    by = {c.spec.cell_id: c for c in cells}
    assert list(by) == [
        "torch/mnist_dense/float32/r0",
        "torch/mnist_dense/float32@np2@comm-bf16/r0",
        "torch/mnist_dense/mixed_bfloat16/r0",
        "torch/mnist_dense/mixed_bfloat16@np2@comm-bf16/r0",
        "tensorflow/mnist_dense/float32/r0",
        "tensorflow/mnist_dense/float32@np2/r0",  # the comm precision is torch's only
        "tensorflow/mnist_dense/mixed_bfloat16/r0",
        "tensorflow/mnist_dense/mixed_bfloat16@np2/r0",
    ]
    job = by["torch/mnist_dense/mixed_bfloat16@np2@comm-bf16/r0"]
    assert job.spec.world_size == 2 and job.spec.batch_size == 64  # per replica
    assert job.scaling_reference == "torch/mnist_dense/mixed_bfloat16/r0"
    assert job.spec.config()["world_size"] == 2 and job.spec.config()["grad_comm"] == "bf16"
    single = by["torch/mnist_dense/mixed_bfloat16/r0"]
    assert single.scaling_reference is None and "world_size" not in single.spec.config()
    assert "grad_comm" not in by["tensorflow/mnist_dense/float32@np2/r0"].spec.config()


def test_without_world_size_one_there_is_no_reference():
    cells = _cells(nproc=["2"], frameworks=["torch"], policies=["fp32"])
    assert [c.scaling_reference for c in cells] == [None]


def test_resume_refuses_another_world_or_precision_but_not_another_endpoint(tmp_path):
    stored = _config(tmp_path, "nproc = [1, 2]\nnnodes = 2\nrdzv_endpoint = 'a:1'")
    assert contradictions(stored, RunOptions(rdzv_endpoint="b:2", node_rank=0)) == []
    found = contradictions(stored, RunOptions(nproc=["4"], grad_comm="fp16"))
    assert found == ["--grad-comm fp16 (the run has fp32)", "--nproc 4 (the run has 1,2)"]


def test_a_batch_the_world_cannot_fill_is_refused_before_anything_runs(tmp_path):
    done = run_mpbench(
        "run", "-f", "torch", "-w", "mnist_dense", "-p", "fp32", "--data", "synthetic",
        "--batch-size", "40000", "--nproc", "1,2", "--device", "cpu",
        "--out", tmp_path / "run", timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "batch size 80000 exceeds the training set (60000)" in done.stderr
    assert "the world size of --nproc" in done.stderr
    assert not (tmp_path / "run").exists()


def _tensorflow_cells(**options):
    config = build_config(
        RunOptions(
            config=QUICK,
            frameworks=["tensorflow"],
            workloads=["mnist_dense"],
            policies=["fp32"],
            nproc=["1,2"],
            grad_comm="bf16",
            data="synthetic",
            **options,
        )
    )
    return config, expand(config, _Report(), "run")[2]


@needs_tensorflow
def test_grad_comm_with_tensorflow_cells_is_said_once_before_the_run(tmp_path):
    from mpbench.runner.preflight import preflight

    config, cells = _tensorflow_cells()
    said: list[str] = []
    preflight(config, cells, said.append)
    (note,) = [m for m in said if "--grad-comm" in m]
    assert note.startswith("--grad-comm bf16 applies to torch DDP only")
    said.clear()
    config.grad_comm = "fp32"
    preflight(config, cells, said.append)
    assert not [m for m in said if "--grad-comm" in m]


@without_tensorflow
def test_without_tensorflow_its_cells_are_skipped_and_no_setting_is_said_unused():
    """Nothing runs, so no setting could look measured: the cells' skip reason says why."""
    from mpbench.runner.preflight import preflight

    config, cells = _tensorflow_cells(compile=[True])
    assert {cell.spec.world_size for cell in cells} == {1, 2}  # data-parallel cells too
    assert {cell.skip_reason for cell in cells} == {TENSORFLOW_MISSING}
    said: list[str] = []
    preflight(config, cells, said.append)
    assert not [m for m in said if "--grad-comm" in m or "--compile" in m], said
