"""How big is an html page of a long history, and how long does it take to write and to draw?

Builds a store of `--commits` commits measured on two machines (2 × commits runs, torch float32
and bf16, 3 repeats each: the run directories of tests/history/test_html_history.py, added with
`mpbench store add`), then times `mpbench history STORE --format html --output FILE` (and
`--format markdown` beside it: what the history itself costs) in a new process each, and opens
the page in headless Chromium (tests/chromium.py): the page's size, the seconds to the load
event and to the whole open (start, load, DOM, screenshot), the requests and console errors
(both must be none). Prints the load average before: on a busy machine every time is longer.

    python benchmarks/html_pages.py [--commits 100] [--screenshot FILE.png]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "history")]

from chromium import CHROMIUM, open_page  # noqa: E402
from test_html_history import two_machine_history  # noqa: E402


def mpbench(*args: object) -> float:
    start = time.perf_counter()
    command = [sys.executable, "-m", "mpbench", *map(str, args)]
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--screenshot", type=Path, help="write the page's screenshot here")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        runs = two_machine_history(root / "runs", runs=args.commits)
        store = root / "store.sqlite"
        mpbench("store", "add", *runs, "--store", store)
        page = root / "history.html"
        html_s = mpbench("history", store, "--format", "html", "--output", page)
        markdown_s = mpbench("history", store, "--format", "markdown", "--output", root / "h.md")
        print(f"{len(runs)} runs: page {page.stat().st_size / 1000:.0f} KB")
        print(f"mpbench history --format html: {html_s:.2f} s (markdown: {markdown_s:.2f} s)")
        if CHROMIUM is None:
            print("chromium is not installed: no render time")
            return
        start = time.perf_counter()
        opened = open_page(page)
        whole = time.perf_counter() - start
        print(
            f"chromium: load event {opened.seconds:.2f} s, open, DOM and screenshot {whole:.2f} s;"
            f" {len(opened.requests)} requests, {len(opened.console_errors)} console errors"
        )
        if args.screenshot:
            args.screenshot.write_bytes(opened.png)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
