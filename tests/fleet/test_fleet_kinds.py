"""Which machine a fleet's kind is: the kind's own name, unless its nodes carry one
(MPBENCH_MACHINE) that a site gave them. Kinds a site named alike are one machine: the
closing table shows one column, and a note says which kinds it stands for. The driver runs
as it is, on a stand-in cluster of this machine (tests/fleet/local_fleet.py): each machine's
`mpbench run` is a real process here, in this environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from builders import run_options
from frameworks import needs_torch

LOCAL_FLEET = Path(__file__).resolve().with_name("local_fleet.py")


@needs_torch
def test_kinds_a_site_named_alike_are_one_machine_and_a_note_says_which(tmp_path):
    done = subprocess.run(
        [sys.executable, str(LOCAL_FLEET), "run", *run_options(), "-f", "torch", "-p",
         "float32", "--on", "ray", "--fleet", "A,B", "--out", "fleet"],
        capture_output=True, text=True, cwd=tmp_path, timeout=240,
        env={**os.environ, "MPBENCH_MACHINE": "site"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for kind in ("A", "B"):
        (record,) = map(json.loads, (tmp_path / "fleet" / kind / "results.jsonl").open())
        assert record["config"]["machine"] == "site"  # the site's name wins over the kind
    assert "mpbench fleet · 1 machines" in done.stdout
    assert (
        "Note: kinds A, B are one machine (the same hardware and MPBENCH_MACHINE name): the "
        "table shows its newest run; give their nodes different names to see each"
    ) in done.stdout
