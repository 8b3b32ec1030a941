"""The `mpbench` command: parses, validates, delegates. No logic of its own.

Every command is built the same way, from its table of options (mpbench/options.py's model:
`@takes(TABLE)`), and called with each value through its option's parser.

Start-up must stay fast: this module imports no framework and no pandas; every verb imports
what it needs inside its own function.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer
from typer.exceptions import Abort, Exit, TyperException

from mpbench import __version__
from mpbench.errors import InvalidInput
from mpbench.options import DATA_OPTIONS, DETECT_OPTIONS, chosen_format, takes
from mpbench.result_options import COMPARE_OPTIONS, HISTORY_OPTIONS
from mpbench.settings import RUN_OPTIONS

app = typer.Typer(
    name="mpbench",
    help="Measure what float16, bfloat16 and TF32 really buy you in training, on this machine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mpbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """mpbench: detect, run, compare."""


@app.command()
@takes(DETECT_OPTIONS)
def detect(format: str, json: bool, probe: bool, measure: bool, device: str) -> None:
    """Report the hardware, what each precision policy does on it, and a recommendation."""
    from mpbench.detect import collect
    from mpbench.detect.measure import attach_measurement, resolve_measure_device
    from mpbench.detect.render import print_report, report_json
    from mpbench.detect.steps import attach_steps

    as_json = chosen_format(format, json) == "json"
    report = collect(probe=probe, tuning=True)
    if measure:
        chosen = resolve_measure_device(device, report)  # InvalidInput (exit 2) if bad
        if not as_json:
            print(
                f"Measuring matmul TFLOP/s on {chosen}, then a training step per framework "
                "and policy (a minute or two) ...",
                file=sys.stderr,
            )
        attach_measurement(report, chosen)
        attach_steps(report, chosen)
    elif device != "auto":
        raise InvalidInput("--device only applies with --measure")
    if as_json:
        typer.echo(report_json(report))
    else:
        print_report(report)
    if measure and not (report.measured or {}).get("ok"):
        raise typer.Exit(1)


@app.command()
@takes(DATA_OPTIONS)
def data(data_dir: Path | None, format: str, json: bool) -> None:
    """Show which datasets mpbench finds, where, and how to fetch the missing ones."""
    from mpbench.data.status import collect_status, print_status, status_json

    statuses = collect_status(data_dir)
    if chosen_format(format, json) == "json":
        typer.echo(status_json(statuses))
    else:
        print_status(statuses)


@app.command()
@takes(RUN_OPTIONS)
def run(**given: Any) -> None:
    """Train the reference workloads under each precision policy, one process per cell."""
    from mpbench.fleet.options import fleet_options
    from mpbench.runner.config import command_line_options
    from mpbench.runner.loop import run_matrix

    options = command_line_options(given, " ".join(["mpbench", *sys.argv[1:]]))
    # --fleet, --fleet-timeout or --store without --on: one line, exit 2 (fleet/options.py)
    fleet = fleet_options(options.on, options.fleet, options.fleet_timeout, options.store)
    if fleet is not None:
        from mpbench.fleet import run_fleet  # Ray or submitit only with --on (docs/fleet.md)

        raise typer.Exit(run_fleet(options, fleet, _fleet_summary))
    raise typer.Exit(run_matrix(options, _run_summary))


def _run_summary(records: list, console: Any, accuracy_margin_pp: float) -> None:
    """`mpbench run`'s closing table: compare's, imported only once the cells have run."""
    from mpbench.compare import print_run_summary

    print_run_summary(records, console, accuracy_margin_pp)


def _fleet_summary(run_dirs: list[Path]) -> None:
    """The fleet's closing table: `mpbench history --by device` of its finished machines'
    runs, one column each (InvalidInput where none has a finished cell to compare)."""
    from mpbench.history.options import HistoryOptions
    from mpbench.history.run import run_history

    run_history(HistoryOptions(paths=run_dirs, by="device"))


# --- compare: owned by the compare/ package; keep this function a thin delegate. ---
@app.command()
@takes(COMPARE_OPTIONS)
def compare(**options: Any) -> None:
    """Speed-up, memory and accuracy against float32; gates for CI (exit 1 on regression)."""
    from mpbench.compare import run_compare
    from mpbench.compare.options import CompareOptions

    raise typer.Exit(run_compare(options=CompareOptions(**options)))


# --- store and history: owned by the history/ package (docs/history.md). ---
@app.command()
@takes(HISTORY_OPTIONS)
def history(**options: Any) -> None:
    """Step times and speed-ups over commits, with change points; --ci gates on the newest run."""
    from mpbench.history.options import HistoryOptions
    from mpbench.history.run import run_history

    raise typer.Exit(run_history(HistoryOptions(**options)))


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _never_fail_on_encoding() -> None:
    """A terminal or pipe that cannot encode a character (LC_ALL=C, PYTHONIOENCODING=ascii)
    gets a replacement for it rather than a UnicodeEncodeError after the cells ran; the
    renderers also pick ASCII symbols there (mpbench.compare), so this is the last resort."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and stream.errors == "strict":
            reconfigure(errors="replace")


from mpbench.history.store_cli import store_app  # noqa: E402

app.add_typer(store_app, name="store")


def main(argv: list[str] | None = None) -> int:
    """Entry point: bad input becomes one line on stderr and exit code 2, never a traceback."""
    _never_fail_on_encoding()
    try:
        result = app(args=argv, prog_name="mpbench", standalone_mode=False)
    except TyperException as exc:  # typer's usage errors: unknown option, bad value, ...
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"mpbench: error: {_one_line(exc.format_message())}{hint}", file=sys.stderr)
        return 2
    except InvalidInput as exc:
        print(f"mpbench: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # a disk or a folder failed us where no layer said more
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"mpbench: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    except Exit as exc:
        return exc.exit_code
    except (Abort, KeyboardInterrupt) as exc:
        from mpbench.runner.signals import interrupted_exit_code

        print("mpbench: interrupted", file=sys.stderr)
        return interrupted_exit_code(exc)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
