"""One validation path: whatever a value came through (an option, the TOML config, run.json,
a results file), it meets the same rules, and bad input is one line and exit 2. Options that
change nothing say so, once, on stderr, as every warning does; repeated limits are refused
rather than one of them dropped. Real runs, real files, mpbench as a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from adversary import assert_refused, read_jsonl
from builders import tiny_toml
from cli import run_mpbench
from frameworks import needs_tensorflow, needs_torch

# What `mpbench run` and `compare` import as they start, imported once here: each command
# forked from this process (tests/cli.py) then starts without them (about 1 s a command).
import mpbench.compare
import mpbench.compare.options
import mpbench.detect
import mpbench.runner.loop
import mpbench.runner.signals  # noqa: F401
from mpbench.errors import InvalidInput
from mpbench.policies import DeviceTraits
from mpbench.runner.config import RunOptions, build_config
from mpbench.runner.matrix import expand

# its cells import torch, in their own processes; its run is data-parallel (--nproc 2)
pytestmark = [needs_torch, pytest.mark.all_cores]

TORCH = ["--framework", "torch", "--workload", "mnist_dense", "--device", "cpu"]


def run(config: Path, out: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return run_mpbench("run", "--config", str(config), *TORCH, "--out", str(out), *args, **kwargs)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real finished run: float32 at world sizes 1 and 2 (a torchrun job of 2 ranks)."""
    folder = tmp_path_factory.mktemp("finished")
    config = folder / "tiny.toml"
    config.write_text(tiny_toml())
    out = folder / "run"
    done = run(config, out, "--policy", "fp32", "--nproc", "1,2")
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns(".mpbench.lock"))
    return copy


# --- run.json: the stored configuration meets the Setting table -----------------------------


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("repeat", "three", "config.repeat = 'three': must be a whole number or 'auto'"),
        ("loss_scale", [0], "config.loss_scale = 0.0: must be at least 1"),
        (
            "grad_comm",
            "int8",
            "config.grad_comm: unknown value 'int8'; valid choices: fp32, fp16, bf16",
        ),
        (
            "on_diverge",
            "retry",
            "config.on_diverge: unknown value 'retry'; valid choices: stop, fallback",
        ),
        ("accumulate", ["4"], "config.accumulate = '4': must be a whole number"),
        ("nproc", [2000], "config.nproc = 2000: must be at most 1024"),
        ("timeout", None, "config.timeout = None: must be a number"),
        ("workloads", {"mnist_dense": {"batch_size": 64}}, "config.workloads.mnist_dense has no"),
        ("bogus", 1, "unknown key in"),
    ],
)
def test_a_damaged_run_json_is_one_line_naming_file_and_key(
    finished: Path, tmp_path: Path, key: str, value: Any, fragment: str
) -> None:
    out = copy_of(finished, tmp_path)
    state = out / "run.json"
    raw = json.loads(state.read_text())
    raw["config"][key] = value
    state.write_text(json.dumps(raw))
    results = (out / "results.jsonl").read_bytes()
    assert_refused(run_mpbench("run", "--out", str(out), "--resume"), str(state), fragment)
    assert (out / "results.jsonl").read_bytes() == results


def test_an_intact_run_json_still_resumes(finished: Path, tmp_path: Path) -> None:
    out = copy_of(finished, tmp_path)
    resumed = run_mpbench("run", "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert resumed.stdout.count("already done (--resume)") == 2


# --- TOML: strings are not numbers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[run]\naccumulate = "4"\n', "[run] accumulate = '4': must be a whole number"),
        ('[run]\naccumulate = "1,4"\n', "[run] accumulate = '1,4': must be a whole number"),
        ('[run]\nbatch_scale_16bit = ["2"]\n', "batch_scale_16bit = '2': must be a whole"),
        ('[run]\nloss_scale = "1024"\n', "loss_scale = '1024': must be 'dynamic' or a number"),
        ('[run]\nrepeat = "3"\n', "[run] repeat = '3': must be a whole number or 'auto'"),
        ('[distributed]\nnproc = "2"\n', "[distributed] nproc = '2': must be a whole number"),
    ],
)
def test_a_number_written_as_a_string_in_the_config_is_refused(
    tmp_path: Path, text: str, fragment: str
) -> None:
    config = tmp_path / "strings.toml"
    config.write_text(text)
    out = tmp_path / "run"
    assert_refused(run(config, out, "--policy", "fp32"), str(config), fragment)
    assert not out.exists()


# --- records: their version, and themselves -------------------------------------------------


def _edit_parallel(edit) -> Any:
    def apply(records: list[dict]) -> None:
        edit(next(r for r in records if r["config"].get("world_size") == 2))

    return apply


def _older(record: dict) -> None:
    record["schema_version"] = 4  # before `distributed` (5) and contention (6)
    del record["contention"], record["implausible"]


def _fallback_of_nothing(records: list[dict]) -> None:
    records[0]["fallback_of"] = "torch/mnist_dense/mixed_float16/r0"


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (
            _edit_parallel(_older),
            ["line 2", "distributed is a field of schema version 5", "says version 4"],
        ),
        (
            _edit_parallel(lambda r: r.update(distributed=None)),
            ["line 2", "config.world_size is 2, but the record has no distributed figures"],
        ),
        (
            _edit_parallel(lambda r: r["config"].update(world_size=3)),
            ["line 2", "config.world_size is 3, but distributed.world_size is 2"],
        ),
        (
            _edit_parallel(lambda r: r["distributed"].update(nproc_per_node=3)),
            ["line 2", "distributed.world_size 2 is not distributed.nodes 1 x"],
        ),
        (
            _fallback_of_nothing,
            ["line 1", "fallback_of names torch/mnist_dense/mixed_float16/r0, which is no cell"],
        ),
    ],
)
def test_a_record_that_contradicts_its_version_or_itself_is_refused(
    finished: Path, tmp_path: Path, edit, fragments: list[str]
) -> None:
    out = copy_of(finished, tmp_path)
    results = out / "results.jsonl"
    records = read_jsonl(results)
    assert [r["config"].get("world_size", 1) for r in records] == [1, 2]
    edit(records)
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert_refused(run_mpbench("compare", str(out)), str(results), *fragments)


def test_the_finished_run_itself_compares(finished: Path) -> None:
    done = run_mpbench("compare", str(finished), "--min-scaling-efficiency", "2=0.01")
    assert done.returncode == 0, done.stdout + done.stderr


# --- gates: one limit per gate --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (
            ["--min-speedup", "mixed_bfloat16=1.5", "--min-speedup", "bf16=0.01"],
            "--min-speedup 'mixed_bfloat16=1.5' and --min-speedup 'bf16=0.01' both set the "
            "limit for mixed_bfloat16",
        ),
        (
            ["--min-speedup", "fp16@2=1.1", "--min-speedup", "AMP_FP16@2=1.2"],
            "both set the limit for mixed_float16 at world size 2",
        ),
        (
            ["--min-scaling-efficiency", "2=0.8", "--min-scaling-efficiency", "2=50%"],
            "both set the limit for world size 2",
        ),
        (
            ["--max-slowdown", "10%", "--max-slowdown", "50%"],
            "--max-slowdown 10% --max-slowdown 50%: one limit per option",
        ),
        (["--max-memory-increase", "0.1", "--max-memory-increase", "0.2"], "one limit"),
        (["--max-accuracy-drop", "1", "--max-accuracy-drop", "2"], "one limit"),
        (["--max-accuracy-delta", "1", "--max-accuracy-delta", "2"], "one limit"),
    ],
)
def test_a_repeated_gate_is_refused_not_half_dropped(
    finished: Path, args: list[str], fragment: str
) -> None:
    assert_refused(run_mpbench("compare", str(finished), *args), fragment)


# --- messages that say what is wrong --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--nproc", "-1"], "--nproc -1: must be at least 1"),
        (["--accumulate", "-3"], "--accumulate -3: must be at least 1"),
        (["--accumulate", "1.5"], "--accumulate '1.5': must be a whole number, at least 1"),
        (["--batch-scale-16bit", "two"], "must be a whole number, at least 1"),
    ],
)
def test_an_out_of_range_count_says_its_range(
    tmp_path: Path, tiny_config: Path, args: list[str], fragment: str
) -> None:
    out = tmp_path / "run"
    assert_refused(run(tiny_config, out, "--policy", "fp32", *args), fragment)
    assert not out.exists()


@pytest.mark.parametrize("spec", ["2=1.5", "2=150%", "2=80"])
def test_an_efficiency_above_one_suggests_a_fraction_or_a_percentage(
    finished: Path, spec: str
) -> None:
    line = assert_refused(
        run_mpbench("compare", str(finished), "--min-scaling-efficiency", spec),
        "an efficiency is a fraction of linear scaling, at most 1",
        "write a fraction like 0.8 or a percentage like 80%",
    )
    assert "0.015" not in line and "1.5%" not in line


# --- options that do nothing, and where warnings go -----------------------------------------


def test_options_that_change_no_cell_warn_once_on_stderr(tmp_path: Path, tiny_config: Path):
    out = tmp_path / "run"
    done = run(tiny_config, out, "--policy", "fp32", "--loss-scale", "1024", "--grad-comm", "bf16")
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert said.count("warning: --loss-scale 1024: applies to mixed_float16 cells only") == 1
    assert said.count("warning: --grad-comm bf16: applies to data-parallel cells only") == 1
    # stdout: progress, summary, the results' path; the table's own notes may say "a warning"
    # (a drifting median's footnote, whose wrapped line can even start with "warning:"), but
    # none of run's warnings is on stdout
    out = " ".join(done.stdout.split())
    assert "--loss-scale 1024: applies" not in out and "--grad-comm bf16: applies" not in out
    assert "Results:" in done.stdout


class _Report:
    """The look-ups expand makes of a detect report: a CPU, no GPU."""

    gpus = ()

    def device_traits(self, kind: str, index: int | None = None) -> DeviceTraits:
        return DeviceTraits(kind="cpu", name="test cpu")


def _cells(config: Path, **options: Any):
    built = build_config(RunOptions(config=config, workloads=["mnist_dense"], **options))
    return built, expand(built, _Report(), "run")[2]


@needs_tensorflow  # without it the TensorFlow cells are skipped: none runs to warn about
def test_compile_with_only_tensorflow_cells_warns(tiny_config: Path) -> None:
    from mpbench.runner.preflight import unused_settings

    config, cells = _cells(
        tiny_config, frameworks=["tensorflow"], policies=["fp32"], compile=[True]
    )
    (line,) = unused_settings(config, cells)
    assert line.startswith("--compile: applies to torch cells only, and none runs here")


def test_settings_that_change_a_running_cell_do_not_warn(tiny_config: Path) -> None:
    from mpbench.runner.preflight import unused_settings

    config, cells = _cells(tiny_config, frameworks=["torch"], policies=["fp32"], compile=[True])
    assert unused_settings(config, cells) == []
    config, cells = _cells(tiny_config, policies=["fp16"], loss_scale=["1024"], nproc=["2"])
    assert unused_settings(config, cells) == []


# --- replicas per node: what the node can hold ----------------------------------------------


def test_more_replicas_than_cores_on_a_cpu_is_refused(tmp_path: Path, tiny_config: Path):
    core = min(os.sched_getaffinity(0))
    out = tmp_path / "run"
    command = [sys.executable, "-m", "mpbench", "run", "--config", str(tiny_config), *TORCH]
    command += ["--policy", "fp32", "--nproc", "1,2", "--out", str(out)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),  # one core for this run
    )
    assert_refused(
        done,
        "--nproc 2: on a CPU each replica needs a core of its own",
        "may run on 1 (its CPU affinity); pass --nproc 1 or fewer",
    )
    assert len(done.stderr.splitlines()) == 1  # refused before any warning is said
    assert not out.exists()


def test_more_torch_ranks_than_the_memory_holds_are_refused(tiny_config: Path) -> None:
    from mpbench.runner.preflight import RANK_MEMORY_BYTES, check_ranks_per_node

    _, cells = _cells(tiny_config, frameworks=["torch"], policies=["fp32"], nproc=["1,4"])
    check_ranks_per_node(cells, cores=64, available=4 * RANK_MEMORY_BYTES)  # fits
    with pytest.raises(InvalidInput, match=r"--nproc 4: each torch rank is a process .* holds "):
        check_ranks_per_node(cells, cores=64, available=3 * RANK_MEMORY_BYTES)
    with pytest.raises(InvalidInput, match="it holds --nproc 3 at most"):
        check_ranks_per_node(cells, cores=64, available=3 * RANK_MEMORY_BYTES)
    # TensorFlow's replicas are logical devices of one process: no rank processes.
    _, cells = _cells(tiny_config, frameworks=["tensorflow"], policies=["fp32"], nproc=["4"])
    check_ranks_per_node(cells, cores=64, available=RANK_MEMORY_BYTES)
