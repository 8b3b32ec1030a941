"""`mpbench run --on ... --out OUT --resume`, the command Ctrl-C prints, continues the fleet
as its first command started it: into the store that command named (fleet.json keeps it, as
an absolute path), unless the resume names another; fleet.json keeps the first command's
line and lists each resume beside it. The driver runs as it is, on a stand-in cluster of this
machine (tests/fleet/local_fleet.py): each machine's `mpbench run` is a real process here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from builders import run_options
from cli import run_mpbench
from frameworks import needs_torch

from mpbench.results.store import stored_runs

LOCAL_FLEET = Path(__file__).resolve().with_name("local_fleet.py")
TWO_POLICIES = ["-f", "torch", "-p", "float32", "-p", "mixed_bfloat16"]


def local_fleet(*args: object, cwd: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(LOCAL_FLEET), "run", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def records(run_dir: Path) -> int:
    path = run_dir / "results.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@needs_torch
def test_a_resumed_fleet_adds_its_machines_to_the_store_the_first_command_named(tmp_path):
    out, store = tmp_path / "fleet", tmp_path / "store.sqlite"
    first = [*run_options(), *TWO_POLICIES, "--on", "ray", "--fleet", "A,B", "--out", "fleet",
             "--store", "store.sqlite"]  # fmt: skip
    # Both machines' bf16 cells hang: Ctrl-C once each has sent its float32.
    driver = local_fleet(*first, cwd=tmp_path, env={"MPBENCH_FAULT": "hang@bfloat16"})
    try:
        end = time.monotonic() + 120
        while not (records(out / "A") and records(out / "B")) and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(0.5)
        driver.send_signal(signal.SIGINT)
        stdout, stderr = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert driver.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "continue with: mpbench run --on ray --out fleet --resume" in stdout
    assert not store.exists()  # no machine finished
    # The command it printed, run from another folder: both machines finish, into the store.
    (tmp_path / "elsewhere").mkdir()
    resume = ["--on", "ray", "--out", "../fleet", "--resume"]
    resumed = local_fleet(*resume, cwd=tmp_path / "elsewhere")
    stdout, stderr = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, stdout[-2000:] + stderr[-2000:]
    for kind in ("A", "B"):
        assert f"{kind}: added in {store} (2 records)" in stdout, stdout
    assert sorted((r.run_id[-1], r.record_count) for r in stored_runs(store)) == [
        ("A", 2),
        ("B", 2),
    ]
    written = json.loads((out / "fleet.json").read_text())
    assert written["command_line"] == " ".join(["mpbench", "run", *first])
    assert written["store"] == str(store)
    assert [r["command_line"] for r in written["resumes"]] == ["mpbench run " + " ".join(resume)]
    # A resume that names a store adds there; fleet.json keeps the first command's.
    other = tmp_path / "other.sqlite"
    again = local_fleet(*resume, "--store", other, cwd=tmp_path / "elsewhere")
    stdout, stderr = again.communicate(timeout=240)
    assert again.returncode == 0, stdout[-2000:] + stderr[-2000:]
    assert f"A: added in {other}" in stdout and f"B: added in {other}" in stdout, stdout
    written = json.loads((out / "fleet.json").read_text())
    assert written["command_line"] == " ".join(["mpbench", "run", *first])
    assert written["store"] == str(store) and written["resumes"][1]["store"] == str(other)


def test_a_damaged_fleet_json_is_one_line_before_any_cluster(tmp_path):
    out = tmp_path / "fleet"
    out.mkdir()
    (out / "fleet.json").write_text('{"engine": "ray", "command_')
    done = run_mpbench("run", "--on", "ray", "--out", out, "--resume", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"mpbench: error: {out / 'fleet.json'}: damaged (not JSON: ")
    assert done.stderr.rstrip().endswith("; restore it from a copy")
