"""Telemetry in compare (schema v4): utilisation, power and energy columns from the records,
and the per-step loss and loss-scale panels of `--plot` from the side files, which a missing
or malformed file never stops (a note names it)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from builders import record, write_run
from compare_helpers import run_inprocess

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.run import render
from mpbench.results import (
    CellRecord,
    DivergenceInfo,
    EnergyStats,
    Status,
    TelemetryStats,
    read_records,
)
from mpbench.results.sidefile import NUMERICS_TOTALS as TOTALS
from mpbench.results.sidefile import write_side_file
from mpbench.results.sources import read_sources

RUN_ID = "20260301-101500-cpu"
NO_COUNTER = "no energy counter on this machine"


def _numerics(steps: int, scale: float | None, diverge_at: int | None = None) -> dict:
    last = diverge_at or steps
    step = list(range(1, last + 1))
    loss = [2.3 / (1 + 0.05 * s) for s in step]
    if diverge_at:
        loss[-1] = None  # non-finite at the end
    scales = [None if scale is None else scale / (2 if s > 10 else 1) for s in step]
    skipped = [None if scale is None else s in (5, 11) for s in step]
    totals = dict.fromkeys(TOTALS, 0)
    totals.update(first_nonfinite_step=None, last_step=last, min_loss_scale=None)
    return {
        "stride": 1,
        "columns": {
            "step": step,
            "loss": loss,
            "loss_scale": scales,
            "skipped": skipped,
            "grad_norm": [1.0] * last,
            "nonfinite_grads": [0] * last,
        },
        "totals": totals,
    }


def _device(cpu: float) -> dict:
    return {
        "interval_s": 0.25,
        "series": {"t_s": [0.25, 0.5], "cpu_util_pct": [cpu, cpu], "rss_bytes": [1e8, 1e8]},
        "unavailable": {},
    }


def _telemetry_run(run_dir: Path, energy: bool = True, diverge: bool = False) -> list[CellRecord]:
    """torch/mnist_dense fp32, fp16 (loss scaled; diverged if asked) and bf16, side files
    written beside the records as `mpbench run` does."""
    records = []
    policies = {"float32": 2.4, "mixed_float16": 13.1, "mixed_bfloat16": 0.98}
    for index, (policy, ms) in enumerate(policies.items()):
        fp16 = policy == "mixed_float16"
        status = Status.DIVERGED if fp16 and diverge else Status.OK
        reason = "non-finite loss" if status != Status.OK else None
        rec = record("torch", "mnist_dense", policy, median_ms=ms, accuracy=0.97, rss_mib=600,
                     training_mib=40, loss_scale=(32768.0, 2) if fp16 else None,
                     status=status, reason=reason)  # fmt: skip
        numerics = _numerics(30, 65536.0 if fp16 else None, 20 if status != Status.OK else None)
        if status is Status.DIVERGED:
            rec.divergence = DivergenceInfo("non_finite_loss", 20, {"loss": 1e9})
        side = write_side_file(run_dir, RUN_ID, rec.cell_id, rec.repeat, numerics, _device(100))
        rec.telemetry = TelemetryStats(
            side_file=side, numerics_points=30, numerics_stride=1, steps=30, skipped_steps=0,
            nonfinite_steps=0, samples=2, interval_s=0.25, mean_cpu_util_pct=150.0 + index,
            mean_gpu_util_pct=None, mean_power_w=40.0 + index if energy else None,
        )  # fmt: skip
        rec.energy = (
            EnergyStats(1.5, 0.0125 * (index + 1), "RAPL package zones (powercap)", None, 2.0)
            if energy
            else EnergyStats(None, None, None, NO_COUNTER, 2.0)
        )
        records.append(rec)
    write_run(run_dir, records)
    return read_records(run_dir)


def _plot_report(run_dir: Path):
    """The report compare draws, its records and run directories read as compare reads them."""
    sources = read_sources([run_dir])
    return build_report(sources.records, CompareOptions(), run_dirs=sources.directories)


# --- columns ---------------------------------------------------------------------------------


def test_table_json_and_csv_carry_utilisation_power_and_energy(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _telemetry_run(run)
    report = build_report(read_records(run), CompareOptions())
    table = render(report, "table", terminal=False)
    header = next(line for line in table.splitlines() if "step ms" in line)
    assert "CPU util" in header and "power W" in header and "mJ/sample" in header
    assert "GPU util" not in header  # no cell measured one
    assert "RAPL package zones (powercap)" in table  # the energy source, in the notes
    fp32 = next(line for line in table.splitlines() if "torch fp32" in line)
    assert "150 %" in fp32 and "12.5" in fp32 and "40.0" in fp32

    cells = json.loads(render(report, "json", terminal=False))["cells"]
    bf16 = next(c for c in cells if c["policy"] == "mixed_bfloat16")
    assert bf16["mean_cpu_util_pct"] == 152.0
    assert bf16["mean_gpu_util_pct"] is None
    assert bf16["mean_power_w"] == 42.0
    assert bf16["energy_per_sample_mj"] == pytest.approx(37.5)
    assert bf16["energy_source"] == "RAPL package zones (powercap)"
    assert bf16["energy_reason"] is None

    rows = list(csv.DictReader(io.StringIO(render(report, "csv", terminal=False))))
    row = next(r for r in rows if r["policy"] == "float32")
    assert float(row["energy_per_sample_mj"]) == pytest.approx(12.5)
    assert row["mean_gpu_util_pct"] == "" and row["energy_reason"] == ""


def test_no_energy_says_why_in_json_and_adds_no_column(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _telemetry_run(run, energy=False)
    report = build_report(read_records(run), CompareOptions())
    header = next(
        line for line in render(report, "table", terminal=False).splitlines() if "step ms" in line
    )
    assert "mJ/sample" not in header and "power W" not in header and "CPU util" in header
    cell = json.loads(render(report, "json", terminal=False))["cells"][0]
    assert cell["energy_per_sample_mj"] is None and cell["energy_reason"] == NO_COUNTER
    row = next(csv.DictReader(io.StringIO(render(report, "csv", terminal=False))))
    assert row["energy_reason"] == NO_COUNTER


def test_no_energy_anywhere_is_still_explained_under_the_table(tmp_path: Path) -> None:
    """docs/compare.md: a note under the table says why a cell has no energy, also when no
    cell has any (then there is no mJ/sample column to put a dash in)."""
    run = tmp_path / "run"
    _telemetry_run(run, energy=False)
    report = build_report(read_records(run), CompareOptions())
    for fmt in ("table", "markdown"):
        lines = render(report, fmt, terminal=False).splitlines()
        (note,) = [line for line in lines if NO_COUNTER in line]
        assert note.strip().startswith("mJ/sample: not measured"), fmt


def test_old_records_have_null_telemetry_fields_and_no_columns(tmp_path: Path) -> None:
    records = [record("torch", "mnist_dense", "float32", median_ms=2.4, accuracy=0.97)]
    report = build_report(records, CompareOptions())
    header = next(
        line for line in render(report, "table", terminal=False).splitlines() if "step ms" in line
    )
    assert "CPU util" not in header and "mJ/sample" not in header
    cell = json.loads(render(report, "json", terminal=False))["cells"][0]
    keys = ("mean_cpu_util_pct", "mean_power_w", "energy_per_sample_mj", "energy_reason")
    assert all(cell[k] is None for k in keys)


# --- plot ------------------------------------------------------------------------------------

matplotlib = pytest.importorskip("matplotlib")


def _by_title(fig, text: str) -> list:
    return [ax for ax in fig.axes if text in ax.get_title()]


def _legend_lines(ax) -> list:
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_plot_draws_per_step_loss_and_the_fp16_loss_scale(tmp_path: Path) -> None:
    from mpbench.compare.plot.figure import build_figure

    run = tmp_path / "run"
    _telemetry_run(run, diverge=True)
    report = _plot_report(run)
    fig = build_figure(report)
    (loss,) = _by_title(fig, "training loss per step")
    labels = [line.get_label() for line in _legend_lines(loss)]
    assert labels == ["fp32", "fp16 (diverged at step 20)", "bf16"]
    fp16 = _legend_lines(loss)[1]
    assert list(fp16.get_xdata())[-1] == 20  # the curve ends where the cell stopped
    (scale,) = _by_title(fig, "loss scale")
    assert len(_legend_lines(scale)) == 1  # one line per fp16 cell
    assert scale.get_yscale() == "log"
    assert [c.get_offsets().shape[0] for c in scale.collections][-1] == 2  # skipped steps
    assert not report.notes


def test_plot_without_side_files_is_as_before(tmp_path: Path) -> None:
    from mpbench.compare.plot.figure import build_figure

    records = [
        record("torch", "mnist_dense", p, median_ms=ms, accuracy=0.97, loss_scale=scale)
        for p, ms, scale in (("float32", 2.4, None), ("mixed_float16", 13.1, (65536.0, 1)))
    ]
    fig = build_figure(build_report(records, CompareOptions()))
    assert not _by_title(fig, "per step") and not _by_title(fig, "loss scale")
    assert len(fig.axes) == 5  # speed-up, memory, accuracy, step time, loss


def test_missing_and_malformed_side_files_give_notes_not_a_crash(tmp_path: Path) -> None:
    run = tmp_path / "run"
    records = _telemetry_run(run)
    by_policy = {r.policy: r for r in records}
    (run / by_policy["float32"].telemetry.side_file).unlink()
    (run / by_policy["mixed_float16"].telemetry.side_file).write_text("{not json", "utf-8")
    plot = tmp_path / "out.png"
    code, out = run_inprocess(run, plot=plot, format="json")
    assert code == 0 and plot.stat().st_size > 0
    notes = json.loads(out)["notes"]
    missing = [n for n in notes if "no such telemetry side file" in n]
    malformed = [n for n in notes if "not valid JSON" in n]
    assert len(missing) == 1 and "float32" in missing[0]
    assert len(malformed) == 1 and "mixed_float16" in malformed[0]
    assert by_policy["mixed_float16"].telemetry.side_file.split("/")[-1] in malformed[0]

    from mpbench.compare.plot.figure import build_figure

    report = _plot_report(run)
    fig = build_figure(report)
    (loss,) = _by_title(fig, "training loss per step")
    assert [line.get_label() for line in _legend_lines(loss)] == ["bf16"]
    assert not _by_title(fig, "loss scale")  # the only fp16 curve was unreadable
    assert len(report.notes) == 2


def test_a_side_file_escaping_the_run_directory_is_refused_with_a_note(tmp_path: Path) -> None:
    run = tmp_path / "run"
    records = _telemetry_run(run)
    for rec in records:
        rec.telemetry.side_file = "../elsewhere.json"
    report = build_report(records, CompareOptions(), run_dirs={RUN_ID: [run]})
    assert report.side_files() == {}
    assert len(report.notes) == 3 and all("leaves the run directory" in n for n in report.notes)
