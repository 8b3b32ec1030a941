"""The fleet (`mpbench history --by device`, mpbench/history/fleet.py): runs of two machines,
side by side, each machine's numbers its own, never pooled into one interval."""

from __future__ import annotations

import io
import json

from builders import CPU_FINGERPRINT, cpu_run, record, write_run
from cli import run_mpbench

from mpbench.compare import CompareOptions
from mpbench.compare.run import compare
from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import summarize_all
from mpbench.history.fleet import fleet_tables
from mpbench.history.render import fleet_text_tables
from mpbench.results import DeviceInfo, write_environment
from mpbench.results.store import Store, read_run_dir

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", capability="9.0", index=0)
H200_FINGERPRINT = "6579a41894f8c2d1"
# The H200's MNIST dense run (4096 units, batch 8192; README, "What has run on a real GPU"):
# (median ms, accuracy, device MiB) per policy, three repeats a little apart.
H200_RUN = {
    "float32": (19.7, 0.64, 1900),
    "tf32": (4.08, 0.69, 1900),
    "mixed_float16": (2.68, 0.57, 1720),
    "mixed_bfloat16": (2.41, 0.72, 1720),
}


def h200_run(run_id: str = "20261126-173119-8ada") -> list:
    records = []
    for repeat, wobble in enumerate((1.0, 1.02, 0.99)):
        for policy, (ms, accuracy, mib) in H200_RUN.items():
            records.append(
                record("torch", "mnist_dense", policy, median_ms=ms * wobble, accuracy=accuracy,
                       device_mib=mib, training_mib=mib * 0.4, repeat=repeat, run_id=run_id,
                       fingerprint=H200_FINGERPRINT, device=H200,
                       config_overrides={"units": 4096, "batch_size": 8192, "device": "cuda"})
            )  # fmt: skip
    return records


def runs_of_two_machines(tmp_path):
    cpu = write_run(tmp_path / "cpu", cpu_run())
    gpu = write_run(tmp_path / "h200", h200_run())
    write_environment(cpu, {"started_at": "2026-03-01T10:15:00+00:00"})
    write_environment(gpu, {"started_at": "2026-11-26T17:31:19+00:00"})
    return cpu, gpu


def read(paths):
    store = Store.memory()
    for path in paths:
        for run in read_run_dir(path):
            store.add(run)
    return store.runs(), store.records()


def test_two_machines_side_by_side_each_with_its_own_numbers(tmp_path):
    cpu, gpu = runs_of_two_machines(tmp_path)
    runs, records = read([cpu, gpu])
    tables = {t.workload: t for t in fleet_tables(records, runs)}
    mnist = tables["mnist_dense"]
    # Each column is named as compare names the machine (results/machine.py's label), over
    # its device's arithmetic.
    assert [m.machine.label() for m in mnist.machines] == [
        "cuda: NVIDIA H200 [6579a41894f8]",
        "cpu: AMD EPYC [cpu-3f9a1c07]",
    ]
    assert [m.machine.device_class for m in mnist.machines] == [
        "NVIDIA H200 (CC 9.0)",
        "AMD EPYC (no bf16/fp16 arithmetic)",
    ]
    assert mnist.configs[H200_FINGERPRINT] == "batch_size=8192, units=4096"
    bf16 = next(r for r in mnist.rows if r.name == "torch bf16")
    on_gpu, on_cpu = bf16.cells[H200_FINGERPRINT], bf16.cells[CPU_FINGERPRINT]
    # Each column is what compare says of that machine's records alone.
    for cell, alone in ((on_gpu, gpu), (on_cpu, cpu)):
        _, own = read([alone])
        (section,) = [s for s in build_sections(summarize_all(own)) if s.workload == "mnist_dense"]
        group = next(g for g in section.groups if g.key.framework == "torch")
        assert cell.speedup == group.comparisons["mixed_bfloat16"].speedup
        assert cell.memory_ratio == group.comparisons["mixed_bfloat16"].memory_ratio
    assert 7 < on_gpu.speedup.value < 9 and 2 < on_cpu.speedup.value < 3
    assert on_gpu.speedup.high < on_cpu.speedup.low or on_gpu.speedup.low > on_cpu.speedup.high
    # The CPU has no tf32 (skipped with its reason); TensorFlow ran on the CPU only.
    tf32 = next(r for r in mnist.rows if r.name == "torch tf32")
    assert tf32.cells[CPU_FINGERPRINT].status == "skipped"
    assert "cifar10_cnn" in tables and len(tables["cifar10_cnn"].machines) == 1


def test_the_command_shows_the_fleet(tmp_path):
    cpu, gpu = runs_of_two_machines(tmp_path)
    store = tmp_path / "store.sqlite"
    assert run_mpbench("store", "add", cpu, gpu, "--store", store).returncode == 0
    done = run_mpbench("history", store, "--by", "device", "--workload", "mnist_dense")
    assert done.returncode == 0, done.stderr
    assert "cuda: NVIDIA H200 [6579a41894f8]" in done.stdout and "CC 9.0" in done.stdout
    assert "cpu: AMD EPYC [cpu-3f9a1c07]" in done.stdout
    assert "never pooled" in done.stdout
    as_json = json.loads(
        run_mpbench("history", store, "--by", "device", "--format", "json", "-p", "bf16").stdout
    )
    (workload,) = [w for w in as_json["workloads"] if w["workload"] == "mnist_dense"]
    assert [r["row"] for r in workload["rows"]] == [
        "torch fp32",
        "torch bf16",
        "tf fp32",
        "tf bf16",
    ]
    cells = workload["rows"][1]["cells"]
    assert set(cells) == {H200_FINGERPRINT, CPU_FINGERPRINT}
    assert cells[H200_FINGERPRINT]["speedup"]["interval"]["kind"] == "repeats"


def test_compare_and_the_fleet_name_each_machine_alike(tmp_path):
    """One machine, one name (results/machine.py's Machine.label()): compare's section title
    and the fleet's column say the same, a site's name (MPBENCH_MACHINE) included."""
    named = [r for r in h200_run() if r.workload == "mnist_dense"]
    for r in named:
        r.config["machine"] = "ib-cluster"
    cpu = write_run(tmp_path / "cpu", cpu_run())
    gpu = write_run(tmp_path / "h200", named)
    out = io.StringIO()
    assert compare(CompareOptions(paths=[cpu, gpu], format="markdown"), stdout=out) == 0
    compared = out.getvalue()
    runs, records = read([cpu, gpu])
    (mnist,) = [t for t in fleet_tables(records, runs) if t.workload == "mnist_dense"]
    (table,) = fleet_text_tables([mnist])
    names = ["cuda: NVIDIA H200 [6579a41894f8] [ib-cluster]", "cpu: AMD EPYC [cpu-3f9a1c07]"]
    assert table.headers[1:] == names
    for name in names:
        assert f"### mnist_dense on {name}\n" in compared
    assert table.rows[-3] == ["arithmetic", "CC 9.0", "no bf16/fp16 arithmetic"]
