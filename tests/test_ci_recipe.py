"""The README's CI recipe works as written: the workflow file is what the README shows, and its
gate script (`.github/mpbench-gate.sh`, every mpbench command of the job) creates the baseline on
its first run and gates against it on the second, in a fresh copy of the repository."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import tiny_toml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "mpbench.yml"
SCRIPT = ROOT / ".github" / "mpbench-gate.sh"
SCRIPT_IN_CHECKOUT = ".github/mpbench-gate.sh"

# Not part of a checkout: the virtual environments (.venv-notf: the one without TensorFlow),
# run outputs and build leftovers at the top, caches anywhere.
NOT_CHECKED_OUT_AT_TOP = {".git", ".venv", ".venv-notf", "results", "build", "dist"}
NOT_CHECKED_OUT = {".pytest_cache", ".ruff_cache", ".mypy_cache", "__pycache__"}

# The gate script with a matrix small enough for this project's CI: 2 policies x 2 repeats,
# 8 steps of a 32-unit model on synthetic data.
TINY = tiny_toml(
    run={"workloads": ["mnist_dense"], "policies": ["float32", "mixed_bfloat16"],
         "device": "cpu", "repeat": 1, "seed": 0, "timeout": 300},
    mnist_dense={"batch_size": 128, "synthetic_train_size": 2048, "synthetic_test_size": 512},
    cifar10_cnn=None,
)  # fmt: skip


def readme_ci_yaml() -> str:
    """The yaml block of the README's "## CI recipe" section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## CI recipe\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```yaml\n(.*?)^```$", section, flags=re.S | re.M)
    assert len(blocks) == 1, f"expected one yaml block in the CI recipe, found {len(blocks)}"
    return blocks[0]


def test_readme_shows_the_workflow_file() -> None:
    assert readme_ci_yaml() == WORKFLOW.read_text(encoding="utf-8")


def test_workflow_runs_the_gate_script_and_keeps_one_baseline_path() -> None:
    workflow = WORKFLOW.read_text(encoding="utf-8")
    assert f"run: bash {SCRIPT_IN_CHECKOUT}" in workflow
    # The restore and save steps must name the same path (a cache's version includes it) and
    # save under the key the restore step computed.
    assert workflow.count("path: ${{ env.MPBENCH_BASELINE }}") == 2
    assert "key: ${{ steps.baseline.outputs.cache-primary-key }}" in workflow
    # The workflow's settings are the script's defaults, so the README's local commands match.
    script = SCRIPT.read_text(encoding="utf-8")
    for name in ("MPBENCH_CONFIG", "MPBENCH_FRAMEWORK", "MPBENCH_OUT", "MPBENCH_BASELINE"):
        value = re.search(rf"^  {name}: (\S+)$", workflow, flags=re.M)
        assert value, name
        assert f'"${{{name}:-{value.group(1)}}}"' in script, name


def test_gate_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_gate_script_help_and_bad_arguments() -> None:
    shown = subprocess.run(
        ["bash", str(SCRIPT), "--help"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0
    assert "MPBENCH_BASELINE" in shown.stdout
    wrong = subprocess.run(
        ["bash", str(SCRIPT), "--frobnicate"], capture_output=True, text=True, check=False
    )
    assert wrong.returncode == 2
    assert "unknown argument" in wrong.stderr


def checkout(tmp_path: Path) -> Path:
    """A copy of the working tree as a fresh checkout would have it."""
    target = tmp_path / "checkout"

    def ignore(directory: str, names: list[str]) -> set[str]:
        top = Path(directory) == ROOT
        return {
            n
            for n in names
            if n in NOT_CHECKED_OUT
            or n.endswith(".egg-info")
            or (top and n in NOT_CHECKED_OUT_AT_TOP)
        }

    shutil.copytree(ROOT, target, ignore=ignore, symlinks=True)
    return target


def gate_env(summary: Path, config: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MPBENCH_", "GITHUB_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["GITHUB_STEP_SUMMARY"] = str(summary)
    env["MPBENCH_CONFIG"] = config
    return env


def run_gate(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", SCRIPT_IN_CHECKOUT, *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.timeout(1500)
def test_first_run_creates_the_baseline_second_run_gates_against_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    repo = checkout(tmp_path)
    (repo / "tiny.toml").write_text(TINY, encoding="utf-8")
    summary = tmp_path / "step_summary.md"
    summary.touch()  # the runner creates it; compare only appends
    env = gate_env(summary, "tiny.toml")
    out, baseline = repo / "results" / "ci", repo / "results" / "ci-baseline"

    # First run, as on main: no baseline yet, this run becomes it. On a shared test machine its
    # cells may be contended, which the script refuses to save without --save-contended
    # (tests/compare/test_gate_contended.py tests that): this test is about the baseline's flow.
    first = run_gate(repo, env, "--save-baseline", "--save-contended")
    log = first.stdout + first.stderr
    assert first.returncode == 0, log
    assert "No baseline yet in results/ci-baseline: this run becomes it" in first.stdout
    assert "Baseline saved" in first.stdout
    assert (out / "compare.md").is_file() and (out / "compare.png").is_file()
    assert "Against the baseline" not in (out / "compare.md").read_text(encoding="utf-8")
    saved = (baseline / "results.jsonl").read_bytes()
    assert saved == (out / "results.jsonl").read_bytes()
    assert (baseline / "environment.json").is_file()
    first_summary = summary.read_text(encoding="utf-8")
    assert "No baseline yet" in first_summary
    assert "## mpbench compare" in first_summary

    # Second run, as on a pull request: a fresh run directory, gated against the baseline. On a
    # shared, noisy machine a gate may fail for real; what must hold is a clean verdict.
    shutil.rmtree(out)
    second = run_gate(repo, env)
    log = second.stdout + second.stderr
    assert second.returncode in (0, 1), log
    assert "Gating against the baseline in results/ci-baseline" in second.stdout
    report = (out / "compare.md").read_text(encoding="utf-8")
    assert "Against the baseline" in report
    page = (out / "compare.html").read_text(encoding="utf-8")  # the artifact to open
    assert "<h2>Against the baseline" in page and '<figure class="plot">' in page
    assert "max-slowdown" in report and "max-accuracy-delta" in report
    if second.returncode == 1:
        assert "FAIL " in second.stderr, log
    assert "Traceback" not in log
    assert (out / "compare.png").is_file()
    assert (baseline / "results.jsonl").read_bytes() == saved  # not asked to save: unchanged
    second_summary = summary.read_text(encoding="utf-8")
    assert second_summary.startswith(first_summary)
    assert "Against the baseline" in second_summary[len(first_summary) :]
