"""Cloud TPU detection from device files and environment (temp dirs stand in for /dev, /sys)."""

from __future__ import annotations

import json

import pytest
from cli import run_mpbench

from mpbench.detect import collect
from mpbench.detect.tpu import probe_tpu


@pytest.fixture
def roots(tmp_path):
    dev, sys_root = tmp_path / "dev", tmp_path / "sys"
    dev.mkdir()
    (sys_root / "bus" / "pci" / "devices").mkdir(parents=True)
    return dev, sys_root


def add_pci(sys_root, slot, vendor, device):
    entry = sys_root / "bus" / "pci" / "devices" / slot
    entry.mkdir()
    (entry / "vendor").write_text(vendor + "\n")
    (entry / "device").write_text(device + "\n")


def add_files(directory, *names):
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / name).write_text("")


def test_accel_device_files(roots):
    dev, sys_root = roots
    add_files(dev, "accel0", "accel1", "accel2", "accel3", "null")
    env = {"TPU_ACCELERATOR_TYPE": "v4-8", "TPU_NAME": "trainer"}
    tpu = probe_tpu(dev, sys_root, env).tpu
    assert tpu is not None
    assert tpu.chips == 4
    assert tpu.name == "Cloud TPU v4-8"
    assert tpu.tpu_name == "trainer"
    assert tpu.device_files == tuple(str(dev / f"accel{i}") for i in range(4))


def test_vfio_groups_count_with_a_google_tpu_pci_device(roots):
    dev, sys_root = roots
    add_files(dev / "vfio", "vfio", "0", "1", "2", "3")
    add_pci(sys_root, "0000:00:04.0", "0x1ae0", "0x0063")
    add_pci(sys_root, "0000:00:05.0", "0x8086", "0x1234")
    probe = probe_tpu(dev, sys_root, {})
    assert probe.tpu is not None
    assert probe.tpu.generation == "v5e"
    assert probe.tpu.chips == 4
    assert probe.tpu.name == "Cloud TPU v5e"
    assert probe.notes == []


def test_vfio_groups_alone_are_not_a_tpu(roots):
    dev, sys_root = roots
    add_files(dev / "vfio", "vfio", "12", "13")
    add_pci(sys_root, "0000:3b:00.0", "0x10de", "0x20b5")  # an NVIDIA GPU passed through
    probe = probe_tpu(dev, sys_root, {})
    assert probe.tpu is None
    assert len(probe.notes) == 1 and "VFIO" in probe.notes[0]


def test_vfio_control_node_alone_is_nothing(roots):
    dev, sys_root = roots
    add_files(dev / "vfio", "vfio")
    probe = probe_tpu(dev, sys_root, {})
    assert probe.tpu is None and probe.notes == []


def test_linux_accel_subsystem_directory_is_not_a_tpu(roots):
    dev, sys_root = roots
    add_files(dev / "accel", "accel0")  # /dev/accel/accel0: Intel NPU, Habana, ...
    assert probe_tpu(dev, sys_root, {}).tpu is None


def test_environment_alone(roots):
    dev, sys_root = roots
    probe = probe_tpu(dev, sys_root, {"TPU_ACCELERATOR_TYPE": "v5litepod-8"})
    assert probe.tpu is not None
    assert probe.tpu.chips == 0
    assert probe.tpu.accelerator_type == "v5litepod-8"
    assert any("no TPU device file" in note for note in probe.notes)


def test_nothing(roots):
    dev, sys_root = roots
    add_files(dev, "null", "zero", "nvidia0")
    probe = probe_tpu(dev, sys_root, {})
    assert probe.tpu is None and probe.notes == []


def test_tpu_joins_the_device_list_with_bf16_recommended(roots, no_gpu):
    dev, sys_root = roots
    add_files(dev, "accel0", "accel1", "accel2", "accel3")
    env = {"TPU_ACCELERATOR_TYPE": "v4-8"}
    report = collect(dev_root=dev, sys_root=sys_root, environ=env)
    assert [d.kind for d in report.devices] == ["tpu", "cpu"]
    entry = report.device("tpu")
    assert {r.policy: r.rating.value for r in entry.ratings} == {
        "float32": "fast",
        "tf32": "unsupported",
        "mixed_float16": "unsupported",
        "mixed_bfloat16": "fast",
        "float8": "unsupported",
    }
    assert entry.recommendation.policy == "mixed_bfloat16"
    data = json.loads(json.dumps(report.to_dict()))
    assert data["tpu"]["chips"] == 4
    # a bigger slice is different hardware
    add_files(dev, "accel4", "accel5", "accel6", "accel7")
    bigger = collect(dev_root=dev, sys_root=sys_root, environ={"TPU_ACCELERATOR_TYPE": "v4-16"})
    assert bigger.hardware_fingerprint("tpu") != report.hardware_fingerprint("tpu")


def test_dev_root_override_reaches_a_real_cli_run(roots):
    dev, _ = roots
    add_files(dev, "accel0", "accel1")
    done = run_mpbench("detect", "--json", env={"MPBENCH_DEV_ROOT": str(dev)}, fork=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["tpu"]["chips"] == 2
    tpu = next(d for d in data["devices"] if d["kind"] == "tpu")
    assert tpu["recommendation"]["policy"] == "mixed_bfloat16"
