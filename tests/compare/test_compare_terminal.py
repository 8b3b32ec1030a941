"""`mpbench compare` in a real terminal of 80, 100 and 120 columns (tmux), as a user sees it:
no line wider than the terminal, no number cut or wrapped, the essential columns kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from compare_helpers import FIXTURES

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def captured(width: int, *args: str) -> str:
    """What a `width`-column terminal shows after `mpbench ARGS` (the whole scrollback)."""
    session = f"mpbench-{uuid.uuid4().hex[:8]}"
    done = Path(f"/tmp/{session}.done")
    command = f"{sys.executable} -m mpbench {' '.join(args)}; touch {done}"
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    # A tmux server of its own (-L): two test runs at once (CI beside a developer's) once
    # raced to start the one default server, and new-session failed with exit 1.
    tmux = ["tmux", "-L", session, "-f", "/dev/null"]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", session, "-x", str(width), "-y", "50", command],
        check=True,
        env=env,
    )
    try:
        subprocess.run([*tmux, "set-option", "-t", session, "remain-on-exit", "on"], check=True)
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, "mpbench did not finish in tmux"
            time.sleep(0.1)
        pane = subprocess.run(
            [*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", session],
            capture_output=True,
            text=True,
            check=True,
        )
        return pane.stdout
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        done.unlink(missing_ok=True)


@pytest.mark.parametrize("width", [80, 100, 120])
def test_tables_fit_a_real_terminal(width: int) -> None:
    text = captured(width, "compare", str(FIXTURES / "cpu_run"))
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    headers = [line for line in lines if line.lstrip().startswith("cell ")]
    assert len(headers) == 2  # one table per workload, not stacked blocks
    for header in headers:
        assert "speed-up" in header and "status" in header
    # Whole numbers and whole reasons' markers: nothing cut ("…") or wrapped mid-value.
    assert "…" not in text
    for value in ("2.45× (2.41–2.52)†", "2.14× (2.09–2.17)†", "skipped [1]"):
        assert value in text, value
    rows = [  # table rows; verdict and legend lines say "name: ..."
        line for line in lines if line.lstrip().startswith(("torch ", "tf ")) and ": " not in line
    ]
    assert len(rows) == 16  # 2 workloads × 2 frameworks × 4 policies, one line each
    assert "Verdict" in text and "bf16: 2.45× faster" in text
