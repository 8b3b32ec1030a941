"""The README's "Results in pandas" example runs as written, from the repository root."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pandas")
ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_pandas_example_runs() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Results in pandas") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "mixed_bfloat16" in done.stdout


def test_the_readme_recipe_keeps_recipe_and_fallback_cells_apart(tmp_path: Path) -> None:
    """On a run with accumulated, compiled, static-scale, batch-scaled and fallback cells the
    recipe prints each of them on its own row, never averaged into the plain cell."""
    from builders import variant_run, write_run

    run = write_run(tmp_path / "run", variant_run())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Results in pandas") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    fixture = '"tests/compare/fixtures/cpu_run"'
    assert fixture in code
    code = code.replace(fixture, repr(str(run)))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for variant in ("[accumulate=2]", "[compile]", "[loss scale 1024]", "@256", "(fallback)"):
        assert variant in done.stdout, variant
    # The plain bf16 median step, 0.98 ms, not the mean of every bf16 cell (1.32 ms).
    assert "0.98" in done.stdout and "1.32" not in done.stdout


def test_load_one_liner_from_the_issue() -> None:
    one_liner = "import mpbench.results as r; print(r.load('tests/compare/fixtures/cpu_run').shape)"
    done = subprocess.run(
        [sys.executable, "-c", one_liner], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows, columns = ast.literal_eval(done.stdout.strip())  # "(16, N)"
    assert rows == 16 and columns > 50
