"""NVIDIA GPUs through a fake pynvml that follows the real nvidia-ml-py API."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import sys

import pytest
from cli import run_mpbench
from rich.console import Console

from mpbench.detect import collect
from mpbench.detect.gpu import cuda_version_text, probe_nvidia
from mpbench.detect.render import print_report

# model: (compute capability, tensor cores, tf32, bf16, fp8, ratings, recommendation)
GPU_CASES = {
    "P100": (
        (6, 0),
        False,
        False,
        False,
        False,
        ("fast", "unsupported", "slow", "slow", "emulated"),
        "float32",
    ),
    "V100": (
        (7, 0),
        True,
        False,
        False,
        False,
        ("fast", "unsupported", "fast", "slow", "emulated"),
        "mixed_float16",
    ),
    "T4": (
        (7, 5),
        True,
        False,
        False,
        False,
        ("fast", "unsupported", "fast", "slow", "emulated"),
        "mixed_float16",
    ),
    # TU116: compute capability 7.5 like the T4, but no Tensor Cores (double-rate fp16 units).
    "GTX1660Ti": (
        (7, 5),
        False,
        False,
        False,
        False,
        ("fast", "unsupported", "fast", "slow", "emulated"),
        "mixed_float16",
    ),
    "A100": (
        (8, 0),
        True,
        True,
        True,
        False,
        ("fast", "fast", "fast", "fast", "emulated"),
        "mixed_bfloat16",
    ),
    "A10G": (
        (8, 6),
        True,
        True,
        True,
        False,
        ("fast", "fast", "fast", "fast", "emulated"),
        "mixed_bfloat16",
    ),
    "L4": (
        (8, 9),
        True,
        True,
        True,
        True,
        ("fast", "fast", "fast", "fast", "fast"),
        "mixed_bfloat16",
    ),
    "H100": (
        (9, 0),
        True,
        True,
        True,
        True,
        ("fast", "fast", "fast", "fast", "fast"),
        "mixed_bfloat16",
    ),
}
POLICY_ORDER = ("float32", "tf32", "mixed_float16", "mixed_bfloat16", "float8")


@pytest.mark.parametrize("model", GPU_CASES)
def test_capability_flags_ratings_and_recommendation(model, fake_nvml):
    cc, tensor, tf32, bf16, fp8, ratings, recommendation = GPU_CASES[model]
    fake = fake_nvml(model)
    report = collect(environ={})
    (gpu,) = report.gpus
    assert gpu.name == fake.CATALOGUE[model].name
    assert gpu.compute_capability == cc
    assert (gpu.tensor_cores, gpu.tf32, gpu.bf16, gpu.fp8) == (tensor, tf32, bf16, fp8)
    assert gpu.memory_total_bytes == fake.CATALOGUE[model].memory_total
    entry = report.device("cuda", 0)
    assert entry.traits.compute_capability == cc
    assert tuple(r.rating.value for r in entry.ratings) == ratings
    assert tuple(r.policy for r in entry.ratings) == POLICY_ORDER
    assert entry.recommendation.policy == recommendation
    # the GPU comes first, the CPU is always there too
    assert [d.label for d in report.devices] == ["cuda:0", "cpu"]


def test_p100_mixed_precision_only_saves_memory(fake_nvml):
    fake_nvml("P100")
    entry = collect(environ={}).device("cuda", 0)
    assert "memory" in entry.recommendation.reason
    fp16 = next(r for r in entry.ratings if r.policy == "mixed_float16")
    assert "6.0" in fp16.reason


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("V100", {"fp32": 15.7, "tf32": None, "fp16": 125.0, "bf16": None, "fp8": None}),
        ("T4", {"fp32": 8.1, "tf32": None, "fp16": 65.0, "bf16": None, "fp8": None}),
        ("A100", {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0, "fp8": None}),
        ("H100", {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0}),
        ("A10G", {"fp32": None, "tf32": None, "fp16": None, "bf16": None, "fp8": None}),
    ],
)
def test_peaks_come_from_the_table_and_unknown_parts_get_none(model, expected, fake_nvml):
    fake_nvml(model)
    (gpu,) = collect(environ={}).gpus
    assert gpu.peak_tflops == expected
    data = gpu.to_dict()
    assert data["peak_tflops"] == expected
    assert (data["peak_source"] is None) == (model == "A10G")


def test_several_gpus_in_index_order(fake_nvml):
    fake_nvml("A100", "T4", "H100")
    report = collect(environ={})
    assert [d.label for d in report.devices] == ["cuda:0", "cuda:1", "cuda:2", "cpu"]
    assert report.device_traits("cuda", 1).name == "Tesla T4"
    assert report.device_traits("cuda:2").compute_capability == (9, 0)
    assert report.device_traits("cuda").name == "NVIDIA A100-SXM4-80GB"  # first of the kind
    assert report.device_traits("cuda", 7) is None
    assert report.device_traits("tpu") is None
    prints = {report.hardware_fingerprint("cuda", i) for i in range(3)}
    assert len(prints) == 3
    # A device detect did not see gets a stable fingerprint of its own, never an exception.
    missing = report.hardware_fingerprint("cuda", 7)
    assert (
        missing == report.hardware_fingerprint("cuda", 7) == report.undetected_fingerprint("cuda")
    )
    assert len(missing) == 16 and missing not in prints


def test_same_model_same_fingerprint_across_driver_versions(fake_nvml):
    fake_nvml("A100", driver_version="535.104.05", cuda_driver_version=12020)
    before = collect(environ={}).hardware_fingerprint("cuda", 0)
    fake_nvml("A100", driver_version="550.54.15", cuda_driver_version=12040)
    after = collect(environ={}).hardware_fingerprint("cuda", 0)
    fake_nvml("H100")
    other = collect(environ={}).hardware_fingerprint("cuda", 0)
    assert before == after != other


def test_driver_and_cuda_versions(fake_nvml):
    fake_nvml("T4", driver_version="550.54.15", cuda_driver_version=12040)
    report = collect(environ={})
    assert report.nvidia_driver.driver_version == "550.54.15"
    assert report.nvidia_driver.cuda_driver_version == "12.4"
    assert report.to_dict()["nvidia_driver"] == {
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
    }


@pytest.mark.parametrize(
    ("number", "text"), [(12040, "12.4"), (11080, "11.8"), (12090, "12.9"), (13000, "13.0")]
)
def test_cuda_version_text(number, text):
    assert cuda_version_text(number) == text


def test_old_pynvml_bytes_names(fake_nvml):
    fake_nvml("A100", legacy_bytes=True)
    report = collect(environ={})
    assert report.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert report.nvidia_driver.driver_version == "550.54.15"
    assert report.gpus[0].peak_tflops["bf16"] == 312.0


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("NVML_ERROR_LIBRARY_NOT_FOUND", "no NVIDIA driver"),
        ("NVML_ERROR_DRIVER_NOT_LOADED", "not loaded"),
        ("NVML_ERROR_NO_PERMISSION", "Insufficient Permissions"),
    ],
)
def test_no_driver_gives_empty_list_and_a_note(error, words, fake_nvml, fake_pynvml):
    fake = fake_nvml("A100", init_error=getattr(fake_pynvml, error))
    report = collect(environ={})
    assert report.gpus == []
    assert report.nvidia_driver is None
    assert [d.kind for d in report.devices] == ["cpu"]
    assert any(words in note for note in report.notes)
    assert "nvmlShutdown" not in fake.calls()  # nothing to shut down after a failed init


def test_a_lost_gpu_is_skipped_with_a_note(fake_nvml, fake_pynvml):
    fake_nvml("A100", "A100", device_errors={1: fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    probe = probe_nvidia()
    assert [g.index for g in probe.gpus] == [0]
    assert probe.notes == ["NVML: GPU 1 skipped (GPU is lost)"]


def test_nvml_is_shut_down_after_reading(fake_nvml):
    fake = fake_nvml("T4", "V100")
    probe_nvidia()
    assert fake.calls()[0] == "nvmlInitWithFlags"
    assert fake.calls()[-1] == "nvmlShutdown"
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_without_nvidia_ml_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    report = collect(environ={})
    assert report.gpus == []
    assert any("nvidia-ml-py" in note for note in report.notes)


def test_fake_follows_the_real_module(fake_pynvml):
    """The fake has the real module's error codes, error classes and call signatures."""
    real = pytest.importorskip("pynvml")
    fake = fake_pynvml
    if hasattr(real, "configure"):
        pytest.skip("the fake shadows the real module here")
    codes = {n: getattr(real, n) for n in dir(real) if n.startswith("NVML_ERROR_")}
    assert codes == {n: getattr(fake, n) for n in dir(fake) if n.startswith("NVML_ERROR_")}
    classes = {n for n in dir(real) if n.startswith("NVMLError_")}
    assert classes == {n for n in dir(fake) if n.startswith("NVMLError_")}
    for name in (
        "nvmlInit",
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetCudaDriverVersion",
        "nvmlErrorString",
    ):
        real_params = list(inspect.signature(getattr(real, name)).parameters)
        assert real_params == list(inspect.signature(getattr(fake, name)).parameters), name
    # NVMLError(code) builds the matching subclass, in both.
    for module in (real, fake):
        error = module.NVMLError(module.NVML_ERROR_LIBRARY_NOT_FOUND)
        assert type(error) is module.NVMLError_LibraryNotFound
        assert isinstance(error, module.NVMLError)
        assert type(error).__module__ == "pynvml"
    assert str(fake.NVMLError(fake.NVML_ERROR_DRIVER_NOT_LOADED)) == str(
        real.NVMLError(real.NVML_ERROR_DRIVER_NOT_LOADED)
    )
    # The memory and PCI records are the real ctypes layouts; busId reads back as str.
    assert [f[0] for f in fake.c_nvmlMemory_t._fields_] == [
        f[0] for f in real.c_nvmlMemory_t._fields_
    ]
    assert [f[0] for f in fake.nvmlPciInfo_t._fields_] == [
        f[0] for f in real.nvmlPciInfo_t._fields_
    ]
    for module in (real, fake):
        assert module.nvmlPciInfo_t(busId=b"00000000:07:00.0").busId == "00000000:07:00.0"
    for constant in ("NVML_DEVICE_MIG_DISABLE", "NVML_DEVICE_MIG_ENABLE"):
        assert getattr(fake, constant) == getattr(real, constant)


@pytest.fixture
def fake_on_path(tmp_path, fake_pynvml):
    """A directory that makes `import pynvml` find the fake in a subprocess."""
    shutil.copy(fake_pynvml.SOURCE, tmp_path / "pynvml.py")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path}


def test_cli_lists_fake_gpus(fake_on_path):
    env = {**fake_on_path, "PYNVML_FAKE_GPUS": "A100,T4"}
    done = run_mpbench("detect", "--json", env=env, fork=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [g["name"] for g in data["gpus"]] == ["NVIDIA A100-SXM4-80GB", "Tesla T4"]
    assert data["gpus"][0]["compute_capability"] == "8.0"
    assert data["gpus"][1]["bf16"] is False
    recs = {(d["kind"], d["index"]): d["recommendation"]["policy"] for d in data["devices"]}
    assert recs[("cuda", 0)] == "mixed_bfloat16"
    assert recs[("cuda", 1)] == "mixed_float16"

    table = run_mpbench("detect", env=env, fork=False)
    assert table.returncode == 0, table.stderr
    assert "NVIDIA A100-SXM4-80GB" in table.stdout
    a100_peaks = next(line for line in table.stdout.splitlines() if "A100 datasheet" in line)
    cells = [cell.strip() for cell in a100_peaks.split("│")[1:-1]]
    assert cells == ["0", "19.5", "156", "312", "312", "-", "NVIDIA A100 datasheet"]
    assert "driver 550.54.15, CUDA 12.4" in table.stdout


def test_cli_without_driver_is_not_an_error(fake_on_path):
    env = {**fake_on_path, "PYNVML_FAKE_INIT_ERROR": "12"}  # NVML_ERROR_LIBRARY_NOT_FOUND
    done = run_mpbench("detect", "--json", env=env, fork=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["gpus"] == []
    assert any("no NVIDIA driver" in note for note in data["notes"])
    assert done.stderr == ""


# --- UUID, PCI bus id, and one failing call costing one fact ---


def test_uuid_and_pci_bus_id_are_recorded(fake_nvml):
    fake = fake_nvml("A100", "T4")
    report = collect(environ={})
    for i, gpu in enumerate(report.gpus):
        assert gpu.uuid == fake.gpu(i).uuid and gpu.uuid.startswith("GPU-")
        assert gpu.pci_bus_id == fake.gpu(i).pci_bus_id.upper()
    data = report.to_dict()
    assert data["gpus"][1]["uuid"] == fake.gpu(1).uuid
    assert data["gpus"][1]["pci_bus_id"] == "00000000:20:00.0"
    assert data["devices"][1]["uuid"] == fake.gpu(1).uuid
    assert [g["cuda_index"] for g in data["gpus"]] == [0, 1]


def test_a_failing_call_costs_one_fact_not_the_gpu(fake_nvml, fake_pynvml):
    denied = fake_pynvml.NVML_ERROR_NO_PERMISSION
    fake_nvml(
        "A100",
        "T4",
        call_errors={
            (0, "nvmlDeviceGetUUID"): denied,
            (0, "nvmlDeviceGetMemoryInfo"): denied,
            (1, "nvmlDeviceGetPciInfo"): fake_pynvml.NVML_ERROR_UNKNOWN,
        },
    )
    report = collect(environ={})
    a100, t4 = report.gpus
    assert a100.name == "NVIDIA A100-SXM4-80GB" and a100.compute_capability == (8, 0)
    assert a100.uuid is None and a100.memory_total_bytes is None
    assert a100.errors == (
        "nvmlDeviceGetUUID: Insufficient Permissions",
        "nvmlDeviceGetMemoryInfo: Insufficient Permissions",
    )
    assert t4.pci_bus_id is None and t4.uuid is not None
    assert "NVML: GPU 0: nvmlDeviceGetUUID: Insufficient Permissions" in report.notes
    assert "NVML: GPU 1: nvmlDeviceGetPciInfo: Unknown Error" in report.notes
    # still rated, still fingerprinted, still rendered
    assert report.device("cuda", 0).recommendation.policy == "mixed_bfloat16"
    data = report.to_dict()
    assert data["gpus"][0]["memory_total_bytes"] is None
    assert data["gpus"][0]["errors"][0].startswith("nvmlDeviceGetUUID")
    console = Console(record=True, width=200)
    print_report(report, console=console)
    assert "NVIDIA A100-SXM4-80GB" in console.export_text()


def test_gpu_without_mig_support_and_with_mig_off(fake_nvml):
    fake = fake_nvml("T4", "A100")
    t4, a100 = collect(environ={}).gpus
    assert t4.mig_mode is None  # NVML_ERROR_NOT_SUPPORTED: no MIG on a T4, not an error
    assert a100.mig_mode is False and a100.mig_devices == ()
    assert t4.errors == a100.errors == ()
    assert "nvmlDeviceGetMaxMigDeviceCount" not in fake.calls()


def test_gtx_16xx_has_no_tensor_cores_but_fast_fp16(fake_nvml):
    fake_nvml("GTX1660Ti", "T4")
    report = collect(environ={})
    gtx, t4 = report.gpus
    assert gtx.compute_capability == t4.compute_capability == (7, 5)
    assert (gtx.tensor_cores, t4.tensor_cores) == (False, True)
    gtx_fp16 = next(r for r in report.device("cuda", 0).ratings if r.policy == "mixed_float16")
    t4_fp16 = next(r for r in report.device("cuda", 1).ratings if r.policy == "mixed_float16")
    assert gtx_fp16.rating.value == t4_fp16.rating.value == "fast"
    assert "no Tensor Cores" in gtx_fp16.reason and "fp16 Tensor" not in gtx_fp16.reason
    assert t4_fp16.reason.startswith("rule: fp16 Tensor Cores")
    assert report.to_dict()["gpus"][0]["tensor_cores"] is False


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA GeForce GTX 1650", False),
        ("NVIDIA GeForce GTX 1660 SUPER", False),
        ("NVIDIA GeForce GTX 1650 Ti with Max-Q Design", False),
        ("NVIDIA T1000 8GB", False),
        ("Quadro T2000", False),
        ("NVIDIA GeForce MX450", False),
        ("Tesla T4", True),
        ("NVIDIA GeForce RTX 2060", True),
        ("Quadro RTX 4000", True),
    ],
)
def test_tensor_cores_by_part(name, expected):
    from mpbench.detect.gpu import has_tensor_cores

    assert has_tensor_cores(name, (7, 5)) is expected
    assert has_tensor_cores(name, (6, 1)) is False
    assert has_tensor_cores(name, None) is None


# --- NVML blind, GPU device files present ---


@pytest.fixture
def dev_with_nvidia(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia10", "nvidiactl", "nvidia-uvm", "null"):
        (dev / name).write_text("")
    (dev / "nvidia-caps").mkdir()
    return dev


def test_nvidia_device_files(dev_with_nvidia, tmp_path):
    from mpbench.detect.gpu import nvidia_device_files

    found = nvidia_device_files(dev_with_nvidia)
    assert [os.path.basename(f) for f in found] == ["nvidia0", "nvidia1", "nvidia10"]
    assert nvidia_device_files(tmp_path / "missing") == ()


def test_nvml_blind_with_device_files_says_so(dev_with_nvidia, no_gpu):
    report = collect(environ={}, dev_root=dev_with_nvidia)
    assert report.gpus == [] and report.nvidia_device_files_present and report.nvml_blind
    (note,) = [n for n in report.notes if "device file" in n]
    assert "3 NVIDIA GPU device file(s)" in note and "falls back to the CPU" in note
    assert report.to_dict()["nvidia_device_files"] == [
        str(dev_with_nvidia / n) for n in ("nvidia0", "nvidia1", "nvidia10")
    ]
    # the same through MPBENCH_DEV_ROOT, as a user would point at another /dev
    again = collect(environ={"MPBENCH_DEV_ROOT": str(dev_with_nvidia)})
    assert again.nvml_blind


def test_device_files_with_gpus_listed_is_no_news(dev_with_nvidia, fake_nvml):
    fake_nvml("A100")
    report = collect(environ={}, dev_root=dev_with_nvidia)
    assert report.nvidia_device_files_present and not report.nvml_blind
    assert not any("device file" in n for n in report.notes)


def test_no_device_files_no_note(tmp_path, no_gpu):
    report = collect(environ={}, dev_root=tmp_path)
    assert not report.nvidia_device_files_present and not report.nvml_blind
    assert report.to_dict()["nvidia_device_files"] == []


# --- fingerprints of devices detect did not see ---


def test_undetected_devices_get_stable_fingerprints(no_gpu):
    report = collect(environ={})
    cuda = report.hardware_fingerprint("cuda", 0)
    assert cuda == report.hardware_fingerprint("cuda")  # the index does not matter
    assert cuda == collect(environ={}).hardware_fingerprint("cuda", 0)  # nor the run
    named = report.hardware_fingerprint("cuda", 0, name="NVIDIA A100-SXM4-80GB")
    rocm = report.hardware_fingerprint("rocm", 0)
    mps = report.hardware_fingerprint("mps")
    cpu = report.hardware_fingerprint("cpu")
    assert len({cuda, named, rocm, mps, cpu}) == 5
    assert all(len(f) == 16 and int(f, 16) >= 0 for f in (cuda, named, rocm, mps))
