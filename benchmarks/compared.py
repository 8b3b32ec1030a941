"""What the benchmarks that run mpbench read back: `mpbench compare RUN --format json`'s cells,
through the CLI as a user would get them (one place, so each script reads the report alike)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def compared_cells(run_dir: Path) -> list[dict]:
    """The cells of `mpbench compare RUN_DIR --format json`, each with its speed-up and interval."""
    report = subprocess.run(
        [sys.executable, "-m", "mpbench", "compare", str(run_dir), "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(report.stdout)["cells"]
