"""Where compare and history write (--output, --plot, the step summary), checked before
anything is read.

A report must never replace what it reports on: `--output runs/x/results.jsonl` would swap the
measurements for markdown. So every destination is compared with every input file by identity
(os.path.samefile: symlinks and hard links included), and with each other, and checked to be
writable, before the results are read or anything is rendered.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mpbench.errors import InvalidInput
from mpbench.results.io import RESULTS_FILE, RUN_FILES

# What --plot writes: matplotlib's raster and vector formats that need nothing beyond it.
PLOT_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg")


def input_files(paths: Iterable[Path]) -> list[Path]:
    """Every file of the runs being compared: a run directory's results.jsonl, results.csv and
    environment.json (whether written yet or not: a report named results.csv in a run would be
    read as its data); a results file, and those of its run beside it."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += [path / name for name in RUN_FILES]
        else:
            files.append(path)
            if path.name == RESULTS_FILE:
                files += [path.parent / name for name in RUN_FILES if name != RESULTS_FILE]
    return files


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return a.resolve() == b.resolve()


def check_destinations(
    output: Path | None, plot: Path | None, inputs: Iterable[Path], what: str = "comparison"
) -> None:
    """InvalidInput (exit 2) for a destination that is an input, a directory, under a file,
    unwritable, the other destination, or (--plot) not an image format matplotlib writes."""
    inputs = list(inputs)
    if plot is not None:
        suffix = plot.suffix.lower().lstrip(".")
        if suffix not in PLOT_FORMATS:
            raise InvalidInput(
                f"--plot {plot}: {'.' + suffix if suffix else 'no'} extension; name a file "
                f"ending in {', '.join('.' + s for s in PLOT_FORMATS)}"
            )
    for option, path in (("--output", output), ("--plot", plot)):
        if path is None:
            continue
        for source in inputs:
            if same_file(path, source):
                spelled = os.path.abspath(path) == os.path.abspath(source)
                also = "" if spelled else f" ({source})"
                raise InvalidInput(
                    f"{option} {path} would overwrite an input of this {what}{also}; "
                    "write the report elsewhere"
                )
        _check_writable(option, path)
    if output is not None and plot is not None and same_file(output, plot):
        raise InvalidInput(f"--output and --plot name the same file ({output}); name two files")


def _check_writable(option: str, path: Path) -> None:
    if path.is_dir():
        raise InvalidInput(f"{option} {path} is a directory; name a file in it")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:  # missing folders are created
        parent = parent.parent
    if not parent.is_dir():
        raise InvalidInput(f"cannot write {option} {path}: {parent} is not a directory")
    target = path if path.exists() else parent
    if not os.access(target, os.W_OK):
        raise InvalidInput(f"cannot write {option} {path}: Permission denied ({target})")


def write_text(option: str, path: Path, text: str) -> None:
    """Write a report; an OSError that the checks could not foresee is still one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise InvalidInput(f"cannot write {option} {path}: {exc.strerror or exc}") from None


def append_step_summary(path: Path, text: str, inputs: Iterable[Path]) -> str | None:
    """Append to $GITHUB_STEP_SUMMARY; a warning (not a failure: the comparison stands) when
    that cannot be done. No folder is created: the runner creates the file itself."""
    if any(same_file(path, source) for source in inputs):
        return f"not appending the step summary to {path}: it is an input of this comparison"
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        return f"cannot append the step summary to {path}: {exc.strerror or exc}"
    return None
