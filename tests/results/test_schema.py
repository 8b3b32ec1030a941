import json
import statistics

import pytest

from mpbench.results import (
    SCHEMA_VERSION,
    CellRecord,
    DataInfo,
    DeviceInfo,
    LossScaleStats,
    SchemaError,
    Status,
    StepTimeStats,
    append_record,
    load_record,
    read_records,
    write_csv,
)


def make_record(cell="torch/mnist_dense/float32/r0", status=Status.OK) -> CellRecord:
    return CellRecord(
        run_id="run-1",
        cell_id=cell,
        timestamp="2026-11-21T12:00:00+00:00",
        framework="torch",
        framework_version="torch 2.13.0",
        workload="mnist_dense",
        policy="float32",
        repeat=0,
        device=DeviceInfo("cpu", "AMD EPYC"),
        status=status,
        config={"batch_size": 1024},
        precision={"tf32_enabled": False},
        data=DataInfo("synthetic-mnist", "synthetic", train_size=60000, test_size=10000),
        step_time=StepTimeStats.from_samples([0.01, 0.03, 0.02, 0.04], warmup_steps=2),
        loss_scale=LossScaleStats(32768.0, 2),
    )


DRIFT = ("first_half_median_s", "second_half_median_s", "drifting")


def test_step_stats_derive_from_the_raw_samples():
    stats = StepTimeStats.from_samples([0.4, 0.1, 0.3, 0.2, 0.5], warmup_steps=3)
    assert stats.count == 5 and stats.warmup_steps == 3
    assert stats.median_s == pytest.approx(0.3)
    assert stats.mean_s == pytest.approx(0.3)
    assert stats.p10_s == pytest.approx(0.14)  # numpy's linear interpolation
    assert stats.p90_s == pytest.approx(0.46)
    assert stats.stdev_s == pytest.approx(statistics.stdev([0.4, 0.1, 0.3, 0.2, 0.5]))
    assert StepTimeStats.from_samples([], 5).median_s is None


def test_records_round_trip_through_jsonl(tmp_path):
    first, second = make_record(), make_record("torch/mnist_dense/tf32/r0", Status.SKIPPED)
    append_record(tmp_path, first)
    append_record(tmp_path, second)
    back = read_records(tmp_path)
    assert [r.to_dict() for r in back] == [first.to_dict(), second.to_dict()]
    assert back[1].status is Status.SKIPPED


def test_csv_is_flat_and_loads_in_pandas(tmp_path):
    import pandas as pd

    write_csv(tmp_path, [make_record()])
    frame = pd.read_csv(tmp_path / "results.csv")
    assert frame.loc[0, "step_time.median_s"] == pytest.approx(0.025)
    assert frame.loc[0, "loss_scale.final_scale"] == 32768.0
    assert "step_time.raw_s" not in frame.columns


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema_version": 99}\n', "unknown schema version 99"),
        ("{not json\n", "not valid JSON"),
        ("", "contains no records"),
    ],
)
def test_bad_files_are_rejected_with_a_clear_message(tmp_path, content, message):
    path = tmp_path / "results.jsonl"
    path.write_text(content)
    with pytest.raises(SchemaError, match=message):
        read_records(path)


def test_unknown_fields_and_missing_files_are_rejected(tmp_path):
    raw = make_record().to_dict()
    raw["surprise"] = 1
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    with pytest.raises(SchemaError, match="unknown fields"):
        read_records(tmp_path)
    with pytest.raises(SchemaError, match="no such results file"):
        read_records(tmp_path / "missing")
    assert SCHEMA_VERSION == 14


def test_records_of_versions_1_to_5_read_without_the_contention_fields(tmp_path):
    for version in (1, 2, 3, 4, 5):
        raw = make_record().to_dict()
        del raw["contention"], raw["implausible"]
        if version < 5:
            del raw["distributed"]
        if version < 2:  # drift came with version 2
            raw["step_time"].update(dict.fromkeys(DRIFT))
        raw["schema_version"] = version
        (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
        (record,) = read_records(tmp_path)
        assert record.schema_version == version
        assert record.contention is None and record.implausible == {}


def test_a_version_6_record_round_trips_its_contention(tmp_path):
    from mpbench.results import ContentionStats

    original = make_record()
    original.contention = ContentionStats(
        wall_s=2.0,
        cpus=2,
        busy_cores=2.0,
        own_cores=1.0,
        other_cores=1.0,
        steal_pct=0.0,
        contended=True,
        why=["other processes used 1.00 of 2 cores"],
    )
    original.implausible = {"mfu_measured": "above the measured peak"}
    (tmp_path / "results.jsonl").write_text(json.dumps(original.to_dict()) + "\n")
    (record,) = read_records(tmp_path)
    assert record.contention == original.contention
    assert record.implausible == original.implausible
    raw = original.to_dict()
    raw["contention"]["other_cores"] = -1
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    with pytest.raises(SchemaError, match=r"contention\.other_cores"):
        read_records(tmp_path)


def test_a_version_4_record_reads_without_the_distributed_field(tmp_path):
    raw = make_record().to_dict()
    del raw["distributed"]
    raw["schema_version"] = 4
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    (record,) = read_records(tmp_path)
    assert record.distributed is None


def test_a_distributed_record_round_trips_and_its_bounds_are_checked(tmp_path):
    from mpbench.results import DistributedStats

    record = make_record()
    record.distributed = DistributedStats(
        world_size=2,
        nodes=1,
        nproc_per_node=2,
        launcher="torchrun",
        backend="gloo",
        grad_comm="bf16",
        devices="shared",
        rank_step_median_s=[0.01, 0.012],
        straggler_ratio=1.09,
        allreduce_s_per_step=0.002,
        unavailable={"allreduce_overlap_s_per_step": "why"},
    )
    record.config.update(world_size=2, nproc_per_node=2, nnodes=1, grad_comm="bf16")
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(record.to_dict()) + "\n")
    (back,) = read_records(tmp_path)
    assert back.distributed == record.distributed
    for field, value, message in (
        ("straggler_ratio", 0.5, "distributed.straggler_ratio"),
        ("world_size", 0, "distributed.world_size"),
        ("rank_step_median_s", [0.01, 0.0], "distributed.rank_step_median_s"),
    ):
        raw = record.to_dict()
        raw["distributed"][field] = value
        path.write_text(json.dumps(raw) + "\n")
        with pytest.raises(SchemaError, match=message):
            read_records(tmp_path)


def test_a_version_3_record_reads_without_the_telemetry_fields(tmp_path):
    raw = make_record().to_dict()
    for name in ("telemetry", "energy", "divergence", "fallback_of", "distributed"):
        del raw[name]
    raw["schema_version"] = 3
    (tmp_path / "results.jsonl").write_text(json.dumps(raw) + "\n")
    (record,) = read_records(tmp_path)
    assert (record.telemetry, record.energy, record.divergence, record.fallback_of) == (None,) * 4


def _with_nvml_memory(version: int, name: str) -> dict:
    raw = make_record().to_dict()
    raw["telemetry"] = {
        "side_file": None,
        "numerics_points": 0,
        "numerics_stride": 1,
        "steps": 4,
        "skipped_steps": 0,
        "nonfinite_steps": 0,
        name: 512 * 2**20,
    }
    raw["schema_version"] = version
    return raw


def test_nvml_device_memory_is_read_under_its_v7_name_from_older_records(tmp_path):
    """Versions 1-6 called NVML's device-wide `used` peak_gpu_memory_bytes, a name that reads
    like the allocator's peak; version 7 names it for what it is, and reads the old name."""
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_with_nvml_memory(6, "peak_gpu_memory_bytes")) + "\n")
    (record,) = read_records(tmp_path)
    assert record.schema_version == 6
    assert record.telemetry.peak_nvml_device_used_bytes == 512 * 2**20
    assert "peak_gpu_memory_bytes" not in json.dumps(record.to_dict())
    path.write_text(json.dumps(_with_nvml_memory(7, "peak_nvml_device_used_bytes")) + "\n")
    (record,) = read_records(tmp_path)
    assert record.telemetry.peak_nvml_device_used_bytes == 512 * 2**20


@pytest.mark.parametrize(
    ("version", "name", "message"),
    [
        (7, "peak_gpu_memory_bytes", "unknown field"),
        (6, "peak_nvml_device_used_bytes", "the name schema version 7 gave"),
    ],
)
def test_nvml_device_memory_under_the_other_versions_name_is_refused(
    tmp_path, version, name, message
):
    (tmp_path / "results.jsonl").write_text(json.dumps(_with_nvml_memory(version, name)) + "\n")
    with pytest.raises(SchemaError, match=message):
        read_records(tmp_path)


def test_a_version_8_record_says_how_its_cell_started_and_a_version_7_one_cannot(tmp_path):
    from mpbench.results import StartupStats

    original = make_record()
    original.startup = StartupStats("fork server", 0.12)
    (tmp_path / "results.jsonl").write_text(json.dumps(original.to_dict()) + "\n")
    (record,) = read_records(tmp_path)
    assert record.startup == StartupStats("fork server", 0.12)
    older = {**original.to_dict(), "schema_version": 7}
    (tmp_path / "results.jsonl").write_text(json.dumps(older) + "\n")
    with pytest.raises(SchemaError, match="startup"):
        read_records(tmp_path)
    older["startup"] = None
    (tmp_path / "results.jsonl").write_text(json.dumps(older) + "\n")
    (record,) = read_records(tmp_path)
    assert record.startup is None and record.schema_version == 7


def test_a_cell_run_again_after_its_fork_server_died_says_why_and_an_older_record_reads(
    tmp_path,
):
    from mpbench.results import StartupStats

    why = "the torch fork server (pid 7) was killed by SIGKILL while cell 9 ran"
    original = make_record()
    original.startup = StartupStats("new process", 3.5, why)
    (tmp_path / "results.jsonl").write_text(json.dumps(original.to_dict()) + "\n")
    (record,) = read_records(tmp_path)
    assert record.startup.rerun == why
    # A version 8 record written before `rerun` existed: a cell that ran once.
    older = original.to_dict()
    del older["startup"]["rerun"]
    (tmp_path / "results.jsonl").write_text(json.dumps(older) + "\n")
    (record,) = read_records(tmp_path)
    assert record.startup == StartupStats("new process", 3.5) and record.startup.rerun is None
    # A version 9 record cannot say it: the field came with version 10.
    claimed = {**original.to_dict(), "schema_version": 9}
    (tmp_path / "results.jsonl").write_text(json.dumps(claimed) + "\n")
    with pytest.raises(SchemaError, match="startup.rerun"):
        read_records(tmp_path)


def test_version_13_fields_round_trip_and_an_older_record_may_not_hold_them():
    original = make_record()
    original.params, original.params_non_trainable = 408_938, 14_080
    assert load_record(json.loads(json.dumps(original.to_dict()))) == original
    older = {**original.to_dict(), "schema_version": 12}
    with pytest.raises(SchemaError, match="params_non_trainable is a field of schema version 13"):
        load_record(older)
    older["params_non_trainable"] = None
    assert load_record(older).params_non_trainable is None
