"""The `mpbench` command: parses, validates, delegates. No logic of its own.

Start-up must stay fast: this module imports no framework and no pandas; every verb imports
what it needs inside its own function.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

import typer
from typer.exceptions import Abort, Exit, TyperException

from mpbench import __version__
from mpbench.errors import InvalidInput
from mpbench.result_options import COMPARE_OPTIONS, HISTORY_OPTIONS, Option
from mpbench.settings import COMMAND_LINE, command_line_default, command_line_type

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
def detect(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable JSON (schema in docs)."),
    probe: bool = typer.Option(
        False, "--probe", help="Also import each installed framework in a child process."
    ),
    measure: bool = typer.Option(
        False,
        "--measure",
        help="Also measure matmul TFLOP/s per dtype with torch, and each framework's "
        "training step per policy (child processes; cached, and rated from).",
    ),
    device: str = typer.Option(
        "auto", "--device", help="What --measure measures: auto, cpu, cuda, cuda:N, mps."
    ),
) -> None:
    """Report the hardware, what each precision policy does on it, and a recommendation."""
    from mpbench.detect import collect
    from mpbench.detect.measure import attach_measurement, resolve_measure_device
    from mpbench.detect.render import print_report, report_json
    from mpbench.detect.steps import attach_steps

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
def data(
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Look here first."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable JSON."),
) -> None:
    """Show which datasets mpbench finds, where, and how to fetch the missing ones."""
    from mpbench.data.status import collect_status, print_status, status_json

    statuses = collect_status(data_dir)
    if as_json:
        typer.echo(status_json(statuses))
    else:
        print_status(statuses)


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

        raise typer.Exit(run_fleet(options, fleet))
    raise typer.Exit(run_matrix(options, _run_summary))


def _run_summary(records: list, console: Any, accuracy_margin_pp: float) -> None:
    """`mpbench run`'s closing table: compare's, imported only once the cells have run."""
    from mpbench.compare import print_run_summary

    print_run_summary(records, console, accuracy_margin_pp)


def _keyword(
    name: str, flags: tuple[str, ...], help: str, default: Any, annotation: Any
) -> inspect.Parameter:
    """One parameter of a command built from a table: an option, or without flags the
    positional argument; typer hands its value over by `name`."""
    declared = (
        typer.Option(default, *flags, help=help) if flags else typer.Argument(default, help=help)
    )
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=declared, annotation=annotation
    )


def _run_parameters() -> list[inspect.Parameter]:
    """`mpbench run`'s options: one per entry of mpbench/settings.py's COMMAND_LINE, so an
    option cannot be declared and then dropped on its way to the run's configuration."""
    return [
        _keyword(
            setting.name,
            setting.flags,
            setting.help,
            command_line_default(setting),
            command_line_type(setting),
        )
        for setting in COMMAND_LINE
    ]


run.__signature__ = inspect.Signature(_run_parameters())  # type: ignore[attr-defined]
app.command()(run)


def _table_parameters(table: tuple[Option, ...]) -> list[inspect.Parameter]:
    """A command's parameters from its option table (mpbench/result_options.py), which its
    options class is filled from: an option cannot be declared and then dropped."""
    return [
        _keyword(option.field, option.flags, option.help, option.default, option.annotation)
        for option in table
    ]


# --- compare: owned by the compare/ package; keep this function a thin delegate. ---
def compare(**given: Any) -> None:
    """Speed-up, memory and accuracy against float32; gates for CI (exit 1 on regression)."""
    from mpbench.compare import run_compare
    from mpbench.compare.options import command_line_options

    raise typer.Exit(run_compare(options=command_line_options(given)))


compare.__signature__ = inspect.Signature(_table_parameters(COMPARE_OPTIONS))  # type: ignore[attr-defined]
app.command()(compare)


# --- store and history: owned by the history/ package (docs/history.md). ---
def history(**given: Any) -> None:
    """Step times and speed-ups over commits, with change points; --ci gates on the newest run."""
    from mpbench.history.options import command_line_options
    from mpbench.history.run import run_history

    raise typer.Exit(run_history(command_line_options(given)))


history.__signature__ = inspect.Signature(_table_parameters(HISTORY_OPTIONS))  # type: ignore[attr-defined]
app.command()(history)


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
