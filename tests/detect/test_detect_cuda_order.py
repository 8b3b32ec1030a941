"""CUDA index -> NVML GPU: CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES as CUDA reads them."""

from __future__ import annotations

import pytest

from mpbench.detect import collect
from mpbench.detect.cuda_order import cuda_mapping
from mpbench.detect.gpu import GpuInfo
from mpbench.detect.peaks import all_peaks

UUIDS = (
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-8932f937-aaaa-4106-c12f-20bd9faed9f6",  # shares 13 characters with the first
    "GPU-5f3a0c11-0b9e-4c2a-9e6d-0f3c1b2a4d5e",
)


def gpu(index: int, name: str, bus: str, uuid: str | None = None) -> GpuInfo:
    return GpuInfo(
        index,
        name,
        (8, 0),
        80 * 1024**3,
        all_peaks(name),
        uuid=uuid or UUIDS[index],
        pci_bus_id=bus,
    )


@pytest.fixture
def three():
    return [
        gpu(0, "NVIDIA A100-SXM4-80GB", "00000000:07:00.0"),
        gpu(1, "Tesla T4", "00000000:0B:00.0"),
        gpu(2, "NVIDIA H100 80GB HBM3", "00000000:48:00.0"),
    ]


def names(mapping) -> list[str] | None:
    return None if mapping.gpus is None else [g.name.split()[-1] for g in mapping.gpus]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, ["A100-SXM4-80GB", "T4", "HBM3"]),  # unset: every GPU, PCI bus order
        ("2,0", ["HBM3", "A100-SXM4-80GB"]),  # listed order
        ("0,2,-1,1", ["A100-SXM4-80GB", "HBM3"]),  # the CUDA guide's own example
        ("1,7,0", ["T4"]),  # 7 is no device: the list ends there
        (" 1 , 2", ["T4", "HBM3"]),  # spaces around entries
        ("1gpu,2", ["T4", "HBM3"]),  # strtoul: "1gpu" is 1
        ("0,0", []),  # a repeated device empties the list
        ("", []),  # set but empty: no GPU
        ("-1", []),
        ("nothing", []),
        (UUIDS[2], ["HBM3"]),
        (f"{UUIDS[2]},{UUIDS[0]}", ["HBM3", "A100-SXM4-80GB"]),
        ("GPU-5f3a", ["HBM3"]),  # a unique prefix is enough
        ("GPU-8932f937", []),  # an ambiguous prefix is invalid
        ("GPU-8932f937-d72c,GPU-5f3a", ["A100-SXM4-80GB", "HBM3"]),
        ("GPU-5f3a,1", ["HBM3"]),  # another kind of entry ends a UUID list
        ("GPU-5f3a,GPU-ffff,GPU-8932f937-d", ["HBM3"]),  # an unknown UUID ends it
        ("1,GPU-5f3a", ["T4"]),
    ],
)
def test_cuda_visible_devices(three, visible, expected):
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert names(cuda_mapping(three, env)) == expected


def test_pci_bus_order_not_nvml_order(three):
    # NVML's docs promise no order; CUDA's PCI_BUS_ID order is by bus id.
    shuffled = [three[2], three[0], three[1]]
    assert names(cuda_mapping(shuffled, {})) == ["A100-SXM4-80GB", "T4", "HBM3"]


@pytest.mark.parametrize("order", ["PCI_BUS_ID", "pci_bus_id", None])
def test_pci_bus_order_is_assumed_when_unset(three, order):
    env = {} if order is None else {"CUDA_DEVICE_ORDER": order}
    mapping = cuda_mapping(three, env)
    assert mapping.known and mapping.get(1).name == "Tesla T4"


def test_fastest_first_cannot_be_mapped(three):
    env = {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    mapping = cuda_mapping(three, env)
    assert not mapping.known and mapping.get(0) is None
    assert "CUDA_DEVICE_ORDER=FASTEST_FIRST" in mapping.note
    # ... except by UUID, which names devices whatever the order
    by_uuid = cuda_mapping(three, {**env, "CUDA_VISIBLE_DEVICES": f"{UUIDS[1]},{UUIDS[0]}"})
    assert names(by_uuid) == ["T4", "A100-SXM4-80GB"]
    # ... or when there is one GPU only
    assert names(cuda_mapping(three[1:2], env)) == ["T4"]


def test_unreadable_gpu_makes_indices_unknown(three):
    mapping = cuda_mapping(three[:2], {}, unreadable=1)
    assert not mapping.known and "could not open 1 GPU" in mapping.note
    # UUIDs still name what they name
    assert names(cuda_mapping(three[:2], {"CUDA_VISIBLE_DEVICES": UUIDS[1]}, 1)) == ["T4"]


# --- through the report, with the fake NVML ---


def test_report_maps_cuda_index_to_nvml_gpu(fake_nvml):
    fake = fake_nvml("A100", "T4", "H100")
    report = collect(environ={"CUDA_VISIBLE_DEVICES": "2,0"})
    assert report.gpu_for_cuda_index(0).name == "NVIDIA H100 80GB HBM3"
    assert report.gpu_for_cuda_index(1).uuid == fake.gpu(0).uuid
    assert report.gpu_for_cuda_index(2) is None
    # device(), device_traits() and hardware_fingerprint() follow the same mapping
    h100 = next(d for d in report.devices if d.uuid == fake.gpu(2).uuid)
    assert report.device("cuda", 0) is h100 and report.device("cuda:0") is h100
    assert report.device_traits("cuda").compute_capability == (9, 0)
    assert report.hardware_fingerprint("cuda", 0) == h100.fingerprint
    assert report.device("cuda", 2) is None
    # an explicit environment (a cell's) wins over the one detect ran in
    t4_env = {"CUDA_VISIBLE_DEVICES": fake.gpu(1).uuid[:12]}
    assert report.device_traits("cuda", 0, env=t4_env).name == "Tesla T4"
    assert report.gpu_for_cuda_index(0, env={}).name == "NVIDIA A100-SXM4-80GB"
    # the JSON says which CUDA index each NVML GPU has
    data = report.to_dict()
    assert [g["cuda_index"] for g in data["gpus"]] == [1, None, 0]
    assert [d.get("cuda_index") for d in data["devices"]] == [1, None, 0, None]
    assert data["cuda_mapping"] == {
        "environment": {"CUDA_VISIBLE_DEVICES": "2,0"},
        "known": True,
        "note": None,
    }


def test_hidden_gpus(fake_nvml):
    fake_nvml("A100", "T4")
    report = collect(environ={"CUDA_VISIBLE_DEVICES": ""})
    assert report.device("cuda", 0) is None
    assert "CUDA_VISIBLE_DEVICES is empty: CUDA sees no GPU" in report.notes
    assert report.hardware_fingerprint("cuda", 0) == report.undetected_fingerprint("cuda")


def test_unknown_order_same_parts_still_rated(fake_nvml):
    fake_nvml("A100", "A100")
    report = collect(environ={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert report.gpu_for_cuda_index(0) is None  # which board: unknowable
    entry = report.device("cuda", 1)  # but both are the same part: same traits, fingerprint
    assert entry is not None and entry.traits.compute_capability == (8, 0)
    assert report.hardware_fingerprint("cuda", 0) == report.hardware_fingerprint("cuda", 1)
    assert report.device("cuda", 2) is None
    assert any("CUDA_DEVICE_ORDER=FASTEST_FIRST" in note for note in report.notes)


def test_unknown_order_different_parts_not_guessed(fake_nvml):
    fake_nvml("A100", "T4")
    report = collect(environ={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert report.device("cuda", 0) is None
    assert report.to_dict()["cuda_mapping"]["known"] is False
    # the runner's cells set CUDA_DEVICE_ORDER=PCI_BUS_ID: then it is known again
    assert report.device("cuda", 1, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).name == "Tesla T4"
