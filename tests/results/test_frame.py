"""`mpbench.results.load`: result files as a pandas DataFrame, and results.csv as its text.

Run directories are written by the real writer from records shaped like a real CPU run
(tests/builders.py), with the fields a GPU run adds (capability, allocator
memory, dataset digests, MFU) on a second machine's records.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from builders import MIB, cpu_run, record, variant_run, write_run

from mpbench.results import (
    CellRecord,
    DeviceInfo,
    SchemaError,
    Status,
    load,
    read_records,
    write_csv,
)

IDENTITY = ["framework", "workload", "policy", "repeat", "status", "reason"]
STEP_STATS = [
    "step_time.median_s",
    "step_time.mean_s",
    "step_time.p10_s",
    "step_time.p90_s",
    "step_time.stdev_s",
    "step_time.count",
    "step_time.warmup_steps",
]
GPU = DeviceInfo(kind="cuda", name="NVIDIA A100-SXM4-40GB", capability="8.0", index=0)


def _gpu_records() -> list[CellRecord]:
    """A second machine: an A100 run with the fields only a GPU run fills in."""
    out = []
    for repeat in range(2):
        for policy, ms, mib in (("float32", 3.1, 900.0), ("tf32", 1.9, 900.0)):
            rec = record(
                "torch",
                "mnist_dense",
                policy,
                median_ms=ms + 0.05 * repeat,
                accuracy=0.97,
                device_mib=mib,
                training_mib=120.0,
                repeat=repeat,
                run_id="20260302-090000-a100",
                fingerprint="cuda-0a1b2c3d4e5f6071",
                device=GPU,
                config_overrides={"device": "cuda", "milestones": [3, 6]},
            )
            rec.data.sha256 = {"mnist.npz": "ab" * 32}
            rec.data.source, rec.data.name, rec.data.origin = "real", "mnist", "/data/mnist.npz"
            rec.flops_per_step, rec.achieved_tflops, rec.peak_tflops = 2.5e9, 0.8, 19.5
            rec.mfu = rec.achieved_tflops / rec.peak_tflops
            rec.threads = {"intra_op": 8, "inter_op": 2, "omp_num_threads": "8"}
            rec.accuracy.train_loss_per_epoch = [0.61, 0.32, 0.21]
            out.append(rec)
    return out


@pytest.fixture
def cpu_dir(tmp_path: Path) -> Path:
    run = write_run(tmp_path / "cpu", cpu_run())
    write_csv(run, read_records(run))
    return run


@pytest.fixture
def gpu_dir(tmp_path: Path) -> Path:
    run = write_run(tmp_path / "gpu", _gpu_records())
    write_csv(run, read_records(run))
    return run


def test_one_row_per_cell_with_flat_named_columns(cpu_dir: Path) -> None:
    frame = load(cpu_dir)
    records = read_records(cpu_dir)
    assert len(frame) == len(records) == 16
    for column in [
        *IDENTITY,
        *STEP_STATS,
        "throughput_samples_per_s",
        "end_to_end.samples_per_s",
        "memory.training_bytes",
        "memory.host_peak_rss_bytes",
        "accuracy.test_accuracy",
        "accuracy.test_loss",
        "accuracy.train_loss_per_epoch",
        "loss_scale.final_scale",
        "device.kind",
        "device.name",
        "hardware_fingerprint",
        "run_id",
        "cell_id",
        "config.batch_size",
        "config.units",
        "config.optimizer",
        "precision.autocast_dtype",
    ]:
        assert column in frame.columns, column
    assert "step_time.raw_s" not in frame.columns
    assert list(frame["cell_id"]) == [r.cell_id for r in records]  # the file's order
    bf16 = frame.set_index("cell_id").loc["torch/mnist_dense/mixed_bfloat16/r0"]
    assert bf16["step_time.median_s"] == pytest.approx(0.98e-3)
    assert bf16["throughput_samples_per_s"] == pytest.approx(128 / 0.98e-3)
    assert bf16["memory.training_bytes"] == 31 * MIB
    assert bf16["accuracy.train_loss_per_epoch"] == [round(2.4 * (1 - 0.9699) + 0.05, 4)]
    fp16 = frame.set_index("cell_id").loc["torch/mnist_dense/mixed_float16/r0"]
    assert fp16["loss_scale.final_scale"] == 65536.0 and fp16["loss_scale.skipped_steps"] == 1


def test_dtypes_are_what_the_values_are(cpu_dir: Path) -> None:
    frame = load(cpu_dir)
    for column in ("repeat", "step_time.count", "memory.training_bytes", "config.batch_size"):
        assert str(frame[column].dtype) == "Int64", column
    for column in ("step_time.median_s", "accuracy.test_accuracy", "config.learning_rate"):
        assert frame[column].dtype == "float64", column
    assert str(frame["step_time.drifting"].dtype) == "boolean"
    assert str(frame["precision.loss_scaling"].dtype) == "boolean"
    for column in ("status", "framework", "policy", "reason", "config.optimizer"):
        assert pd.api.types.is_string_dtype(frame[column]), column
    assert isinstance(frame["timestamp"].dtype, pd.DatetimeTZDtype)
    assert set(frame["status"]) == {"ok", "skipped", "timeout"}
    # Numbers work as numbers: the groupby a notebook does first.
    ok = frame[(frame["status"] == "ok") & (frame["workload"] == "mnist_dense")]
    medians = ok.groupby("policy")["step_time.median_s"].median()
    assert medians["mixed_bfloat16"] < medians["float32"] < medians["mixed_float16"]


def test_cells_without_measurements_have_empty_columns_not_missing_ones(cpu_dir: Path) -> None:
    frame = load(cpu_dir).set_index("cell_id")
    skipped = frame.loc["torch/mnist_dense/tf32/r0"]
    assert skipped["status"] == "skipped" and "TF32" in skipped["reason"]
    assert pd.isna(skipped["step_time.median_s"]) and pd.isna(skipped["step_time.count"])
    assert pd.isna(skipped["data.name"]) and pd.isna(skipped["end_to_end.samples_per_s"])
    assert skipped["accuracy.train_loss_per_epoch"] == []
    timeout = frame.loc["tensorflow/cifar10_cnn/mixed_float16/r0"]
    assert timeout["status"] == "timeout" and timeout["data.name"] == "synthetic-cifar10"
    assert pd.isna(timeout["throughput_samples_per_s"])


def test_a_skipped_only_run_still_has_every_column(tmp_path: Path, cpu_dir: Path) -> None:
    skipped = [r for r in cpu_run() if r.status is Status.SKIPPED]
    frame = load(write_run(tmp_path / "skipped", skipped))
    assert set(frame["status"]) == {"skipped"}
    full = load(cpu_dir)
    fixed = [c for c in full.columns if not c.startswith(("config.", "precision.", "threads."))]
    assert [c for c in frame.columns if c in fixed] == fixed
    assert frame["step_time.median_s"].dtype == "float64"  # typed, though all empty


def test_paths_a_str_a_results_file_or_several(cpu_dir: Path, gpu_dir: Path) -> None:
    assert load(str(cpu_dir)).shape == load(cpu_dir / "results.jsonl").shape
    both = load([cpu_dir, str(gpu_dir / "results.jsonl")])
    assert len(both) == 16 + 4
    assert list(both["run_id"].unique()) == ["20260301-101500-cpu", "20260302-090000-a100"]
    # The same run twice (a directory and its file) is read once.
    assert len(load([cpu_dir, cpu_dir / "results.jsonl"])) == 16
    # Columns of one run's config that the other lacks are empty there.
    assert both["config.milestones"].notna().sum() == 4


def test_gpu_fields_and_free_form_objects(gpu_dir: Path) -> None:
    frame = load(gpu_dir)
    row = frame.iloc[0]
    assert row["device.capability"] == "8.0"  # text, not the number 8
    assert row["device.index"] == 0
    assert row["memory.device_peak_allocated_bytes"] == 900 * MIB
    assert row["mfu"] == pytest.approx(0.8 / 19.5)
    assert json.loads(row["data.sha256"]) == {"mnist.npz": "ab" * 32}
    assert json.loads(row["config.milestones"]) == [3, 6]
    assert str(frame["threads.intra_op"].dtype) == "Int64"
    assert row["threads.omp_num_threads"] == "8"  # an environment variable: text
    assert row["accuracy.train_loss_per_epoch"] == [0.61, 0.32, 0.21]


def test_raw_steps_on_request_one_row_per_step_with_explode(cpu_dir: Path) -> None:
    frame = load(cpu_dir, raw=True)
    assert "step_time.raw_s" in frame.columns
    records = {r.cell_id: r for r in read_records(cpu_dir)}
    row = frame.set_index("cell_id").loc["torch/mnist_dense/float32/r0"]
    assert row["step_time.raw_s"] == records["torch/mnist_dense/float32/r0"].step_time.raw_s
    steps = frame[frame["status"] == "ok"].explode("step_time.raw_s")
    assert len(steps) == sum(r.step_time.count for r in records.values() if r.step_time)
    assert pd.to_numeric(steps["step_time.raw_s"]).gt(0).all()


def test_bad_files_raise_the_readers_schema_error(tmp_path: Path, cpu_dir: Path) -> None:
    bad = tmp_path / "bad" / "results.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"schema_version": 99}\n')
    with pytest.raises(SchemaError, match="unknown schema version 99"):
        load(bad.parent)
    with pytest.raises(SchemaError, match="no such results file"):
        load(tmp_path / "missing")
    # Two different records claiming one cell and repeat: refused, as compare refuses them.
    other = cpu_run()
    other[0].wall_s = 99.0
    twin = write_run(tmp_path / "twin", other)
    with pytest.raises(SchemaError, match="two different records"):
        load([cpu_dir, twin])


def _csv_matches_frame(run: Path) -> None:
    frame = load(run)
    text_columns = [c for c in frame.columns if pd.api.types.is_string_dtype(frame[c])]
    csv = pd.read_csv(run / "results.csv", dtype=dict.fromkeys(text_columns, str))
    # Numbers are compared as the file's text, parsed by Python: some pandas versions'
    # read_csv parses 0.013099999999999999 as 0.0130999999999999 (one unit in the last
    # place), whatever float_precision says; the file itself holds the exact value.
    text = pd.read_csv(run / "results.csv", dtype=str, keep_default_na=False)
    assert list(csv.columns) == list(frame.columns)
    assert len(csv) == len(frame)
    for column in frame.columns:
        mine, theirs = frame[column], csv[column]
        if column == "timestamp":
            theirs = pd.to_datetime(theirs, utc=True, format="ISO8601")
            assert (mine == theirs).all()
            continue
        for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            where = f"{column}, row {index}"
            if isinstance(a, list):
                assert json.loads(b) == a, where
            elif pd.isna(a):
                assert pd.isna(b), where
            elif isinstance(a, str):
                assert a == b, where
            elif isinstance(a, (bool,)) or str(mine.dtype) == "boolean":
                assert bool(b) is bool(a) and b in (True, False), where
            else:
                exact = float(text[column][index])
                assert float(b) == pytest.approx(float(a), rel=1e-15), where
                assert exact == float(a) and not math.isnan(exact), where


def test_results_csv_holds_the_frame_column_for_column(cpu_dir: Path, gpu_dir: Path) -> None:
    _csv_matches_frame(cpu_dir)
    _csv_matches_frame(gpu_dir)


def test_results_csv_of_a_mixed_run(tmp_path: Path) -> None:
    """Old (v1) and new records, skipped and failed cells, two machines in one file."""
    records = [*cpu_run(v1=True, run_id="old"), *_gpu_records()]
    run = write_run(tmp_path / "mixed", records)
    write_csv(run, read_records(run))
    _csv_matches_frame(run)


def test_import_stays_pandas_free_and_the_one_liner_works(cpu_dir: Path) -> None:
    check = "import sys, mpbench.results, mpbench.cli; print('pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
    one_liner = f"import mpbench.results as r; print(r.load({str(cpu_dir)!r}).shape)"
    done = subprocess.run([sys.executable, "-c", one_liner], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(load(cpu_dir).shape)


# How each cell of the variant run ran beside its policy, as compare's row names write it.
VARIANTS = {
    "torch/mnist_dense/float32/r0": None,
    "torch/mnist_dense/mixed_float16/r0": None,
    "torch/mnist_dense/mixed_bfloat16/r0": None,
    "torch/mnist_dense/float32@acc2/r0": "[accumulate=2]",
    "torch/mnist_dense/mixed_bfloat16@acc2/r0": "[accumulate=2]",
    "torch/mnist_dense/float32@compiled/r0": "[compile]",
    "torch/mnist_dense/mixed_bfloat16@compiled/r0": "[compile]",
    "torch/mnist_dense/mixed_float16@ls1024/r0": "[loss scale 1024]",
    "torch/mnist_dense/mixed_bfloat16@bs2/r0": "@256",
    "torch/mnist_dense/mixed_float16@ls1e+30/r0": "[loss scale 1e+30]",
    "torch/mnist_dense/mixed_float16@ls1e+30~fallback-mixed_bfloat16/r0": "(fallback)",
}


def test_the_variant_column_tells_recipe_and_fallback_cells_from_the_plain_ones(
    tmp_path: Path,
) -> None:
    from mpbench.compare import CompareOptions, build_report
    from mpbench.compare.run import render

    run = write_run(tmp_path / "variants", variant_run())
    write_csv(run, read_records(run))
    frame = load(run)
    assert list(frame.columns[frame.columns.get_loc("policy") :][:2]) == ["policy", "variant"]
    found = frame.set_index("cell_id")["variant"]
    assert {k: None if pd.isna(v) else v for k, v in found.items()} == VARIANTS
    assert pd.api.types.is_string_dtype(frame["variant"])
    _csv_matches_frame(run)  # results.csv holds the same column

    # The same string compare's JSON gives each cell (and its row name ends with).
    report = build_report(read_records(run), CompareOptions())
    cells = json.loads(render(report, "json", terminal=False))["cells"]
    by_cell = {}
    for cell in cells:
        by_cell[(cell["policy"], cell["variant"])] = cell
    for _, row in frame.iterrows():
        variant = None if pd.isna(row["variant"]) else row["variant"]
        assert (row["policy"], variant) in by_cell, (row["cell_id"], variant)

    # Grouped by it, the plain bf16 cell is no longer averaged with its variants.
    ok = frame[frame["status"] == "ok"].copy()
    ok["variant"] = ok["variant"].fillna("")
    medians = ok.groupby(["policy", "variant"])["step_time.median_s"].median()
    assert medians["mixed_bfloat16", ""] == pytest.approx(0.98e-3)
    assert medians["mixed_bfloat16", "@256"] == pytest.approx(1.92e-3)
