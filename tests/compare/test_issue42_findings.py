"""Issue 42's findings in compare: the compiled-or-eager footnote never advises --compile to a
run that used it (item 1); an `unknown` bound gets its reason as a footnote in the terminal
table and markdown (item 2); the CI gate counts contended cells and their repeats apart
(item 3); more than 100 points is refused wherever a limit is in points (item 4); dead code
gone (item 5); whether a row is an emulated fp8 cell is decided once per row (item 6)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from builders import BUSY, QUIET, fp8_stats, record, write_run
from cli import run_mpbench
from compare_helpers import FIXTURES

from mpbench.compare import CompareOptions, build_report
from mpbench.compare.render import tables
from mpbench.compare.render.fp8_tables import fp8_table
from mpbench.compare.render.json_report import render_json
from mpbench.compare.render.tables import section_table
from mpbench.compare.summary.build import build_sections
from mpbench.compare.summary.cells import PolicyGroup, summarize_all
from mpbench.errors import InvalidInput
from mpbench.parsers import parse_points
from mpbench.results import CompileStats, DeviceInfo, Fp8Stats
from mpbench.results.schema import BottleneckStats
from mpbench.runner.config import RunOptions, build_config

H100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", "9.0", 0)
CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _report(records: list):
    return build_report(records, CompareOptions())


# --- item 1: the compiled-or-eager note never advises what the run did ------------------------


def _fp8(mode: str = "hardware") -> Fp8Stats:
    return fp8_stats(mode=mode)


def _fp8_run(also_eager: bool) -> list:
    """float32, bf16 and fp8 on an H100, 3 repeats; fp8 compiled by default. `also_eager`: the
    run was `--compile --also-eager` as mpbench ran it before issue 42 (an eager group whose
    fp8 compiled anyway, and the [compile] group); else no --compile at all."""
    records = []
    for repeat in range(3):
        for compiled in (False, True) if also_eager else (False,):
            for policy, ms in (("float32", 19.2), ("mixed_bfloat16", 2.12), ("float8", 1.6)):
                rec = record(
                    "torch",
                    "mnist_dense",
                    policy,
                    median_ms=ms * (1 + 0.01 * repeat),
                    accuracy=0.97 - 0.001 * repeat,
                    device_mib=900,
                    training_mib=500,
                    repeat=repeat,
                    device=H100,
                    config_overrides={"compile": True} if compiled else None,
                    recipe="@compiled" if compiled else "",
                )
                if policy == "float8":
                    rec.fp8 = _fp8()
                if compiled or policy == "float8":  # a compiled cell's record holds its time
                    rec.compile = CompileStats("inductor", 12.5, 0, 2, 1)
                records.append(rec)
    return records


def _fp8_notes(report) -> list[str]:
    out = []
    for section in report.sections:
        table = fp8_table(section, report.labeler)
        out += table.footnotes if table is not None else []
    return out


def test_a_run_that_used_compile_is_pointed_at_its_compiled_rows_not_told_to_add_it():
    report = _report(_fp8_run(also_eager=True))
    eager, compiled = report.sections[0].groups
    against = eager.comparisons["float8"].vs_base
    assert against.compiled == "fp8 compiled, bf16 eager" and against.compile_ran
    why = eager.comparisons["float8"].verdict.why
    assert "fp8 compiled, bf16 eager: the [compile] rows compile both" in why
    assert compiled.comparisons["float8"].vs_base.compiled is None  # both compiled there
    notes = _fp8_notes(report)
    assert any("fp8 compiled, bf16 eager: the [compile] rows compile both" in n for n in notes)
    everything = render_json(report) + "\n".join(notes)
    assert "add --compile" not in everything


def test_a_run_without_compile_is_still_told_to_add_it():
    report = _report(_fp8_run(also_eager=False))
    (group,) = report.sections[0].groups
    assert not group.comparisons["float8"].vs_base.compile_ran
    why = group.comparisons["float8"].verdict.why
    assert "fp8 compiled, bf16 eager: add --compile to compile bf16 too" in why
    notes = _fp8_notes(report)
    assert any(n.endswith("fp8 compiled, bf16 eager: add --compile to compile both") for n in notes)


# --- item 2: an unknown bound has its reason as a footnote ------------------------------------

NOT_CLASSIFIED = (
    "peak_tflops (no datasheet peak for AMD EPYC: run `mpbench detect --measure`), "
    "bandwidth_gbps (no measured bandwidth cached for this device)"
)
UNKNOWN = BottleneckStats(
    "unknown",
    f"CPU busy 69 % of 2 thread(s) over the timed steps; not classified: {NOT_CLASSIFIED}",
    None,
    "process CPU time",
)
LAUNCH = BottleneckStats("launch-bound", "CPU busy 31 % of the step", "a larger batch", "x")


def _bound_run(bottlenecks: dict[str, BottleneckStats], repeats: int = 3) -> list:
    records = []
    for repeat in range(repeats):
        for policy, ms in (("float32", 2.4), ("mixed_bfloat16", 0.98)):
            rec = record("torch", "mnist_dense", policy, median_ms=ms, accuracy=0.97,
                         rss_mib=600, training_mib=40, repeat=repeat)  # fmt: skip
            rec.bottleneck = bottlenecks[policy]
            records.append(rec)
    return records


def test_an_unknown_bound_is_marked_with_its_reason_as_a_footnote():
    report = _report(_bound_run({"float32": UNKNOWN, "mixed_bfloat16": LAUNCH}))
    table = section_table(report.sections[0], report.labeler)
    bound = table.headers.index("bound")
    cell, launch = (row[bound] for row in table.rows)
    # every repeat undiagnosed: no "0/3" of repeats agreeing on a class
    assert launch == "launch" and re.fullmatch(r"unknown \[\d+\]", cell), cell
    mark = cell.removeprefix("unknown ")
    assert f"{mark} bound unknown: {NOT_CLASSIFIED}" in table.footnotes


def test_cells_unknown_for_one_reason_share_one_footnote_and_other_evidence_stands_whole():
    other = BottleneckStats("unknown", "no evidence was sampled", None, "x")
    report = _report(_bound_run({"float32": UNKNOWN, "mixed_bfloat16": UNKNOWN}, 1))
    table = section_table(report.sections[0], report.labeler)
    bound = table.headers.index("bound")
    assert [row[bound] for row in table.rows] == ["unknown [1]", "unknown [1]"]
    report = _report(_bound_run({"float32": UNKNOWN, "mixed_bfloat16": other}, 1))
    table = section_table(report.sections[0], report.labeler)
    assert [row[table.headers.index("bound")] for row in table.rows] == [
        "unknown [1]",
        "unknown [2]",
    ]
    assert "[2] bound unknown: no evidence was sampled" in table.footnotes


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_the_terminal_table_and_markdown_both_say_why_the_bound_is_unknown(
    tmp_path: Path, fmt: str
):
    run = write_run(tmp_path / "run", _bound_run({"float32": UNKNOWN, "mixed_bfloat16": LAUNCH}))
    done = run_mpbench("compare", run, "--format", fmt, env={"COLUMNS": "400"})
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    found = re.search(r"unknown (\[\d+\])", text)
    assert found, done.stdout
    assert f"{found.group(1)} bound unknown: {NOT_CLASSIFIED}" in text.replace("\\", "")


# --- item 3: the CI gate says how many cells and how many of their repeats were contended -------


def _ci_run(busy: dict[str, int], repeats: int = 8) -> list:
    """torch/mnist_dense float32 and bf16, `repeats` each; `busy`: policy -> its first N
    repeats contended."""
    out = []
    for repeat in range(repeats):
        for policy, ms in (("float32", 2.4), ("mixed_bfloat16", 0.98)):
            rec = record("torch", "mnist_dense", policy, median_ms=ms + repeat / 100,
                         accuracy=0.97, rss_mib=600, training_mib=40, repeat=repeat)  # fmt: skip
            rec.contention = BUSY if repeat < busy.get(policy, 0) else QUIET
            out.append(rec)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("busy", "said"),
    [
        ({"mixed_bfloat16": 8}, "1 cell contended in 8 of 8 repeats, run beside other work "
                                "(torch/mnist_dense/mixed_bfloat16)"),
        ({"mixed_bfloat16": 3}, "1 cell contended in 3 of 8 repeats, run beside other work "
                                "(torch/mnist_dense/mixed_bfloat16)"),
        ({"float32": 8, "mixed_bfloat16": 1},
         "2 cells contended in 9 of their 16 repeats, run beside other work "
         "(torch/mnist_dense/float32: 8 of 8; torch/mnist_dense/mixed_bfloat16: 1 of 8)"),
    ],
)  # fmt: skip
def test_the_gate_counts_contended_cells_and_their_repeats_apart(
    tmp_path: Path, busy: dict[str, int], said: str
):
    gate = pytest.importorskip("test_gate_contended")  # needs matplotlib, as the script does
    repo, env = gate._repo(tmp_path, _ci_run(busy))
    done = gate._gate(repo, env, "--save-baseline")
    assert done.returncode == 1, done.stdout + done.stderr
    (refusal,) = [line for line in done.stdout.splitlines() if "Baseline not saved" in line]
    assert said in refusal
    assert "contended cell," not in refusal and "contended cells" not in refusal


# --- item 4: no more than 100 points ------------------------------------------------------------


@pytest.mark.parametrize("option", ["--accuracy-margin", "--max-accuracy-delta",
                                    "--max-accuracy-drop"])  # fmt: skip
@pytest.mark.parametrize("text", ["200", "100.5pp", "1e3"])
def test_points_above_100_are_refused_in_one_line(option: str, text: str):
    with pytest.raises(InvalidInput) as refused:
        parse_points(option, text)
    message = str(refused.value)
    assert message.startswith(f"{option} {text!r}: must be at most 100") and "\n" not in message


@pytest.mark.parametrize("text", ["100", "100pp", "0", "99.5"])
def test_points_up_to_100_are_taken(text: str):
    assert parse_points("--accuracy-margin", text) == float(text.removesuffix("pp"))


def test_compare_refuses_a_margin_of_200_with_exit_2():
    done = run_mpbench("compare", FIXTURES / "cpu_run", "--accuracy-margin", "200")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--accuracy-margin '200': must be at most 100" in lines[0]


def test_the_run_setting_refuses_more_than_100_from_the_command_line_and_toml(tmp_path: Path):
    with pytest.raises(InvalidInput, match=r"--accuracy-margin 200.*at most 100"):
        build_config(RunOptions(config=CONFIGS / "quick.toml", accuracy_margin=200.0))
    path = tmp_path / "run.toml"
    path.write_text("[run]\naccuracy_margin = 200\n")
    with pytest.raises(InvalidInput, match=r"accuracy_margin = 200: must be at most 100"):
        build_config(RunOptions(config=path))
    path.write_text("[run]\naccuracy_margin = 100\n")
    assert build_config(RunOptions(config=path)).accuracy_margin == 100


# --- item 5: dead code ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["memory_header", "_step_text"])
def test_the_unused_table_helpers_are_gone(name: str):
    assert not hasattr(tables, name)


# --- item 6: emulated or not, decided once per row ----------------------------------------------


def test_whether_a_row_is_emulated_fp8_is_decided_once_per_row(monkeypatch):
    records = []
    for repeat in range(2):
        for policy, ms in (("float32", 2.4), ("mixed_bfloat16", 0.98), ("float8", 9.0)):
            rec = record("torch", "mnist_dense", policy, median_ms=ms, accuracy=0.97,
                         rss_mib=600, training_mib=40, repeat=repeat)  # fmt: skip
            if policy == "float8":
                rec.fp8 = _fp8("emulated")
            records.append(rec)
    asked: list[str] = []
    decide = PolicyGroup.emulated

    def counted(self, policy):
        asked.append(policy)
        return decide(self, policy)

    monkeypatch.setattr(PolicyGroup, "emulated", counted)
    (section,) = build_sections(summarize_all(records))
    (group,) = section.groups
    assert sorted(asked) == sorted(group.cells)  # once per row, every row
    monkeypatch.undo()
    fp8, bf16 = group.comparisons["float8"], group.comparisons["mixed_bfloat16"]
    assert fp8.emulated and not bf16.emulated
    # what an emulated row has always had: its cost and accuracy, no speed or memory ratios
    assert fp8.speedup is fp8.memory_ratio is fp8.end_to_end_speedup is None
    assert fp8.emulation_cost is not None and fp8.emulation_cost.value > 3
    assert fp8.vs_base.speedup is fp8.vs_base.memory_ratio is None
    assert fp8.vs_base.accuracy_delta_pp is not None
    assert bf16.speedup is not None and bf16.emulation_cost is None
    assert json.loads(render_json(_report(records)))["cells"]  # and the report renders
