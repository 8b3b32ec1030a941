"""The options of the commands that read results, `mpbench compare` and `mpbench history`,
declared once as tables of mpbench/options.py's Option (asv's commands/common_args.py is the
model).

Both commands read the same sources with the same filters (SOURCE_OPTIONS) and write the same
way (output_options: --format, --output, declared once in options.py, and --plot): cli.py
builds each command from its table, and compare/options.py's and history/options.py's
dataclasses have a field per entry, so an option cannot be declared and then dropped on its
way, and the two commands cannot drift apart. compare adds its gates, history its series and
its CI gate.

A leaf under cli.py, compare/ and history/ (it imports formats, options, policies and the value
parsers of parsers.py only): the CLI reads the tables at start-up without importing compare
(numpy, the renderers).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mpbench.errors import InvalidInput
from mpbench.formats import COMPARE, HISTORY
from mpbench.options import DEFAULT_STORE as DEFAULT_STORE  # where history reads it
from mpbench.options import OUTPUT, Option, format_option
from mpbench.parsers import (
    parse_choice,
    parse_fraction,
    parse_min_scaling_efficiency,
    parse_min_speedup,
    parse_points,
    parse_policy,
)


def _paths(option: str, paths: list[Path] | None) -> list[Path]:
    return list(paths or [])


def _names(option: str, names: list[str] | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in names or [] if n.strip())


def _policy_names(option: str, names: list[str] | None) -> tuple[str, ...]:
    """Canonical policy names (`bf16` -> `mixed_bfloat16`); auto and all name no records."""
    return tuple(parse_policy(option, name) for name in _names(option, names))


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    return lambda option, text: parse_choice(option, text, choices)


def _penalty(option: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise InvalidInput(f"{option} {value:g}: must be above 0")
    return value


# Which runs and records to read, the same for both commands (results/sources.py reads them).
SOURCE_OPTIONS: tuple[Option, ...] = (
    Option(
        "devices",
        ("--device",),
        "Only records of devices whose name holds this (h200, xeon), or whose hardware "
        "fingerprint it is: whole, or as the tables show it, its first 12 characters or more "
        "(repeatable).",
        kind=list[str],
        parse=_names,
    ),
    Option(
        "frameworks",
        ("--framework", "-f"),
        "Only this framework's records: torch, tensorflow (repeatable).",
        kind=list[str],
        parse=_names,
    ),
    Option(
        "workloads",
        ("--workload", "-w"),
        "Only this workload's records (repeatable).",
        kind=list[str],
        parse=_names,
    ),
    Option(
        "policies",
        ("--policy", "-p"),
        "Only these policies (repeatable; compare: add fp32 for speed-ups, history keeps "
        "float32's records for them).",
        kind=list[str],
        parse=_policy_names,
    ),
    Option(
        "commits",
        ("--commits",),
        "The runs from commit A to B, both included: A..B, A.. or ..B (the commits the runs "
        "recorded, or a store was told).",
    ),
    Option("since", ("--since",), "The runs from this date or time on (ISO 8601)."),
    Option("until", ("--until",), "The runs up to this date or time (included)."),
)


def output_options(command: str) -> tuple[Option, ...]:
    """Where and how a command writes: --format (the command's formats, mpbench/formats.py),
    --output and --plot; checked before anything is read (compare/destinations.py)."""
    return (
        # Checked again when the command starts (formats.parse_format), so that options made
        # in code meet the same check.
        format_option(command),
        OUTPUT,
        Option(
            "plot",
            ("--plot",),
            (
                "Write a figure: bars with intervals, step-time boxes, loss curves"
                if command == COMPARE
                else "Write a figure: each series over the runs, its change points marked"
            )
            + " (.png, .svg, .pdf, .jpg or .jpeg).",
            kind=Path,
        ),
    )


# In `mpbench compare --help`'s order. A new option: one entry here and its CompareOptions
# field (tests/compare/test_compare_options_table.py checks they match, and that each reaches
# CompareOptions from the command line); a new baseline gate also needs its row in
# compare/gates.py.
COMPARE_OPTIONS: tuple[Option, ...] = (
    Option(
        "paths",
        (),
        "Result files, run directories or stores (mpbench store add; default: the latest "
        "run in --results-dir).",
        kind=list[Path],
        parse=_paths,
    ),
    Option(
        "results_dir",
        ("--results-dir",),
        "Where to look for the latest run.",
        kind=Path,
        default=Path("results"),
    ),
    *SOURCE_OPTIONS,
    Option(
        "pool",
        ("--pool",),
        "Pool every run read as repeats of one experiment (default: a store's runs, or runs "
        "of several commits, are a history, and each machine's newest run is read).",
        kind=bool,
        default=False,
    ),
    Option(
        "baseline",
        ("--baseline", "-b"),
        "Baseline results file, run directory or store to gate against (less the run "
        "compared, which is never its own baseline).",
        kind=Path,
    ),
    Option(
        "max_slowdown",
        ("--max-slowdown",),
        "Median step time per cell vs baseline: 10% or 0.1.",
        kind=list[str],
        once=True,
        parse=parse_fraction,
    ),
    Option(
        "max_memory_increase",
        ("--max-memory-increase",),
        "Peak memory per cell vs baseline: 10% or 0.1.",
        kind=list[str],
        once=True,
        parse=parse_fraction,
    ),
    Option(
        "max_accuracy_drop_pp",
        ("--max-accuracy-drop",),
        "Test accuracy per cell vs baseline, in points: 0.5.",
        kind=list[str],
        once=True,
        parse=parse_points,
    ),
    Option(
        "min_speedup",
        ("--min-speedup",),
        "POLICY=X: speed-up vs float32 of the same run, e.g. bf16=1.5; one policy per "
        "option (repeatable); POLICY@N=X gates world size N only, e.g. bf16@2=1.2; "
        "fp8:bf16=X gates fp8 against bf16 of the same run.",
        kind=list[str],
        parse=lambda option, specs: parse_min_speedup(specs),
    ),
    Option(
        "min_scaling_efficiency",
        ("--min-scaling-efficiency",),
        "N=X: weak-scaling efficiency at world size N vs world size 1 of the same run, "
        "e.g. 2=0.8 or 2=80%; POLICY@N=X for one policy (repeatable).",
        kind=list[str],
        parse=lambda option, specs: parse_min_scaling_efficiency(specs),
    ),
    Option(
        "max_accuracy_delta_pp",
        ("--max-accuracy-delta",),
        "Accuracy vs float32 of the same run: fail a cell shown worse by more than X points "
        "(its whole 95 % interval below -X), e.g. 1.",
        kind=list[str],
        once=True,
        parse=parse_points,
    ),
    Option(
        "accuracy_margin_pp",
        ("--accuracy-margin",),
        "Points a policy's accuracy may fall short of float32's and still be 'no worse' "
        "(its whole 95 % interval above -X; default: the run's accuracy_margin, else 1).",
        kind=list[str],
        once=True,
        parse=parse_points,
    ),
    Option(
        "allow_different_hardware",
        ("--allow-different-hardware",),
        "Compare to a baseline from another machine.",
        kind=bool,
        default=False,
    ),
    Option(
        "require_conclusive",
        ("--require-conclusive",),
        "Fail a gate whose 95 % interval straddles its limit (inconclusive), not only "
        "one whose whole interval is past it.",
        kind=bool,
        default=False,
    ),
    *output_options(COMPARE),
)

BY = ("commit", "date", "device")
METRICS = {"all": None, "step-time": "step time", "speed-up": "speed-up"}

# In `mpbench history --help`'s order; history/options.py's HistoryOptions has a field each.
HISTORY_OPTIONS: tuple[Option, ...] = (
    Option(
        "paths",
        (),
        f"Stores and/or run directories (default: {DEFAULT_STORE}).",
        kind=list[Path],
        parse=_paths,
    ),
    *SOURCE_OPTIONS,
    Option(
        "by",
        ("--by",),
        "commit (history in commit order), date (in the runs' order in time), or device "
        "(the fleet: each machine's newest run side by side).",
        default="commit",
        parse=_choice(BY),
    ),
    Option(
        "metric",
        ("--metric",),
        "all, step-time or speed-up.",
        default="all",
        parse=_choice(tuple(METRICS)),
    ),
    Option(
        "points",
        ("--points",),
        "Also list every point of every series.",
        kind=bool,
        default=False,
    ),
    Option(
        "ci",
        ("--ci",),
        "Exit 1 when the newest run brings a regression past --threshold, and say why on stderr.",
        kind=bool,
        default=False,
    ),
    Option(
        "threshold",
        ("--threshold",),
        "--ci's limit on a regression: 5% or 0.05.",
        default="5%",
        parse=parse_fraction,
    ),
    Option(
        "penalty",
        ("--penalty",),
        "Change-point penalty × ln(points) (default 5; docs/history.md).",
        kind=float,
        parse=_penalty,
    ),
    Option(
        "repo",
        ("--repo",),
        "Where run directories' commits are looked up (default: here).",
        kind=Path,
    ),
    *output_options(HISTORY),
)
