"""A cell that runs out of memory or is killed becomes a truthful record; the others survive.

oom is a measured result (exit 0); a SIGKILL with no evidence of the OOM killer (the cgroup's
oom_kill count did not rise: none was at work during these tests) is an error (exit 1).
"""

from __future__ import annotations

import csv
from pathlib import Path

from adversary import read_jsonl
from cli import run_mpbench
from frameworks import needs_torch

pytestmark = needs_torch  # its cells import torch, in their own processes

MATRIX = ("--framework", "torch", "--workload", "mnist_dense", "--device", "cpu")
POLICIES = ("--policy", "fp32", "--policy", "bf16")


def run_with_fault(tmp_path: Path, config: Path, fault: str):
    out = tmp_path / "run"
    args = ["run", "--config", str(config), *MATRIX, *POLICIES, "--out", str(out)]
    result = run_mpbench(*args, env={"MPBENCH_FAULT": f"{fault}@mixed_bfloat16"})
    records = {r["policy"]: r for r in read_jsonl(out / "results.jsonl")}
    return result, records, out


def check_the_others_are_intact(result, records: dict, out: Path) -> None:
    assert "Traceback" not in result.stdout + result.stderr
    assert set(records) == {"float32", "mixed_bfloat16"}
    assert records["float32"]["status"] == "ok", records["float32"]["reason"]
    assert records["float32"]["step_time"]["count"] > 0
    with (out / "results.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 2


def test_a_failed_torch_cpu_allocation_is_oom_and_exit_0(tmp_path, tiny_config):
    result, records, out = run_with_fault(tmp_path, tiny_config, "alloc")
    check_the_others_are_intact(result, records, out)
    bf16 = records["mixed_bfloat16"]
    assert bf16["status"] == "oom"
    assert "DefaultCPUAllocator: can't allocate memory: you tried to allocate" in bf16["reason"]
    assert "\n" not in bf16["reason"]
    assert result.returncode == 0, result.stdout + result.stderr  # oom is a result, not a failure


def test_a_sigkill_without_oom_evidence_is_an_error_and_exit_1(tmp_path, tiny_config):
    result, records, out = run_with_fault(tmp_path, tiny_config, "sigkill")
    check_the_others_are_intact(result, records, out)
    bf16 = records["mixed_bfloat16"]
    assert bf16["status"] == "error"
    log = out / "logs" / "torch__mnist_dense__mixed_bfloat16__r0.log"
    assert bf16["reason"] == f"killed by SIGKILL (log: {log})"
    assert log.exists()
    assert result.returncode == 1, result.stdout + result.stderr
