"""MIG: a GPU in MIG mode is listed with its slices, each with its own memory and UUID."""

from __future__ import annotations

import json

from rich.console import Console

from mpbench.detect import collect
from mpbench.detect.gpu import probe_nvidia
from mpbench.detect.render import print_report

MIB = 1024**2


def test_slices_are_read_with_their_own_memory_and_uuid(fake_nvml):
    fake = fake_nvml("A100-MIG")
    (gpu,) = probe_nvidia().gpus
    assert gpu.mig_mode is True
    assert gpu.memory_total_bytes == 81920 * MIB  # the parent's aggregate
    assert [m.mig_index for m in gpu.mig_devices] == [0, 2]  # slot 1 is empty (NotFound)
    first, second = gpu.mig_devices
    assert first.name == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert second.name == "NVIDIA A100-SXM4-80GB MIG 2g.20gb"
    assert first.memory_total_bytes == 40192 * MIB
    assert second.memory_total_bytes == 19968 * MIB
    assert first.uuid == fake.gpu(0).mig_devices[0].uuid and first.uuid.startswith("MIG-")
    assert first.parent_uuid == gpu.uuid and first.index == 0
    assert (first.gpu_instance_id, first.compute_instance_id) == (2, 0)
    assert first.compute_capability == (8, 0)
    assert set(first.peak_tflops.values()) == {None}  # a slice is no datasheet part
    assert gpu.peak_tflops["bf16"] == 312.0  # the whole GPU still is
    assert gpu.errors == first.errors == second.errors == ()
    assert fake.calls()[-1] == "nvmlShutdown"


def test_slices_are_the_devices_cells_run_on(fake_nvml):
    fake_nvml("A100-MIG", "T4")
    report = collect(environ={})
    assert [d.label for d in report.devices] == ["cuda:0/mig0", "cuda:0/mig2", "cuda:1", "cpu"]
    slice_entry = report.devices[0]
    assert slice_entry.name.endswith("MIG 3g.40gb")
    assert slice_entry.recommendation.policy == "mixed_bfloat16"  # the parent's Tensor Cores
    assert len({d.fingerprint for d in report.devices}) == 4  # each profile its own hardware
    data = report.to_dict()
    (mig_json,) = [g for g in data["gpus"] if g["mig_mode"]]
    assert [m["name"] for m in mig_json["mig_devices"]] == [
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        "NVIDIA A100-SXM4-80GB MIG 2g.20gb",
    ]
    assert mig_json["mig_devices"][0]["peak_tflops"]["bf16"] is None
    assert mig_json["mig_devices"][0]["peak_source"] is None
    json.dumps(data)


def test_cuda_index_of_a_slice_needs_its_uuid(fake_nvml):
    fake = fake_nvml("A100-MIG")
    slice_uuid = fake.gpu(0).mig_devices[2].uuid
    report = collect(environ={"CUDA_VISIBLE_DEVICES": slice_uuid})
    found = report.gpu_for_cuda_index(0)
    assert found.uuid == slice_uuid and found.name.endswith("MIG 2g.20gb")
    assert report.device("cuda", 0).label == "cuda:0/mig2"
    assert report.hardware_fingerprint("cuda", 0) == report.devices[1].fingerprint
    # one MIG device per CUDA process: a second UUID does not make a cuda:1
    both = f"{fake.gpu(0).mig_devices[0].uuid},{slice_uuid}"
    mapping = report.cuda_mapping({"CUDA_VISIBLE_DEVICES": both})
    assert [g.mig_index for g in mapping.gpus] == [0] and "single MIG device" in mapping.note
    # the legacy MIG-GPU-<uuid>/<GI>/<CI> form names the same slice
    legacy = f"MIG-{fake.gpu(0).uuid}/3/0"
    assert report.gpu_for_cuda_index(0, env={"CUDA_VISIBLE_DEVICES": legacy}).uuid == slice_uuid


def test_mig_gpu_without_a_slice_named_is_not_guessed(fake_nvml):
    fake_nvml("A100-MIG")
    report = collect(environ={})
    assert report.gpu_for_cuda_index(0) is None
    assert any("MIG mode" in n and "CUDA_VISIBLE_DEVICES=MIG-" in n for n in report.notes)
    # 3g.40gb and 2g.20gb differ: cuda:0 is unknown, so no entry and a fallback fingerprint
    assert report.device("cuda", 0) is None
    assert report.hardware_fingerprint("cuda", 0) == report.undetected_fingerprint("cuda")


def test_a_failing_slot_or_call_keeps_the_rest(fake_nvml, fake_pynvml):
    denied = fake_pynvml.NVML_ERROR_NO_PERMISSION
    fake_nvml(
        "A100-MIG",
        call_errors={
            ((0, 2), "nvmlDeviceGetMigDeviceHandleByIndex"): denied,
            ((0, 0), "nvmlDeviceGetMemoryInfo"): denied,
            (0, "nvmlDeviceGetMemoryInfo"): denied,  # parent aggregate needs privileges
        },
    )
    report = collect(environ={})
    (gpu,) = report.gpus
    assert gpu.memory_total_bytes is None and gpu.mig_mode is True
    assert gpu.errors == (
        "nvmlDeviceGetMemoryInfo: Insufficient Permissions",
        "nvmlDeviceGetMigDeviceHandleByIndex(2): Insufficient Permissions",
    )
    (only,) = gpu.mig_devices
    assert only.mig_index == 0 and only.memory_total_bytes is None
    assert only.uuid.startswith("MIG-") and only.errors == (
        "nvmlDeviceGetMemoryInfo: Insufficient Permissions",
    )
    assert "NVML: GPU 0/mig0: nvmlDeviceGetMemoryInfo: Insufficient Permissions" in report.notes
    assert [d.label for d in report.devices] == ["cuda:0/mig0", "cpu"]


def test_mig_mode_query_failing_is_recorded(fake_nvml, fake_pynvml):
    fake_nvml("A100", call_errors={(0, "nvmlDeviceGetMigMode"): fake_pynvml.NVML_ERROR_UNKNOWN})
    (gpu,) = collect(environ={}).gpus
    assert gpu.mig_mode is None and gpu.errors == ("nvmlDeviceGetMigMode: Unknown Error",)


def test_mig_mode_with_no_slice_says_so(fake_nvml, fake_pynvml):
    empty = fake_pynvml.FakeGpu(
        "NVIDIA H100 80GB HBM3", (9, 0), 81559 * MIB, mig_capable=True, mig_enabled=True
    )
    fake_nvml(empty)
    report = collect(environ={})
    assert report.gpus[0].mig_mode and report.gpus[0].mig_devices == ()
    assert [d.kind for d in report.devices] == ["cpu"]
    assert any("MIG mode with no MIG device" in n for n in report.notes)


def test_rendering_shows_slices_without_peaks(fake_nvml):
    fake_nvml("A100-MIG")
    console = Console(record=True, width=220)
    print_report(collect(environ={}), console=console)
    text = console.export_text()
    assert "NVIDIA A100-SXM4-80GB MIG 3g.40gb" in text and "MIG mode on" in text
    slice_peaks = next(line for line in text.splitlines() if "MIG slice: a share" in line)
    assert [c.strip() for c in slice_peaks.split("│")[1:6]] == ["0/mig0", "-", "-", "-", "-"]
