"""Data-parallel cells in compare (docs/compare.md "Scaling"): group labels with the world
size, the scaling table in every format, the efficiency computed from the repeats with the
project's one formula, and the world-size gate keys."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from builders import TF32_SKIP, cpu_run, record, write_run
from cli import run_mpbench
from compare_helpers import run_inprocess

from mpbench.cli import main
from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render.tables import group_names, scaling_table
from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import summarize_all
from mpbench.compare.summary.estimate import REPEATS, WITHIN_RUN
from mpbench.compare.summary.labels import Labeler
from mpbench.compare.summary.scaling import scaling_rows
from mpbench.errors import InvalidInput
from mpbench.parsers import parse_min_scaling_efficiency, parse_min_speedup
from mpbench.results import DistributedStats, Status
from mpbench.results.scaling import weak_scaling_efficiency

BATCH = 128  # each replica's batch (weak scaling)
PLUMBING = "ranks share one CPU: these figures measure plumbing, not scaling"


def cell(
    framework: str,
    policy: str,
    world: int,
    median_ms: float | None,
    *,
    comm: str = "fp32",
    repeat: int = 0,
    status: Status = Status.OK,
    reason: str | None = None,
    devices: str = "shared",
    config: dict | None = None,
):
    """A record as `mpbench run --nproc 1,N` writes it: at world size N the config gains the
    layout, the cell id its mark, the throughput is global and `distributed` is filled."""
    overrides = dict(config or {})
    recipe = f"@acc{overrides['accumulate']}" if "accumulate" in overrides else ""
    if world > 1:
        overrides.update(world_size=world, nproc_per_node=world, nnodes=1)
        recipe += f"@np{world}"
        if framework == "torch":
            overrides["grad_comm"] = comm
            recipe += f"@comm-{comm}" if comm != "fp32" else ""
    rec = record(
        framework,
        "mnist_dense",
        policy,
        median_ms=median_ms if status is Status.OK else None,
        accuracy=0.97 if status is Status.OK else None,
        rss_mib=600,
        training_mib=40,
        config_overrides=overrides,
        recipe=recipe,
        repeat=repeat,
        status=status,
        reason=reason,
    )
    if world > 1 and status is Status.OK:
        rec.throughput_samples_per_s = world * BATCH / rec.step_time.median_s
        torch = framework == "torch"
        rec.distributed = DistributedStats(
            world_size=world,
            nodes=1,
            nproc_per_node=world,
            launcher="torchrun" if torch else "tf.distribute.MirroredStrategy",
            backend="gloo" if torch else "ReductionToOneDevice",
            grad_comm=comm,
            devices=devices,
            per_device_samples_per_s=rec.throughput_samples_per_s / world,
            rank_step_median_s=[median_ms / 1000, median_ms * 1.1 / 1000] if torch else [],
            straggler_ratio=1.1 if torch else None,
            allreduce_s_per_step=0.002 if torch else None,
            allreduce_share=0.002 / rec.step_time.median_s if torch else None,
            unavailable={} if torch else {"allreduce_s_per_step": "no all-reduce timer in TF"},
        )
    return rec


def two_worlds(comm: str = "bf16") -> list:
    """torch fp32/bf16 and TensorFlow fp32/bf16 at world sizes 1 and 2, one repeat each;
    TensorFlow bf16 at world size 2 failed. Efficiencies: torch fp32 0.8, bf16 0.625,
    TensorFlow fp32 0.5."""
    return [
        cell("torch", "float32", 1, 10.0),
        cell("torch", "mixed_bfloat16", 1, 5.0),
        cell("torch", "float32", 2, 12.5, comm=comm),
        cell("torch", "mixed_bfloat16", 2, 8.0, comm=comm),
        cell("tensorflow", "float32", 1, 10.0),
        cell("tensorflow", "mixed_bfloat16", 1, 6.0),
        cell("tensorflow", "float32", 2, 20.0),
        cell(
            "tensorflow",
            "mixed_bfloat16",
            2,
            None,
            status=Status.ERROR,
            reason="rank 1: RuntimeError: gloo connection reset",
        ),
    ]


# Efficiencies per repeat around 0.8: world-2 median = world-1 median / efficiency.
SPREAD = (0.78, 0.80, 0.82)


def repeated(efficiencies=SPREAD) -> list:
    records = []
    for repeat, eff in enumerate(efficiencies):
        records += [
            cell("torch", "float32", 1, 10.0, repeat=repeat),
            cell("torch", "float32", 2, 10.0 / eff, repeat=repeat),
        ]
    return records


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "dp", two_worlds())


def _section(records):
    (section,) = build_sections(summarize_all(records))
    return section


# --- labels ---------------------------------------------------------------------------------


def test_data_parallel_groups_are_named_by_world_size():
    section = _section(two_worlds())
    names = sorted(group_names(section, Labeler(g.key for g in section.groups)).values())
    assert names == ["tf", "tf ×2", "torch", "torch ×2 [comm bf16]"]
    labeler = Labeler(g.key for g in section.groups)
    cells = {labeler.cell(k) for k in summarize_all(two_worlds())}
    assert "torch/mnist_dense/float32" in cells  # world size 1: the label it always had
    assert "torch/mnist_dense/mixed_bfloat16 ×2 [comm bf16]" in cells
    assert "tensorflow/mnist_dense/mixed_bfloat16 ×2" in cells
    assert not any("world_size" in c or "null" in c for c in cells)


def test_fp32_all_reduce_is_just_the_world_size():
    section = _section(two_worlds(comm="fp32"))
    names = group_names(section, Labeler(g.key for g in section.groups))
    assert sorted(n for n in names.values() if n.startswith("torch")) == ["torch", "torch ×2"]


def test_world_size_one_groups_keep_their_place_before_the_data_parallel_ones():
    section = _section(two_worlds())
    assert [g.key.layout().world_size for g in section.groups] == [1, 2, 1, 2]


def test_another_config_keeps_its_name_at_every_world_size():
    acc = {"accumulate": 4, "effective_batch_size": 4 * BATCH}
    records = [
        *two_worlds()[:4],
        cell("torch", "float32", 1, 40.0, config=acc),
        cell("torch", "float32", 2, 50.0, config=acc, comm="bf16"),
    ]
    section = _section(records)
    names = group_names(section, Labeler(g.key for g in section.groups))
    by_layout = {}
    for key, name in names.items():
        by_layout.setdefault(key.single(), {})[key.layout().world_size] = name
    assert sorted(by_layout[k][1] for k in by_layout) == ["torch", "torch [accumulate=4]"]
    for worlds in by_layout.values():
        assert worlds[2] == f"{worlds[1]} ×2 [comm bf16]"


def test_a_skipped_cell_stays_at_its_own_world_size():
    records = [
        *two_worlds()[:4],
        cell("torch", "tf32", 1, None, status=Status.SKIPPED, reason=TF32_SKIP),
        cell("torch", "tf32", 2, None, status=Status.SKIPPED, reason=TF32_SKIP, comm="bf16"),
    ]
    section = _section(records)
    for group in section.groups:
        assert group.cells["tf32"].repeats == 1, group.key.layout()


# --- efficiency -----------------------------------------------------------------------------


def test_efficiency_of_one_repeat_is_the_formula_with_a_within_run_interval():
    rows = {
        (r.group.key.framework, r.row, r.world_size): r
        for r in scaling_rows(_section(two_worlds()))
    }
    torch2 = rows[("torch", "float32", 2)]
    expected = weak_scaling_efficiency(
        torch2.cell.records[0].throughput_samples_per_s,
        rows[("torch", "float32", 1)].cell.records[0].throughput_samples_per_s,
        2,
    )
    assert torch2.efficiency.value == pytest.approx(expected) == pytest.approx(0.8)
    assert torch2.efficiency.kind == WITHIN_RUN
    assert torch2.efficiency.low < 0.8 < torch2.efficiency.high
    assert rows[("torch", "mixed_bfloat16", 2)].efficiency.value == pytest.approx(0.625)
    assert rows[("tensorflow", "float32", 2)].efficiency.value == pytest.approx(0.5)
    assert rows[("torch", "float32", 1)].efficiency is None  # the reference itself
    failed = rows[("tensorflow", "mixed_bfloat16", 2)]
    assert failed.efficiency is None and failed.cell.status == "error"


def test_efficiency_over_repeats_pairs_repeats_of_the_same_run():
    rows = [r for r in scaling_rows(_section(repeated((0.7, 0.8, 0.9)))) if r.world_size == 2]
    (row,) = rows
    assert row.efficiency.kind == REPEATS and row.efficiency.n == 3
    geometric_mean = math.exp(sum(math.log(e) for e in (0.7, 0.8, 0.9)) / 3)
    assert row.efficiency.value == pytest.approx(geometric_mean)
    assert row.efficiency.low < geometric_mean < row.efficiency.high


def test_a_repeat_without_a_partner_is_left_out_and_said():
    records = [*repeated(), cell("torch", "float32", 2, 20.0, repeat=3)]
    (row,) = [r for r in scaling_rows(_section(records)) if r.world_size == 2]
    assert row.efficiency.n == 3  # the lone repeat 3 (efficiency 0.5) is not in it
    assert row.unpaired == [("20260301-101500-cpu", 3)]
    table = scaling_table(_section(records))
    assert any("leaves out r3 of 20260301-101500-cpu" in f for f in table.footnotes)


def test_no_scaling_table_without_data_parallel_cells():
    assert scaling_table(_section(two_worlds()[:2])) is None


# --- the table in every format -------------------------------------------------------------


def test_table_format(run_dir: Path):
    code, out = run_inprocess(run_dir)
    assert code == 0
    scaling = out[out.index("Scaling: mnist_dense") :]
    assert out.index("Verdict") < out.index("Scaling: mnist_dense")  # after the main table
    lines = {" ".join(line.split()[:3]): line for line in scaling.splitlines() if line.strip()}
    assert "80.0 %" in lines["torch fp32 2"]
    assert "shared" in lines["torch fp32 2"]
    assert "20,480" in lines["torch fp32 2"]  # global samples/s
    assert "10,240" in lines["torch fp32 2"]  # per device
    assert "ref" in lines["torch fp32 1"]
    assert "62.5 %" in lines["torch bf16 2"]
    assert "error" in lines["tf bf16 2"]
    assert "1.10×" in lines["torch bf16 2"]  # straggler
    assert PLUMBING in " ".join(scaling.split())
    assert "torch ×2 [comm bf16] bf16" in out  # the main table's row name


def test_markdown_format(run_dir: Path):
    _, out = run_inprocess(run_dir, format="markdown")
    assert "### Scaling: mnist_dense on cpu: AMD EPYC" in out
    assert "| torch fp32 | 2 | shared | 20,480 | 10,240 | 80.0 % (" in out
    assert "| tf bf16 | 2 | — | — | — | — |" in out  # a failed cell: dashes, never zeros
    assert PLUMBING in out


def test_json_format(run_dir: Path):
    _, out = run_inprocess(run_dir, format="json")
    data = json.loads(out)
    rows = {(r["cell"]): r for r in data["scaling"]}
    torch2 = rows["torch/mnist_dense/float32 ×2 [comm bf16]"]
    assert torch2["world_size"] == 2 and torch2["grad_comm"] == "bf16"
    assert torch2["devices"] == "shared" and torch2["note"] == PLUMBING
    assert torch2["throughput_samples_per_s"] == pytest.approx(20480)
    assert torch2["per_device_samples_per_s"] == pytest.approx(10240)
    assert torch2["scaling_efficiency"]["value"] == pytest.approx(0.8)
    assert torch2["scaling_efficiency"]["interval"]["kind"] == "within-run only"
    assert torch2["scaling_reference"] == "torch/mnist_dense/float32"
    assert torch2["allreduce_share"] == pytest.approx(0.16)
    assert torch2["straggler_ratio"] == pytest.approx(1.1)
    assert rows["torch/mnist_dense/float32"]["world_size"] == 1
    assert rows["torch/mnist_dense/float32"]["scaling_efficiency"] is None
    tf2 = rows["tensorflow/mnist_dense/float32 ×2"]
    assert tf2["allreduce_share"] is None and tf2["unavailable"]
    failed = rows["tensorflow/mnist_dense/mixed_bfloat16 ×2"]
    assert failed["status"] == "error" and failed["scaling_efficiency"] is None
    assert len(data["scaling"]) == 8


def test_csv_format(run_dir: Path):
    _, out = run_inprocess(run_dir, format="csv")
    rows = {r["cell"]: r for r in csv.DictReader(io.StringIO(out))}
    torch2 = rows["torch/mnist_dense/mixed_bfloat16 ×2 [comm bf16]"]
    assert torch2["world_size"] == "2" and torch2["grad_comm"] == "bf16"
    assert float(torch2["scaling_efficiency"]) == pytest.approx(0.625)
    assert torch2["scaling_efficiency_interval"] == "within-run only"
    assert float(torch2["per_device_samples_per_s"]) == pytest.approx(BATCH / 0.008)
    assert rows["torch/mnist_dense/float32"]["scaling_efficiency"] == ""


def test_formats_without_data_parallel_cells_are_unchanged(cpu_run_dir: Path):
    _, out = run_inprocess(cpu_run_dir, format="json")
    assert json.loads(out)["scaling"] == []
    _, out = run_inprocess(cpu_run_dir, format="csv")
    assert "world_size" not in out.splitlines()[0]
    _, out = run_inprocess(cpu_run_dir)
    assert "Scaling:" not in out


# --- gates ----------------------------------------------------------------------------------


def _gates(records, **options):
    report = build_report(records, CompareOptions(**options))
    return {(r.gate, r.cell): r for r in report.results}, report


@pytest.mark.parametrize(
    ("limit", "passed", "inconclusive"),
    [(0.7, True, False), (0.81, True, True), (0.9, False, False)],
)
def test_min_scaling_efficiency_judges_the_interval(limit, passed, inconclusive):
    results, _ = _gates(repeated(), min_scaling_efficiency={"2": limit})
    (result,) = results.values()
    assert result.gate == "min-scaling-efficiency"
    assert result.cell == "torch/mnist_dense/float32 ×2"
    assert (result.passed, result.inconclusive) == (passed, inconclusive)
    assert result.value == pytest.approx(math.exp(sum(math.log(e) for e in SPREAD) / 3))
    assert "over 3 repeats" in result.message


def test_require_conclusive_fails_an_inconclusive_efficiency():
    results, report = _gates(
        repeated(), min_scaling_efficiency={"2": 0.81}, require_conclusive=True
    )
    (result,) = results.values()
    assert result.inconclusive and not result.passed and report.exit_code == 1


def test_min_scaling_efficiency_fails_a_failed_cell_and_says_plumbing():
    results, _ = _gates(two_worlds(), min_scaling_efficiency={"2": 0.4})
    failed = results[("min-scaling-efficiency", "tensorflow/mnist_dense/mixed_bfloat16 ×2")]
    assert not failed.passed and "did not finish: error" in failed.message
    ok = results[("min-scaling-efficiency", "torch/mnist_dense/float32 ×2 [comm bf16]")]
    assert ok.passed and PLUMBING in ok.message
    assert len(results) == 4  # every row at world size 2, none at world size 1


def test_min_scaling_efficiency_of_one_policy():
    results, _ = _gates(two_worlds(), min_scaling_efficiency={"mixed_bfloat16@2": 0.7})
    assert set(results) == {
        ("min-scaling-efficiency", "torch/mnist_dense/mixed_bfloat16 ×2 [comm bf16]"),
        ("min-scaling-efficiency", "tensorflow/mnist_dense/mixed_bfloat16 ×2"),
    }
    assert not any(r.passed for r in results.values())  # 0.625 (within-run interval) and error


def test_a_failed_reference_fails_the_efficiency():
    records = [r for r in two_worlds() if r.cell_id != "torch/mnist_dense/float32/r0"]
    records.append(cell("torch", "float32", 1, None, status=Status.OOM, reason="out of memory"))
    results, _ = _gates(records, min_scaling_efficiency={"float32@2": 0.1})
    result = results[("min-scaling-efficiency", "torch/mnist_dense/float32 ×2 [comm bf16]")]
    assert not result.passed and "world-size-1 reference did not finish: oom" in result.message


def _speedup_records() -> list:
    """bf16 is 2× float32 at world size 1, 1.1× at world size 2."""
    return [
        cell("torch", "float32", 1, 10.0),
        cell("torch", "mixed_bfloat16", 1, 5.0),
        cell("torch", "float32", 2, 11.0),
        cell("torch", "mixed_bfloat16", 2, 10.0),
    ]


@pytest.mark.parametrize(
    ("key", "cells", "passed"),
    [
        ("mixed_bfloat16@2", {"torch/mnist_dense/mixed_bfloat16 ×2"}, False),
        ("mixed_bfloat16@1", {"torch/mnist_dense/mixed_bfloat16"}, True),
        (
            "mixed_bfloat16",
            {"torch/mnist_dense/mixed_bfloat16", "torch/mnist_dense/mixed_bfloat16 ×2"},
            None,
        ),
    ],
)
def test_min_speedup_at_one_world_size(key, cells, passed):
    results, _ = _gates(_speedup_records(), min_speedup={key: 1.5})
    assert {c for _, c in results} == cells
    if passed is not None:
        assert all(r.passed is passed for r in results.values())
    else:
        assert [r.passed for r in results.values()] == [True, False]


def test_a_world_size_nobody_ran_is_nothing_comparable():
    with pytest.raises(InvalidInput, match="at world size 4"):
        build_report(_speedup_records(), CompareOptions(min_speedup={"mixed_bfloat16@4": 1.2}))
    with pytest.raises(InvalidInput, match="nothing comparable"):
        build_report(_speedup_records(), CompareOptions(min_scaling_efficiency={"4": 0.8}))
    with pytest.raises(InvalidInput, match="nothing comparable"):
        build_report(cpu_run(), CompareOptions(min_scaling_efficiency={"2": 0.8}))


def test_gate_keys_parse():
    assert parse_min_speedup(["bf16@2=1.2", "fp16=1.1x"]) == {
        "mixed_bfloat16@2": 1.2,
        "mixed_float16": 1.1,
    }
    assert parse_min_scaling_efficiency(["2=0.8", "bf16@4=70%", "fp32@2=1"]) == {
        "2": 0.8,
        "mixed_bfloat16@4": 0.7,
        "float32@2": 1.0,
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--min-speedup", "bf16@x=1.2"], "bad world size 'x'"),
        (["--min-speedup", "bf16@0=1.2"], "bad world size '0'"),
        (["--min-speedup", "bf16@=1.2"], "bad world size ''"),
        (["--min-speedup", "fp32@2=1.2"], "against float32 itself"),
        (["--min-scaling-efficiency", "1=0.8"], "world size 1 is the reference"),
        (["--min-scaling-efficiency", "two=0.8"], "bad world size 'two'"),
        (["--min-scaling-efficiency", "2=80"], "at most 1; write a fraction like 0.8 or"),
        (["--min-scaling-efficiency", "2=0"], "must be positive"),
        (["--min-scaling-efficiency", "2"], "expected WORLD_SIZE=EFFICIENCY"),
        (["--min-scaling-efficiency", "all@2=0.8"], "name one policy"),
        (["--min-scaling-efficiency", "4=0.8"], "nothing comparable"),
    ],
)
def test_bad_gate_keys_exit_2_with_one_line(run_dir, capsys, args, message):
    assert main(["compare", str(run_dir), *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("mpbench: error: ") and message in err[0], err


def test_the_cli_gates_scaling(run_dir: Path):
    failing = run_mpbench(
        "compare", run_dir, "--min-scaling-efficiency", "2=75%", "--format", "json"
    )
    assert failing.returncode == 1, failing.stderr
    assert "FAIL min-scaling-efficiency torch/mnist_dense/mixed_bfloat16 ×2" in failing.stderr
    assert json.loads(failing.stdout)["thresholds"]["min_scaling_efficiency"] == {"2": 0.75}
    bad = run_mpbench("compare", run_dir, "--min-speedup", "bf16@two=1.2")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "bad world size" in bad.stderr
