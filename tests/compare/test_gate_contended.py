"""The CI gate script (`.github/mpbench-gate.sh`) refuses to save a run with contended cells as
the baseline (issue 33, item 3), unless `--save-contended` / `MPBENCH_SAVE_CONTENDED` says to;
and a run in which float32 ran alone (`policies = ["auto"]` on a device with no fast 16-bit
policy, issue 33 item 5) passes without a within-run accuracy gate it cannot check.

The real script runs in a scratch repository with an `mpbench` on PATH whose `detect` and `run`
are stand-ins (`run` writes records made here, some of them contended, as a real run on a busy
machine would) and whose `compare` is the real `python -m mpbench compare`: what is tested is
the script and compare, not a benchmark."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import BUSY, QUIET, record, write_run

from mpbench.results import CellRecord, ContentionStats

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".github" / "mpbench-gate.sh"


# `mpbench detect` and `mpbench run` stand-ins; `run` copies the prepared run into --out.
STUB = """#!/usr/bin/env bash
set -euo pipefail
case "${1:-}" in
    detect) echo "stub: mpbench detect" ;;
    run)
        out=""
        while (($#)); do
            if [[ "$1" == --out ]]; then out="$2"; shift; fi
            shift
        done
        mkdir -p "$out"
        cp "$PREPARED_RUN"/* "$out"/
        ;;
    *) exec "$REAL_PYTHON" -m mpbench "$@" ;;
esac
"""


def _records(
    contended: dict[str, ContentionStats] | None = None, run_id: str = "20260301-101500-cpu"
) -> list[CellRecord]:
    """torch/mnist_dense float32 and bf16, 2 repeats each; `contended`: policy -> contention."""
    out = []
    for repeat in range(2):
        for policy, ms in (("float32", 2.4), ("mixed_bfloat16", 0.98)):
            rec = record("torch", "mnist_dense", policy, median_ms=ms + repeat / 100,
                         accuracy=0.97, rss_mib=600, training_mib=40, repeat=repeat,
                         run_id=run_id)  # fmt: skip
            rec.contention = (contended or {}).get(policy, QUIET)
            out.append(rec)
    return out


def _repo(tmp_path: Path, records: list[CellRecord]) -> tuple[Path, dict[str, str]]:
    """A scratch repository holding the real script, and the environment to run it in."""
    repo = tmp_path / "repo"
    (repo / ".github").mkdir(parents=True)
    shutil.copy2(SCRIPT, repo / ".github" / "mpbench-gate.sh")
    prepared = write_run(tmp_path / "prepared", records)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "mpbench"
    stub.write_text(STUB, encoding="utf-8")
    stub.chmod(0o755)
    summary = tmp_path / "step_summary.md"
    summary.touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPBENCH_", "GITHUB_"))}
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]])
    env.update(
        PREPARED_RUN=str(prepared),
        REAL_PYTHON=sys.executable,
        GITHUB_STEP_SUMMARY=str(summary),
        MPBENCH_CONFIG="tiny.toml",  # read by the stand-in run only
        # No plot: what these tests check is in the report and the log; the README's recipe
        # (tests/test_ci_recipe.py) checks the script's plot.
        MPBENCH_PLOT="0",
    )
    return repo, env


def _gate(repo: Path, env: dict[str, str], *args: str, **extra: str):
    return subprocess.run(
        ["bash", ".github/mpbench-gate.sh", *args],
        cwd=repo,
        env={**env, **extra},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


def test_a_contended_run_is_not_saved_as_the_baseline(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path, _records({"float32": BUSY, "mixed_bfloat16": BUSY}))
    done = _gate(repo, env, "--save-baseline")
    log = done.stdout + done.stderr
    assert done.returncode == 1, log
    (refusal,) = _lines(done.stdout, "mpbench-gate: Baseline not saved")
    cells = "torch/mnist_dense/float32: 2 of 2; torch/mnist_dense/mixed_bfloat16: 2 of 2"
    assert f"2 cells contended in 4 of their 4 repeats, run beside other work ({cells})" in refusal
    assert "results/ci-baseline is unchanged" in refusal
    assert "--save-contended (MPBENCH_SAVE_CONTENDED=1)" in refusal
    assert "Baseline saved" not in log and "Traceback" not in log
    assert not (repo / "results" / "ci-baseline" / "results.jsonl").exists()
    # The report is still written, and the job summary has the report once and the refusal.
    assert (repo / "results" / "ci" / "compare.md").is_file()
    assert "plot none (MPBENCH_PLOT=0)" in done.stdout
    assert not (repo / "results" / "ci" / "compare.png").exists()
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert summary.count("## mpbench compare") == 1
    assert "Baseline not saved: 2 cells contended in 4 of their 4 repeats" in summary


def test_one_contended_cell_is_enough_and_an_old_baseline_stays(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path, _records({"mixed_bfloat16": BUSY}))
    baseline = repo / "results" / "ci-baseline"
    write_run(baseline, _records(run_id="20260228-101500-cpu"))  # an older run's
    before = (baseline / "results.jsonl").read_bytes()
    done = _gate(repo, env, MPBENCH_SAVE_BASELINE="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Gating against the baseline" in done.stdout
    (refusal,) = _lines(done.stdout, "mpbench-gate: Baseline not saved")
    said = "1 cell contended in 2 of 2 repeats, run beside other work"
    assert f"{said} (torch/mnist_dense/mixed_bfloat16)" in refusal
    assert (baseline / "results.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    ("args", "extra"),
    [(("--save-baseline", "--save-contended"), {}), ((), {"MPBENCH_SAVE_BASELINE": "1",
                                                        "MPBENCH_SAVE_CONTENDED": "1"})],
)  # fmt: skip
def test_save_contended_saves_it_anyway_with_a_warning(
    tmp_path: Path, args: tuple[str, ...], extra: dict[str, str]
) -> None:
    repo, env = _repo(tmp_path, _records({"float32": BUSY}))
    done = _gate(repo, env, *args, **extra)
    assert done.returncode == 0, done.stdout + done.stderr
    (warning,) = _lines(done.stdout, "mpbench-gate: Warning: saving a baseline with")
    assert "1 cell contended in 2 of 2 repeats (torch/mnist_dense/float32)" in warning
    assert "Baseline saved" in done.stdout
    saved = repo / "results" / "ci-baseline" / "results.jsonl"
    assert saved.read_bytes() == (repo / "results" / "ci" / "results.jsonl").read_bytes()


def test_a_quiet_run_is_saved_and_not_asking_to_save_says_nothing(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path, _records())
    done = _gate(repo, env, "--save-baseline")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Baseline saved" in done.stdout and "contended" not in done.stdout
    assert (repo / "results" / "ci-baseline" / "results.jsonl").is_file()
    # Without --save-baseline, a contended run is gated and reported as before: no refusal.
    busy, env = _repo(tmp_path / "busy", _records({"float32": BUSY}))
    done = _gate(busy, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Baseline" not in done.stdout.replace("No baseline yet", "")


def _float32_alone() -> list[CellRecord]:
    return [r for r in _records() if r.policy == "float32"]


def test_float32_alone_skips_the_accuracy_delta_gate_and_says_why(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path, _float32_alone())
    done = _gate(repo, env, MPBENCH_MAX_ACCURACY_DELTA="5")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    (said,) = _lines(done.stdout, "mpbench-gate: float32 ran alone on this device")
    assert "--max-accuracy-delta has nothing to compare, so it is not checked" in said
    assert said.removeprefix("mpbench-gate: ") in Path(env["GITHUB_STEP_SUMMARY"]).read_text()


def test_a_run_with_16_bit_cells_keeps_the_accuracy_delta_gate(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path, _records())
    done = _gate(repo, env, MPBENCH_MAX_ACCURACY_DELTA="5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not _lines(done.stdout, "mpbench-gate: float32 ran alone")
    report = (repo / "results" / "ci" / "compare.md").read_text(encoding="utf-8")
    assert "max-accuracy-delta" in report


def test_a_speedup_gate_for_a_policy_auto_left_out_says_how_to_run_it(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path, _float32_alone())
    done = _gate(repo, env, MPBENCH_MIN_SPEEDUP="bf16=1.1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no framework and workload has both a float32 and a mixed_bfloat16 cell" in done.stderr
    assert "--policy auto runs only the policies rated fast on the device" in done.stderr
