"""Expanding a config into cells: auto policies, unsupported and missing-framework skips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mpbench.detect.cuda_order import CudaMapping
from mpbench.errors import InvalidInput
from mpbench.policies import DeviceTraits, MeasuredStep
from mpbench.runner import matrix as cells_module
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.matrix import expand, resolve_device

QUICK = Path(__file__).resolve().parents[2] / "configs" / "quick.toml"


class Report:
    """Stands in for a DetectReport: the look-ups the runner uses, with the NVIDIA GPUs in
    CUDA's order (real reports map CUDA indexes to NVML's; tests/detect covers that)."""

    def __init__(self, *devices: DeviceTraits, device_files: bool = False) -> None:
        self.devices = devices
        self.gpus = [d for d in devices if d.kind == "cuda"]
        self.nvidia_device_files_present = device_files
        self.nvml_blind = device_files and not self.gpus

    def cuda_mapping(self) -> CudaMapping:
        return CudaMapping(tuple(self.gpus))

    def device_traits(self, kind: str, index: int | None = None) -> DeviceTraits | None:
        if kind == "cuda":
            mapped = self.cuda_mapping().get(index or 0)
            return mapped
        return next((d for d in self.devices if d.kind == kind), None)


EPYC = DeviceTraits("cpu", "AMD EPYC", cpu_flags=frozenset({"avx512_bf16", "avx512f"}))
A100 = DeviceTraits("cuda", "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0))
T4 = DeviceTraits("cuda", "Tesla T4", compute_capability=(7, 5))


def cells_for(report: Report, **overrides) -> tuple[str, list]:
    options = RunOptions(config=QUICK, frameworks=["torch"], workloads=["mnist_dense"], repeat=1)
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


def test_transformer_sizes_are_the_devices_preset_unless_the_config_sets_them(tmp_path):
    options = RunOptions(frameworks=["torch"], workloads=["transformer_lm"], policies=["fp32"])
    options.config = Path(__file__).resolve().parents[2] / "configs" / "default.toml"
    _, _, on_cpu = expand(build_config(options), Report(EPYC), "r")
    _, _, on_gpu = expand(build_config(options), Report(A100), "r")
    cpu, gpu = on_cpu[0].spec, on_gpu[0].spec
    assert (cpu.units, cpu.heads, cpu.layers, cpu.seq_len) == (128, 4, 2, 128)
    assert (gpu.units, gpu.heads, gpu.layers, gpu.seq_len) == (512, 8, 6, 256)
    assert cpu.config()["seq_len"] == 128 and "seq_len" not in _mnist_config()
    config = tmp_path / "lm.toml"
    config.write_text("[workloads.transformer_lm]\nunits = 100\nheads = 3\n")
    options.config = config
    with pytest.raises(InvalidInput, match=r"\(units\) 100 is not divisible by its 3 heads"):
        expand(build_config(options), Report(EPYC), "r")


def test_the_default_configs_workloads_are_chosen_by_the_device():
    """`workloads = ["auto"]`: MNIST and the CNN on a CPU, the transformer too on a GPU;
    `all` is every built-in anywhere; a selector beside a name adds each workload once."""
    options = RunOptions(frameworks=["torch"], policies=["fp32"], repeat=1)
    options.config = Path(__file__).resolve().parents[2] / "configs" / "default.toml"

    def workloads(report: Report, names: list[str] | None = None) -> list[str]:
        options.workloads = names or []
        _, _, cells = expand(build_config(options), report, "r")
        return list(dict.fromkeys(c.spec.workload for c in cells))

    assert workloads(Report(EPYC)) == ["mnist_dense", "cifar10_cnn"]
    assert workloads(Report(A100)) == ["mnist_dense", "cifar10_cnn", "transformer_lm"]
    assert workloads(Report(EPYC), ["all"]) == ["mnist_dense", "cifar10_cnn", "transformer_lm"]
    assert workloads(Report(EPYC), ["transformer_lm", "AUTO"]) == [
        "transformer_lm",
        "mnist_dense",
        "cifar10_cnn",
    ]
    options.workloads = ["everything"]
    with pytest.raises(InvalidInput, match=r"unknown workload 'everything'.*auto, all"):
        expand(build_config(options), Report(EPYC), "r")


def _mnist_config() -> dict:
    _, cells = cells_for(Report(EPYC), policies=["fp32"])
    return cells[0].spec.config()


def test_repeats_run_in_rounds_across_policies_each_with_its_own_seed():
    _, cells = cells_for(Report(EPYC), policies=["fp32", "bf16", "fp16"], repeat=3, seed=7)
    ids = [c.spec.cell_id for c in cells]
    rounds = [
        f"torch/mnist_dense/{policy}/r{i}"
        for i in range(3)
        for policy in ("float32", "mixed_bfloat16", "mixed_float16")
    ]
    assert ids == rounds  # float32 r0, bf16 r0, fp16 r0, float32 r1, ...
    assert [c.spec.seed for c in cells] == [7 + c.spec.repeat for c in cells]


def test_every_cell_of_a_run_gets_the_same_pinned_threads(monkeypatch):
    monkeypatch.setattr(cells_module, "available_cores", lambda: 5)
    _, cells = cells_for(Report(EPYC), policies=["fp32", "bf16"], repeat=2)
    assert {(c.spec.intra_op_threads, c.spec.inter_op_threads) for c in cells} == {(5, 5)}
    _, cells = cells_for(Report(EPYC), policies=["fp32", "bf16"], threads=3)
    assert {(c.spec.intra_op_threads, c.spec.inter_op_threads) for c in cells} == {(3, 3)}


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


def test_a_gpu_index_beyond_those_cuda_numbers_is_invalid_input():
    assert resolve_device("cuda:1", Report(EPYC, A100, T4))[1] is T4
    with pytest.raises(InvalidInput, match=r"cuda:2: CUDA numbers 2 GPU\(s\) here"):
        resolve_device("cuda:2", Report(EPYC, A100, T4))


def test_cuda_without_any_gpu_is_invalid_input(monkeypatch, tmp_path):
    monkeypatch.setattr(cells_module, "ROCM_DEVICE_FILE", tmp_path / "kfd")
    with pytest.raises(InvalidInput, match="no GPU here"):
        resolve_device("cuda", Report(EPYC))
    # Device files but no NVML (a container without libnvidia-ml): the cell decides.
    device, traits = resolve_device("cuda", Report(EPYC, device_files=True))
    assert device == "cuda:0" and traits.name == "cuda (not detected)"
    (tmp_path / "kfd").touch()  # ROCm: torch calls AMD GPUs "cuda" too
    assert resolve_device("cuda:1", Report(EPYC))[0] == "cuda:1"


def test_mps_off_apple_silicon_is_invalid_input(monkeypatch):
    monkeypatch.setattr(cells_module, "apple_silicon", lambda: False)
    with pytest.raises(InvalidInput, match="only on Apple Silicon"):
        resolve_device("mps", Report(EPYC))
    monkeypatch.setattr(cells_module, "apple_silicon", lambda: True)
    assert resolve_device("mps", Report(EPYC))[0] == "mps"
    assert resolve_device("auto", Report(EPYC))[0] == "mps"


def test_the_cli_and_runner_start_without_frameworks_or_pandas():
    code = (
        "import sys, mpbench.cli, mpbench.runner, mpbench.runner.launchers.cell;"
        "heavy = [m for m in ('torch', 'tensorflow', 'keras', 'pandas') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_each_cell_process_gets_the_pinned_threads_and_nvml_gpu_order():
    from mpbench.runner.launchers.process import cell_environment

    _, (cell,) = cells_for(Report(EPYC), policies=["fp32"], threads=3)
    env = cell_environment(cell.spec, base={"PATH": "/bin"})
    assert env == {"PATH": "/bin", "OMP_NUM_THREADS": "3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    # What the user set is theirs to keep (and is recorded as the cell saw it).
    mine = {"OMP_NUM_THREADS": "1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    assert cell_environment(cell.spec, base=mine) == mine


# A Xeon with AVX-512 FP16 but no AMX-FP16: fp16 matmuls native, fp16 convolutions' backward
# emulated (policies.rate_convolutions).
FP16_XEON = DeviceTraits(
    "cpu", "Intel Xeon", cpu_flags=frozenset({"avx512_fp16", "avx512_bf16", "avx512f"})
)


# A measured dense step that ran fp16 faster than float32 in torch there: auto picks fp16.
FP16_FAST = MeasuredStep("torch", "mixed_float16", 1.2, "2026-11-29T10:00:00+00:00")


def _fp16_cells(policies: list[str]) -> dict[str, str | None]:
    options = RunOptions(
        config=QUICK,
        frameworks=["torch"],
        workloads=["mnist_dense", "cifar10_cnn"],
        repeat=1,
        policies=policies,
    )
    cells = expand(build_config(options), Report(FP16_XEON), "run-1", [FP16_FAST])[2]
    return {c.spec.cell_id: c.skip_reason for c in cells if c.spec.policy == "mixed_float16"}


def test_auto_leaves_fp16_out_of_a_cnn_where_its_convolutions_are_emulated():
    found = _fp16_cells(["auto"])
    assert found["torch/mnist_dense/mixed_float16/r0"] is None  # dense layers: measured fast
    reason = found["torch/cifar10_cnn/mixed_float16/r0"]
    assert reason.startswith("--policy auto leaves fp16 out of cifar10_cnn on Intel Xeon")
    assert "avx512_fp16 without amx_fp16" in reason and reason.endswith(
        "(-p fp16) to run it anyway"
    )


@pytest.mark.parametrize("asked", [["auto", "fp16"], ["all"], ["fp32", "fp16"]])
def test_fp16_named_or_all_runs_on_a_cnn_anyway(asked: list[str]):
    assert all(reason is None for reason in _fp16_cells(asked).values())


def test_amx_fp16_computes_fp16_convolutions_natively():
    granite = DeviceTraits("cpu", "Xeon 6", cpu_flags=frozenset({"avx512_fp16", "amx_fp16"}))
    _, cells = cells_for(Report(granite), policies=["auto"], workloads=["cifar10_cnn"])
    assert all(c.skip_reason is None for c in cells)
