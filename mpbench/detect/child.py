"""How detect's child processes (`--probe`, `--measure`) answer their parent: one line on
stdout, a marker then JSON, printed last; anything else the child or its libraries print is
ignored. A child that dies before answering is reported with its last stderr line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROBE_MARKER = "MPBENCH_PROBE "
MEASURE_MARKER = "MPBENCH_MEASURE "
STEP_MARKER = "MPBENCH_STEP "


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def answer(marker: str, work: Callable[[], dict[str, Any]]) -> int:
    """Child side: run `work` and print its result; an exception (a failed import, a crashed
    device) is the answer, not a crash."""
    try:
        result = work()
    except BaseException as error:
        result = {"ok": False, "error": one_line(error)}
    sys.stdout.flush()
    print(marker + json.dumps(result), flush=True)
    return 0


@dataclass
class ChildAnswer:
    result: dict[str, Any] | None  # None: no answer (see error)
    seconds: float
    error: str | None = None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_child(command: list[str], marker: str, timeout: float, env: dict[str, str]) -> ChildAnswer:
    """Parent side: run the child and read its answer; never raises."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return ChildAnswer(None, timeout, f"timed out after {timeout:.0f} s")
    except OSError as error:
        return ChildAnswer(None, 0.0, f"could not start: {error}")
    seconds = round(time.perf_counter() - start, 2)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(marker):
            try:
                return ChildAnswer(json.loads(line[len(marker) :]), seconds)
            except ValueError:
                break
    # No answer: the child died (segfault in a CUDA library, killed, ...).
    why = _last_line(done.stderr) or f"exit status {done.returncode}"
    return ChildAnswer(None, seconds, f"process failed: {why}")
