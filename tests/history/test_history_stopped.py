"""A cell stopped because it could not pay (status `stopped`) in `mpbench history`, compare's
series view: the fleet shows it stopped with its reason, and no series takes a point from it."""

from __future__ import annotations

from builders import CPU_FINGERPRINT, cpu_run, stopped, write_run

from mpbench.history.fleet import fleet_tables
from mpbench.history.series import build_series
from mpbench.results.store import Store, read_run_dir


def stopped_fp16(records):
    """The CPU run with torch's fp16 mnist_dense cell stopped, held to float32's step."""
    (float32,) = [r for r in records if r.cell_id == "torch/mnist_dense/float32/r0"]
    return [
        stopped(r, float32.step_time.median_s / 20)
        if r.cell_id == "torch/mnist_dense/mixed_float16/r0"
        else r
        for r in records
    ]


def test_the_fleet_shows_it_stopped_and_no_series_has_a_point_of_it(tmp_path):
    store = Store.memory()
    for run in read_run_dir(write_run(tmp_path / "cpu", stopped_fp16(cpu_run()))):
        store.add(run)
    runs, records = store.runs(), store.records()
    (mnist,) = [t for t in fleet_tables(records, runs) if t.workload == "mnist_dense"]
    fp16 = next(r for r in mnist.rows if r.name == "torch fp16").cells[CPU_FINGERPRINT]
    assert fp16.status == "stopped" and fp16.speedup is None
    assert fp16.why.startswith("stopped: ") and "× slower than float32 after 3 steps" in fp16.why
    series = build_series(records, runs)
    labels = {s.label for s in series if s.group.workload == "mnist_dense"}
    assert "torch fp16" not in labels and "torch bf16" in labels
