"""Expanding a config into cells: auto policies, unsupported and missing-framework skips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mpbench.errors import InvalidInput
from mpbench.policies import DeviceTraits
from mpbench.runner import cells as cells_module
from mpbench.runner.cells import expand, resolve_device
from mpbench.runner.config import RunOptions, build_config

QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick.toml"


class Report:
    """Stands in for a DetectReport: only the look-up the runner uses."""

    def __init__(self, *devices: DeviceTraits) -> None:
        self.devices = devices

    def device_traits(self, kind: str, index: int | None = None) -> DeviceTraits | None:
        return next((d for d in self.devices if d.kind == kind), None)


EPYC = DeviceTraits("cpu", "AMD EPYC", cpu_flags=frozenset({"avx512_bf16", "avx512f"}))
A100 = DeviceTraits("cuda", "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
T4 = DeviceTraits("cuda", "Tesla T4", compute_capability=(7, 5))


def cells_for(report: Report, **overrides) -> tuple[str, list]:
    options = RunOptions(config=QUICK, frameworks=["torch"], workloads=["mnist_dense"])
    for key, value in overrides.items():
        setattr(options, key, value)
    device, _, cells = expand(build_config(options), report, "run-1")
    return device, cells


def test_auto_on_a_bf16_cpu_is_float32_and_bf16():
    device, cells = cells_for(Report(EPYC), policies=["auto"])
    assert device == "cpu"
    assert [c.spec.policy for c in cells] == ["float32", "mixed_bfloat16"]
    assert all(c.skip_reason is None for c in cells)


def test_auto_device_prefers_the_first_nvidia_gpu():
    device, cells = cells_for(Report(EPYC, A100), policies=["auto"])
    assert device == "cuda:0"
    assert [c.spec.policy for c in cells] == [
        "float32",
        "tf32",
        "mixed_float16",
        "mixed_bfloat16",
    ]


def test_explicit_unsupported_policy_is_skipped_with_the_reason():
    _, cells = cells_for(Report(T4), policies=["tf32", "fp16"], device="cuda")
    tf32, fp16 = cells
    assert "compute capability >= 8.0" in tf32.skip_reason
    assert fp16.skip_reason is None


def test_explicit_slow_policy_runs():
    _, cells = cells_for(Report(EPYC), policies=["fp16"])
    assert cells[0].skip_reason is None


def test_units_default_to_the_device_kind_unless_given(monkeypatch):
    options = RunOptions(frameworks=["torch"], workloads=["mnist_dense"], policies=["fp32"])
    options.config = Path(__file__).resolve().parents[2] / "configs" / "default.toml"
    _, _, on_cpu = expand(build_config(options), Report(EPYC), "r")
    _, _, on_gpu = expand(build_config(options), Report(A100), "r")
    assert on_cpu[0].spec.units == 64 and on_gpu[0].spec.units == 4096


def test_repeats_share_the_seed_and_differ_in_cell_id():
    _, cells = cells_for(Report(EPYC), policies=["fp32"], repeat=3)
    assert [c.spec.cell_id for c in cells] == [f"torch/mnist_dense/float32/r{i}" for i in range(3)]
    assert len({c.spec.seed for c in cells}) == 1


def test_a_missing_framework_is_a_skipped_cell_with_the_install_hint(monkeypatch):
    monkeypatch.setattr(cells_module, "installed", lambda framework: framework != "tensorflow")
    _, cells = cells_for(Report(EPYC), frameworks=["tensorflow"], policies=["fp32"])
    assert "pip install 'mpbench[tensorflow]'" in cells[0].skip_reason


def test_no_framework_at_all_is_invalid_input(monkeypatch):
    monkeypatch.setattr(cells_module, "installed", lambda framework: False)
    with pytest.raises(InvalidInput, match="neither PyTorch nor TensorFlow"):
        cells_for(Report(EPYC), frameworks=[])


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cpu:1", "tpu"])
def test_unknown_devices_name_the_choices(device):
    with pytest.raises(InvalidInput, match="auto, cpu, cuda, cuda:N, mps"):
        resolve_device(device, Report(EPYC))


def test_the_cli_and_runner_start_without_frameworks_or_pandas():
    code = (
        "import sys, mpbench.cli, mpbench.runner, mpbench.runner.child;"
        "heavy = [m for m in ('torch', 'tensorflow', 'keras', 'pandas') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
