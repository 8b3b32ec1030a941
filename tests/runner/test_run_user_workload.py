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
from forked import run_mpbench
from frameworks import needs_tensorflow, needs_torch

from mpbench.workloads import user

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tabular_mlp.py"
TINY = "--max-steps", "12", "--warmup-steps", "2", "--repeat", "1", "--device", "cpu"


def run_records(out: Path, *args: str, cwd: Path = ROOT) -> list[dict]:
    result = run_mpbench(["run", *TINY, "--out", out, *args], cwd=cwd, timeout=600)
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
        assert record["flops_per_step"] is None
        assert record["precision"]["compute_dtype"] in ("float32", "bfloat16")


@needs_torch
def test_a_torch_only_workload_skips_its_tensorflow_cells_with_the_reason(tmp_path: Path) -> None:
    found = run_records(tmp_path / "run", "-w", "examples.tabular_mlp:TORCH_ONLY", "-f", "all",
                        "-p", "fp32")  # fmt: skip
    by_framework = {r["framework"]: r for r in found}
    assert by_framework["torch"]["status"] == "ok"
    skipped = by_framework["tensorflow"]
    assert skipped["status"] == "skipped"
    assert "has no tensorflow version" in skipped["reason"]


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
    result = run_mpbench(["run", "-w", value, "-f", "torch", "--out", tmp_path / "o"],
                         cwd=tmp_path)  # fmt: skip
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
