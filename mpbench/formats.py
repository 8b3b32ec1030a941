"""The output formats of the commands (compare, history; detect and data: table and json), one
row each: the name `--format` takes, whether it is for people or machines, and which commands
write it. `--format`'s check and help read this table; each command's renderers are its own
(compare/run.py's `render`, history/render.py), imported by name only when a report is written.

A leaf module (it imports errors only): the CLI reads it at start-up without importing
compare (numpy, the renderers).
"""

from __future__ import annotations

from dataclasses import dataclass

from mpbench.errors import InvalidInput, unknown_choice

COMPARE, HISTORY = "compare", "history"
# detect and data write their report as a table or as JSON (detect/render.py, data/status.py).
DETECT, DATA = "detect", "data"


@dataclass(frozen=True)
class OutputFormat:
    name: str  # as --format takes it
    # For people (the table, markdown): a failed gate is in what they read. A machine format
    # (or any format written to --output) repeats each failure on stderr for the CI log.
    human: bool
    commands: tuple[str, ...] = (COMPARE, HISTORY)  # the commands that write it


OUTPUT_FORMATS: tuple[OutputFormat, ...] = (
    OutputFormat("table", True, (COMPARE, HISTORY, DETECT, DATA)),
    OutputFormat("markdown", True),
    OutputFormat("json", False, (COMPARE, HISTORY, DETECT, DATA)),
    OutputFormat("csv", False),
    # github-action-benchmark's input: one value per cell of one run, not a history.
    OutputFormat("benchmark-action", False, (COMPARE,)),
    # One self-contained page for a browser: read there, not in the CI log, which gets the
    # failures on stderr as from a machine format.
    OutputFormat("html", False),
)
BY_NAME = {output.name: output for output in OUTPUT_FORMATS}
FORMATS = tuple(BY_NAME)  # compare writes every format


def names(command: str = COMPARE) -> tuple[str, ...]:
    return tuple(f.name for f in OUTPUT_FORMATS if command in f.commands)


def help_text(command: str = COMPARE) -> str:
    """--format's help: `table, markdown, json, csv or benchmark-action.`"""
    *first, last = names(command)
    return f"{', '.join(first)} or {last}."


def parse_format(text: str, command: str = COMPARE) -> str:
    """--format's check, whatever made the options: one of the command's format names."""
    value = text.strip().lower()
    if value not in names(command):
        raise InvalidInput(f"--format: {unknown_choice('format', text, names(command))}")
    return value
