"""Framework versions, the --probe child processes, and the mismatch notes they lead to."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from cli import run_mpbench
from frameworks import needs_tensorflow, needs_torch

import mpbench.detect as detect
from mpbench.detect import collect
from mpbench.detect.frameworks import (
    FrameworkInfo,
    FrameworkProbe,
    ProbedDevice,
    installed_frameworks,
    mismatch_notes,
    probe_frameworks,
    run_probe,
)
from mpbench.detect.gpu import GpuInfo
from mpbench.detect.peaks import all_peaks


def installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def gpu(index=0, name="NVIDIA A100-SXM4-80GB", cc=(8, 0)) -> GpuInfo:
    return GpuInfo(index, name, cc, 80 * 1024**3, all_peaks(name))


def device(index=0, name="NVIDIA A100-SXM4-80GB", cc=(8, 0), arch=None) -> ProbedDevice:
    return ProbedDevice(index, name, cc, 80 * 1024**3, arch)


def torch_info(**probe) -> FrameworkInfo:
    return FrameworkInfo("torch", "torch", "2.5.1", FrameworkProbe(ok=True, seconds=2.0, **probe))


def tf_info(**probe) -> FrameworkInfo:
    distribution = probe.pop("distribution", "tensorflow")
    return FrameworkInfo(
        "tensorflow", distribution, "2.18.0", FrameworkProbe(ok=True, seconds=5.0, **probe)
    )


def test_versions_come_from_package_metadata():
    frameworks = {f.name: f for f in installed_frameworks()}
    assert set(frameworks) == {"torch", "tensorflow", "keras"}
    assert frameworks["torch"].version == installed("torch")
    assert frameworks["keras"].version == installed("keras")
    tf = frameworks["tensorflow"]
    if tf.installed:
        assert tf.version == installed(tf.distribution)
    for info in frameworks.values():
        assert info.probe is None


def test_not_installed(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    frameworks = installed_frameworks()
    assert [(f.name, f.installed, f.version) for f in frameworks] == [
        ("torch", False, None),
        ("tensorflow", False, None),
        ("keras", False, None),
    ]
    assert probe_frameworks(frameworks) == frameworks  # nothing to import, nothing run


# --- mismatch notes (what a user must be told) ---


def test_cpu_only_torch_with_an_nvidia_gpu():
    notes = mismatch_notes([gpu()], [torch_info(cuda_available=False, cuda_version=None)])
    assert len(notes) == 1
    assert "CPU-only build" in notes[0]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cu" in notes[0]


def test_cuda_torch_that_sees_no_gpu_points_at_the_driver():
    notes = mismatch_notes([gpu()], [torch_info(cuda_available=False, cuda_version="12.4")])
    assert len(notes) == 1
    assert "built for CUDA 12.4" in notes[0] and "driver" in notes[0]


def test_cpu_only_tensorflow_with_an_nvidia_gpu():
    info = tf_info(built_with_cuda=False, distribution="tensorflow-cpu")
    (note,) = mismatch_notes([gpu()], [info])
    assert "CPU-only build (tensorflow-cpu)" in note
    assert "pip install 'tensorflow[and-cuda]'" in note


def test_cuda_tensorflow_without_its_cuda_libraries():
    (note,) = mismatch_notes([gpu()], [tf_info(built_with_cuda=True, cuda_version="12.5.1")])
    assert "sees no GPU" in note and "tensorflow[and-cuda]" in note


def test_partly_visible_gpus():
    info = torch_info(cuda_available=True, cuda_version="12.4", devices=(device(),))
    (note,) = mismatch_notes([gpu(0), gpu(1)], [info], environment={})
    assert "sees 1 of the 2" in note
    # CUDA_VISIBLE_DEVICES=0 leaves one GPU to CUDA: seeing one is right, nothing to say.
    assert mismatch_notes([gpu(0), gpu(1)], [info], environment={"CUDA_VISIBLE_DEVICES": "0"}) == []
    # ... but "0,1" leaves both, and a framework that sees one is missing one.
    (note,) = mismatch_notes([gpu(0), gpu(1)], [info], environment={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert "sees 1 of the 2" in note and "CUDA_VISIBLE_DEVICES=0,1" in note


def test_gpus_hidden_on_purpose_are_not_a_blind_framework():
    cpu_torch = torch_info(cuda_available=False, cuda_version="12.4")
    for hidden in ("", "-1"):
        env = {"CUDA_VISIBLE_DEVICES": hidden}
        assert mismatch_notes([gpu(0), gpu(1)], [cpu_torch], environment=env) == []


def test_no_note_when_all_is_well():
    torch = torch_info(cuda_available=True, cuda_version="12.4", devices=(device(),))
    tf = tf_info(built_with_cuda=True, cuda_version="12.5.1", devices=(device(),))
    assert mismatch_notes([gpu()], [torch, tf]) == []
    # no GPU: a CPU-only build is exactly right
    assert mismatch_notes([], [torch_info(cuda_available=False)]) == []
    # a ROCm torch does not look for NVIDIA GPUs
    assert mismatch_notes([gpu()], [torch_info(cuda_available=False, hip_version="6.2")]) == []


def test_failed_import_is_reported_in_one_line():
    failed = FrameworkInfo(
        "torch", "torch", "2.5.1", FrameworkProbe(ok=False, seconds=0.4, error="ImportError: x")
    )
    assert mismatch_notes([], [failed]) == [
        "torch 2.5.1: import failed in a child process: ImportError: x"
    ]


# --- devices only a framework can show ---


def test_mps_joins_the_device_list(monkeypatch, no_gpu):
    probed = [torch_info(cuda_available=False, mps_built=True, mps_available=True)]
    monkeypatch.setattr(detect, "probe_frameworks", lambda frameworks, timeout: probed)
    report = collect(probe=True, environ={})
    assert [d.label for d in report.devices] == ["mps", "cpu"]
    entry = report.device("mps")
    assert {r.policy: r.rating.value for r in entry.ratings} == {
        "float32": "fast",
        "tf32": "unsupported",
        "mixed_float16": "fast",
        "mixed_bfloat16": "slow",
        "float8": "unsupported",
    }
    assert entry.recommendation.policy == "mixed_float16"
    assert entry.source == "torch probe"
    # without --probe MPS is not listed, but it is the same hardware: the same fingerprint
    unprobed = collect(environ={})
    assert unprobed.device("mps") is None
    assert unprobed.hardware_fingerprint("mps") == entry.fingerprint


def test_rocm_gpus_join_the_device_list(monkeypatch, no_gpu):
    mi = [device(i, "AMD Instinct MI250X", (9, 0), "gfx90a:sramecc+:xnack-") for i in range(2)]
    probed = [torch_info(cuda_available=True, hip_version="6.2.41133", devices=tuple(mi))]
    monkeypatch.setattr(detect, "probe_frameworks", lambda frameworks, timeout: probed)
    report = collect(probe=True, environ={})
    assert [d.label for d in report.devices] == ["rocm:0", "rocm:1", "cpu"]
    assert report.device_traits("rocm", 1).name == "AMD Instinct MI250X"
    assert report.device_traits("rocm", 1).compute_capability is None  # not an NVIDIA CC
    assert report.device("rocm", 0).recommendation.policy == "mixed_bfloat16"
    assert not any("torch sees CUDA devices" in note for note in report.notes)


def test_cuda_gpus_nvml_missed_come_from_torch(monkeypatch, no_gpu):
    probed = [torch_info(cuda_available=True, cuda_version="12.4", devices=(device(),))]
    monkeypatch.setattr(detect, "probe_frameworks", lambda frameworks, timeout: probed)
    report = collect(probe=True, environ={})
    assert [d.label for d in report.devices] == ["cuda:0", "cpu"]
    assert report.device_traits("cuda", 0).compute_capability == (8, 0)
    assert any("torch sees CUDA devices" in note for note in report.notes)


# --- the real child processes ---


@needs_torch
@needs_tensorflow
def test_real_probes_of_the_installed_frameworks():
    frameworks = probe_frameworks(installed_frameworks(), timeout=300)
    torch = next(f for f in frameworks if f.name == "torch").probe
    assert torch.ok, torch.error
    assert torch.version == installed("torch")
    assert isinstance(torch.cuda_available, bool)
    assert len(torch.devices) == 0 if not torch.cuda_available else len(torch.devices) >= 1
    assert (torch.bf16_supported is None) == (not torch.cuda_available)
    tf = next(f for f in frameworks if f.name == "tensorflow").probe
    assert tf.ok, tf.error
    assert tf.version == installed("tensorflow")
    assert isinstance(tf.built_with_cuda, bool)
    assert next(f for f in frameworks if f.name == "keras").probe is None


@pytest.fixture
def broken_torch(tmp_path, monkeypatch):
    """A `torch` package first on the path of the probe child, with chosen contents."""

    def make(body: str):
        package = tmp_path / "torch"
        package.mkdir(exist_ok=True)
        (package / "__init__.py").write_text(body)
        monkeypatch.setenv("PYTHONPATH", str(tmp_path))

    return make


def test_import_error_in_the_child_is_one_line(broken_torch):
    broken_torch(
        'raise ImportError("libcudart.so.12: cannot open shared object file:\\n'
        '    No such file or directory")\n'
    )
    probe = run_probe("torch", timeout=60)
    assert not probe.ok
    assert probe.error == (
        "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory"
    )


def test_a_crashing_child_is_reported(broken_torch):
    broken_torch("import os\nos.abort()\n")
    probe = run_probe("torch", timeout=60)
    assert not probe.ok
    assert probe.error.startswith("probe process failed")


def test_a_hanging_child_times_out(broken_torch):
    broken_torch("import time\ntime.sleep(60)\n")
    probe = run_probe("torch", timeout=1)
    assert not probe.ok
    assert "timed out after 1 s" in probe.error


def test_probe_child_usage_error():
    done = subprocess.run(
        [sys.executable, "-m", "mpbench.detect.probe_child", "jax"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("usage:") and "Traceback" not in done.stderr


# --- --probe with NVML GPUs the frameworks cannot see ---


def test_probe_warns_when_frameworks_are_blind_to_nvml_gpus(monkeypatch, fake_nvml):
    fake_nvml("A100", "T4")
    probed = [
        torch_info(cuda_available=False, cuda_version=None),  # a +cpu wheel
        # plain `tensorflow` on Linux: built with CUDA, but without the [and-cuda] libraries
        tf_info(built_with_cuda=True, cuda_version="12.5.1"),
        FrameworkInfo("keras", "keras", "3.15.0"),
    ]
    monkeypatch.setattr(detect, "probe_frameworks", lambda frameworks, timeout: probed)
    report = collect(probe=True, environ={})
    (torch_note,) = [n for n in report.notes if n.startswith("torch 2.5.1")]
    assert "CPU-only build but 2 NVIDIA GPU(s) are present" in torch_note
    assert "--index-url https://download.pytorch.org/whl/cu" in torch_note
    (tf_note,) = [n for n in report.notes if n.startswith("tensorflow 2.18.0")]
    assert "sees no GPU" in tf_note and "pip install 'tensorflow[and-cuda]'" in tf_note

    # GPUs hidden on purpose: no framework is blamed, the hiding is said once
    hidden = collect(probe=True, environ={"CUDA_VISIBLE_DEVICES": ""})
    assert not any(n.startswith(("torch", "tensorflow")) for n in hidden.notes)
    assert "CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU" in hidden.notes

    # a framework that sees fewer GPUs than CUDA_VISIBLE_DEVICES leaves
    one = (device(0),)
    probed[0] = torch_info(cuda_available=True, cuda_version="12.4", devices=one)
    probed[1] = tf_info(built_with_cuda=True, cuda_version="12.5.1", devices=one)
    partial = collect(probe=True, environ={"CUDA_VISIBLE_DEVICES": "1,0"})
    assert [n for n in partial.notes if n.startswith("torch")] == [
        "torch 2.5.1 sees 1 of the 2 NVIDIA GPUs CUDA should see (CUDA_VISIBLE_DEVICES=1,0)"
    ]
    single = collect(probe=True, environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert not any(n.startswith(("torch", "tensorflow")) for n in single.notes)


@needs_torch
@pytest.mark.tensorflow  # its probe children import TensorFlow too, where installed
def test_cli_probe_with_nvml_gpus_and_the_real_frameworks(tmp_path, fake_pynvml):
    """The real --probe children on this machine, with NVML saying two GPUs are here."""
    import json
    import os
    import shutil

    shutil.copy(fake_pynvml.SOURCE, tmp_path / "pynvml.py")
    env = {
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "PYNVML_FAKE_GPUS": "A100,T4",
    }
    done = run_mpbench("detect", "--probe", "--json", env=env, fork=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    frameworks = {f["name"]: f for f in data["frameworks"]}
    torch_probe = frameworks["torch"]["probe"]
    assert torch_probe["ok"], torch_probe
    if not torch_probe["devices"]:  # this machine has no GPU, whatever NVML says
        (note,) = [n for n in data["notes"] if n.startswith("torch ")]
        if torch_probe["cuda_version"] is None:  # a +cpu wheel
            assert "is a CPU-only build but 2 NVIDIA GPU(s) are present" in note
            assert "pip install torch --index-url https://download.pytorch.org/whl/cu" in note
        else:
            assert f"is built for CUDA {torch_probe['cuda_version']} but sees no GPU" in note
    tf_probe = (frameworks["tensorflow"] or {}).get("probe")
    if tf_probe and tf_probe["ok"] and not tf_probe["devices"]:
        (note,) = [n for n in data["notes"] if n.startswith("tensorflow ")]
        assert "pip install 'tensorflow[and-cuda]'" in note
