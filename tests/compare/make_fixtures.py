"""Regenerate the committed compare fixtures and expected outputs.

    .venv/bin/python tests/compare/make_fixtures.py

Run it only when the result schema or the report layout changes on purpose, then read the
diff of fixtures/expected/*.md and *.html before committing: those files are what the tests hold the
renderer to.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":  # a script: only pytest puts tests/ on sys.path (pyproject.toml)
    sys.path.insert(0, str(HERE.parent))

from builders import cpu_run, slower, write_run  # noqa: E402

from mpbench.results import write_csv, write_environment  # noqa: E402

FIXTURES = HERE / "fixtures"
CANDIDATE = FIXTURES / "cpu_run"
BASELINE = FIXTURES / "baseline_cpu"
EXPECTED = FIXTURES / "expected"

# What the golden gate report is run with (tests use the same list).
GATE_ARGS = [
    "--max-slowdown",
    "10%",
    "--max-memory-increase",
    "10%",
    "--max-accuracy-drop",
    "0.5",
    "--min-speedup",
    "bf16=1.5",
    "--max-accuracy-delta",
    "1.0",
]


def _write(run_dir: Path, records) -> None:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    write_run(run_dir, records)
    write_csv(run_dir, records)
    write_environment(
        run_dir,
        {"run_id": records[0].run_id, "command": "mpbench run", "python": "3.12", "fixture": True},
    )


def _markdown(*args: str, format: str = "markdown") -> str:
    command = [sys.executable, "-m", "mpbench", "compare", *args, "--format", format]
    done = subprocess.run(command, capture_output=True, text=True, cwd=HERE.parents[1])
    if done.returncode not in (0, 1):
        raise SystemExit(done.stderr)
    return done.stdout


def main() -> None:
    _write(CANDIDATE, cpu_run())
    # The baseline: the same machine, where torch/mnist_dense/float32 was 20 % faster.
    baseline = slower(
        cpu_run("20260220-093000-cpu"),
        1 / 1.2,
        framework="torch",
        workload="mnist_dense",
        policy="float32",
    )
    _write(BASELINE, baseline)
    EXPECTED.mkdir(parents=True, exist_ok=True)
    (EXPECTED / "cpu_run.md").write_text(_markdown(str(CANDIDATE)), encoding="utf-8")
    gated = _markdown(str(CANDIDATE), "--baseline", str(BASELINE), *GATE_ARGS)
    (EXPECTED / "cpu_run_vs_baseline.md").write_text(gated, encoding="utf-8")
    write_html()


def write_html() -> None:
    """The html pages of the same two reports (tests/compare/test_html_compare.py)."""
    page = _markdown(str(CANDIDATE), format="html")
    (EXPECTED / "cpu_run.html").write_text(page, encoding="utf-8")
    gated = _markdown(str(CANDIDATE), "--baseline", str(BASELINE), *GATE_ARGS, format="html")
    (EXPECTED / "cpu_run_vs_baseline.html").write_text(gated, encoding="utf-8")


if __name__ == "__main__":
    main()
