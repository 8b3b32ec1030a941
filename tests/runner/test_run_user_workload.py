"""Your own workload (docs/workloads.md): `mpbench run --workload module:name` trains the
example in examples/ in real cell processes, in both frameworks; a torch-only workload's
TensorFlow cells are skipped; an entry point is found; bad values are one line and exit 2."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from builders import torch_only_workload
from cli import run_mpbench
from frameworks import TENSORFLOW_MISSING, installed, needs_tensorflow, needs_torch

from mpbench.workloads import shadowed_entry_point, user

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tabular_mlp.py"
TINY = "--max-steps", "12", "--warmup-steps", "2", "--repeat", "1", "--device", "cpu"


def run_records(out: Path, *args: str, cwd: Path = ROOT) -> list[dict]:
    result = run_mpbench("run", *TINY, "--out", out, *args, cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@needs_torch
@needs_tensorflow
def test_the_example_trains_in_both_frameworks_and_names_its_source(tmp_path: Path) -> None:
    found = run_records(
        tmp_path / "run", "-w", "examples.tabular_mlp:WORKLOAD", "-f", "all", "-p", "fp32",
        "-p", "bf16",
    )  # fmt: skip
    assert len(found) == 4
    digest = hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()
    for record in found:
        assert record["status"] == "ok", record
        assert record["workload"] == "examples.tabular_mlp:WORKLOAD"
        source = record["config"]["workload_source"]
        assert source["module"] == "examples.tabular_mlp"
        assert source["attribute"] == "WORKLOAD"
        assert source["sha256"] == digest
        assert record["params"] == 32 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4
        assert record["accuracy"]["test_accuracy"] is not None
        assert 0 < record["accuracy"]["test_loss"] < 2  # finite, below chance's ln 4 + 0.6
    torch_cells = [r for r in found if r["framework"] == "torch"]
    # FlopCounterMode, no FLOPs given: forward 2·B·(32·64 + 64·64 + 64·4), the weight
    # gradients as much again, the input gradients of all but the first layer.
    batch = 64
    expected = 2 * batch * 6400 * 2 + 2 * batch * (64 * 64 + 64 * 4)
    for record in torch_cells:
        assert record["flops_per_step"] == expected
        assert "FlopCounterMode" in record["config"]["flops_source"]
        assert record["achieved_tflops"] > 0
    for record in (r for r in found if r["framework"] == "tensorflow"):
        # Counted from the TensorFlow graph of one step: the same FLOPs as torch counts.
        assert record["flops_per_step"] == expected
        assert record["config"]["flops_source"].startswith("TensorFlow graph")
        assert record["precision"]["compute_dtype"] in ("float32", "bfloat16")


@needs_torch
@pytest.mark.runs_without_tensorflow
def test_a_torch_only_workload_skips_its_tensorflow_cells_with_the_reason(tmp_path: Path) -> None:
    found = run_records(tmp_path / "run", "-w", "examples.tabular_mlp:TORCH_ONLY", "-f", "all",
                        "-p", "fp32")  # fmt: skip
    by_framework = {r["framework"]: r for r in found}
    assert by_framework["torch"]["status"] == "ok"
    skipped = by_framework["tensorflow"]
    assert skipped["status"] == "skipped"
    if installed("tensorflow"):
        assert (
            "has no TensorFlow version: its UserWorkload has no keras builder" in skipped["reason"]
        )
    else:  # the first reason: TensorFlow could not run the cell whatever the workload
        assert skipped["reason"] == TENSORFLOW_MISSING


BAD = [
    ("tabular", "unknown workload 'tabular'"),
    ("examples.no_such_module:W", "no module named 'examples.no_such_module'"),
    ("examples.tabular_mlp:NOPE", "module examples.tabular_mlp has no 'NOPE'"),
    ("examples.tabular_mlp:np", "np is a module, not an mpbench.workloads.UserWorkload"),
    ("broken_workload:W", "importing broken_workload raised RuntimeError: at import"),
]


@pytest.mark.parametrize(("value", "said"), BAD)
def test_a_bad_workload_is_one_line_and_exit_2(tmp_path: Path, value: str, said: str) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "broken_workload.py").write_text("raise RuntimeError('at import')\n")
    result = run_mpbench("run", "-w", value, "-f", "torch", "--out", tmp_path / "o", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.stderr, lines
    assert not (tmp_path / "o").exists()


def test_an_entry_point_names_a_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    point = SimpleNamespace(name="tabular", value="examples.tabular_mlp:WORKLOAD")
    monkeypatch.setattr(
        user.importlib.metadata,
        "entry_points",
        lambda group: [point] if group == user.ENTRY_POINT_GROUP else [],
    )
    monkeypatch.syspath_prepend(str(ROOT))
    assert user.reference("tabular") == "examples.tabular_mlp:WORKLOAD"
    assert user.load("tabular").name == "tabular_mlp"
    assert "tabular" in user.entry_point_names()
    assert user.reference("other") is None
    assert "examples" in sys.modules


def test_an_entry_point_named_like_a_built_in_is_listed_once_and_said_shadowed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The built-in wins; the run says once that the entry point of that name is shadowed,
    and a list of valid workloads names it once."""
    points = [
        SimpleNamespace(name="mnist_dense", value="mypkg.models:MNIST"),
        SimpleNamespace(name="tabular", value="examples.tabular_mlp:WORKLOAD"),
    ]
    monkeypatch.setattr(
        user.importlib.metadata,
        "entry_points",
        lambda group: points if group == user.ENTRY_POINT_GROUP else [],
    )
    said = shadowed_entry_point("mnist_dense")
    assert said == (
        "workload mnist_dense: the built-in runs; the installed entry point of that name "
        "(mpbench.workloads: mypkg.models:MNIST) is shadowed by it, so name it as "
        "mypkg.models:MNIST"
    )
    assert shadowed_entry_point("cifar10_cnn") is None

    refused = run_mpbench("run", "-w", "nosuch", "--out", tmp_path / "o")
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "unknown workload 'nosuch'" in line and "Traceback" not in refused.stderr
    assert line.count("mnist_dense") == 1 and "tabular" in line

    # A run of the built-in (tf32 on a CPU: every cell skipped, nothing trains) says it once.
    done = run_mpbench(
        "run", "-w", "mnist_dense", "-f", "torch", "-p", "tf32", "--device", "cpu",
        "--repeat", "2", "--out", tmp_path / "run",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    warned = " ".join(done.stderr.split())
    assert warned.count("warning: workload mnist_dense: the built-in runs;") == 1


TINY_PACKAGE = torch_only_workload(
    "tiny", "A workload an installed package offers (mpbench.workloads entry points)."
)


@needs_torch
def test_an_installed_packages_entry_point_runs_through_the_cli(tmp_path: Path) -> None:
    """A package put on the path as an installer leaves it: the module, and a dist-info with
    its metadata and entry points. `-w tiny` then finds it, in the CLI and in the cells."""
    site = tmp_path / "site"
    info = site / "mpbench_tiny_workload-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "mpbench_tiny_workload.py").write_text(TINY_PACKAGE, encoding="utf-8")
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mpbench-tiny-workload\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[mpbench.workloads]\ntiny = mpbench_tiny_workload:WORKLOAD\n", encoding="utf-8"
    )
    (info / "top_level.txt").write_text("mpbench_tiny_workload\n", encoding="utf-8")
    out = tmp_path / "run"
    done = run_mpbench(
        "run", "-w", "tiny", "-f", "torch", "-p", "fp32", "--repeat", "1", "--device", "cpu",
        "--max-steps", "6", "--out", out, cwd=tmp_path, env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok", record["reason"]
    assert record["workload"] == "tiny"
    source = record["config"]["workload_source"]
    assert (source["module"], source["attribute"]) == ("mpbench_tiny_workload", "WORKLOAD")
    assert (source["package"], source["version"]) == ("mpbench-tiny-workload", "0.1")
