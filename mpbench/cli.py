"""The `mpbench` command: parses, validates, delegates. No logic of its own.

Start-up must stay fast: this module imports no framework and no pandas; every verb imports
what it needs inside its own function.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from typer.exceptions import Abort, Exit, TyperException

from mpbench import __version__
from mpbench.errors import InvalidInput

app = typer.Typer(
    name="mpbench",
    help="Measure what float16, bfloat16 and TF32 really buy you in training, on this machine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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
        help="Also measure matmul TFLOP/s per dtype with torch (a child process; cached).",
    ),
    device: str = typer.Option(
        "auto", "--device", help="What --measure measures: auto, cpu, cuda, cuda:N, mps."
    ),
) -> None:
    """Report the hardware, what each precision policy does on it, and a recommendation."""
    from mpbench.detect import collect
    from mpbench.detect.measure import attach_measurement, resolve_measure_device
    from mpbench.detect.render import print_report, report_json

    report = collect(probe=probe, tuning=True)
    if measure:
        chosen = resolve_measure_device(device, report)  # InvalidInput (exit 2) if bad
        if not as_json:
            print(f"Measuring matmul TFLOP/s on {chosen} (about a minute) ...", file=sys.stderr)
        attach_measurement(report, chosen)
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


@app.command()
def run(
    config: str | None = typer.Option(
        None, "--config", "-c", help="TOML run configuration (default: configs/default.toml)."
    ),
    framework: list[str] | None = typer.Option(
        None, "--framework", "-f", help="torch, tensorflow or all (default: installed ones)."
    ),
    workload: list[str] | None = typer.Option(
        None, "--workload", "-w", help="mnist_dense, cifar10_cnn (repeatable) (default: both)."
    ),
    policy: list[str] | None = typer.Option(
        None,
        "--policy",
        "-p",
        help="float32|fp32, tf32, mixed_float16|fp16, mixed_bfloat16|bf16, auto, all "
        "(repeatable) (default: auto).",
    ),
    device: str | None = typer.Option(None, "--device", help="auto, cpu, cuda, cuda:N, mps."),
    epochs: int | None = typer.Option(
        None,
        "--epochs",
        help="Epochs of timed steps per cell (at most --max-steps of them); the end-to-end "
        "window then trains about as many again (docs/measurement.md, 'Steps trained').",
    ),
    max_steps: int | None = typer.Option(
        None,
        "--max-steps",
        help="Cap on the timed steps per cell (warm-up included). After them the end-to-end "
        "window trains about as many again, in whole epochs (rounded up) once that is an "
        "epoch or more: the record's end_to_end.steps.",
    ),
    warmup_steps: int | None = typer.Option(
        None, "--warmup-steps", help="Leading steps left out of the timing statistics."
    ),
    batch_size: int | None = typer.Option(None, "--batch-size", help="Samples per step."),
    units: int | None = typer.Option(None, "--units", help="Dense width (mnist_dense)."),
    repeat: str | None = typer.Option(
        None,
        "--repeat",
        help="Runs of each cell, each its own process, interleaved across policies; "
        "intervals come from them (3 or more for gates that mean something). auto: a pilot "
        "of 5 rounds sizes the run for --precision (Stein's two-stage rule).",
    ),
    precision: str | None = typer.Option(
        None,
        "--precision",
        help="--repeat auto: target half-width of every speed-up's 95 % interval, 5% or "
        "0.05 (default: 5%).",
    ),
    max_repeats: int | None = typer.Option(
        None, "--max-repeats", help="--repeat auto: the most rounds (default: 10)."
    ),
    time_budget: str | None = typer.Option(
        None,
        "--time-budget",
        help="--repeat auto: no round starts that would end past this, in seconds or with a "
        "unit: 600, 10m, 1.5h (default: none).",
    ),
    seed: int | None = typer.Option(None, "--seed", help="Seed for data, weights and order."),
    data_mode: str | None = typer.Option(None, "--data", help="auto, real or synthetic."),
    data_dir: str | None = typer.Option(
        None, "--data-dir", help="Look for datasets here first (a folder or the file itself)."
    ),
    loop: str | None = typer.Option(None, "--loop", help="TensorFlow training loop: fit|custom."),
    jit: str | None = typer.Option(None, "--jit", help="TensorFlow XLA jit_compile: on|off."),
    loss_scale: list[str] | None = typer.Option(
        None,
        "--loss-scale",
        help="mixed_float16 loss scale: dynamic, or a number for a static scale (steps with "
        "non-finite gradients are skipped and counted; more than half skipped: diverged). "
        "Several (dynamic,1024 or repeated): one fp16 cell each (default: dynamic).",
    ),
    accumulate: list[str] | None = typer.Option(
        None,
        "--accumulate",
        help="Micro-batches per optimizer step (gradient accumulation); --batch-size stays "
        "the micro-batch, the effective batch is N times it. Several (1,4): one cell each "
        "(default: 1).",
    ),
    batch_scale_16bit: list[str] | None = typer.Option(
        None,
        "--batch-scale-16bit",
        help="Run the 16-bit policies (fp16, bf16) at K times the batch size; float32 and "
        "tf32 stay at 1x, and compare shows the speed-ups at the larger batch. Several (1,2): "
        "one 16-bit cell each (default: 1).",
    ),
    compile_model: bool | None = typer.Option(
        None,
        "--compile/--no-compile",
        help="PyTorch: torch.compile the model (compile time and recompiles recorded, the "
        "compiling step left out of the statistics). TensorFlow's switch is --jit.",
    ),
    also_eager: bool = typer.Option(
        False,
        "--also-eager",
        help="With --compile: run every torch cell eager too, as its own cell, so compare "
        "shows both.",
    ),
    on_diverge: str | None = typer.Option(
        None,
        "--on-diverge",
        help="A cell that diverges (non-finite loss, loss scale below 1, most steps skipped): "
        "stop there, or fallback: run it again one step down the precision ladder the device "
        "supports (fp16 -> bf16 -> fp32), recorded as a fallback of it (default: stop).",
    ),
    nproc: list[str] | None = typer.Option(
        None,
        "--nproc",
        help="Data-parallel replicas per node: torch runs the cell as a torchrun job (DDP; "
        "gloo on CPU, nccl on CUDA), TensorFlow under MirroredStrategy (logical CPUs on a "
        "CPU). Several (1,2): one cell each, scaling efficiency against 1 (default: 1).",
    ),
    grad_comm: str | None = typer.Option(
        None,
        "--grad-comm",
        help="torch DDP gradient all-reduce precision: fp32 (no hook), fp16 or bf16 "
        "(compression hooks) (default: fp32).",
    ),
    nnodes: int | None = typer.Option(
        None, "--nnodes", help="torch: nodes of each data-parallel job (needs --rdzv-endpoint)."
    ),
    node_rank: int | None = typer.Option(
        None, "--node-rank", help="torch: this node's rank among --nnodes (static rendezvous)."
    ),
    rdzv_endpoint: str | None = typer.Option(
        None, "--rdzv-endpoint", help="torch: HOST:PORT where the nodes meet (every node the same)."
    ),
    out: str | None = typer.Option(
        None, "--out", "-o", help="Run directory (default: results/<run-id>)."
    ),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds per cell."),
    threads: int | None = typer.Option(
        None, "--threads", help="Intra/inter-op threads per cell (default: the cores)."
    ),
    measure_peak: bool = typer.Option(
        False,
        "--measure-peak",
        help="Measure the device's matmul peak (detect --measure) if not cached, for mfu_measured.",
    ),
    resume: bool = typer.Option(False, "--resume", help="Skip cells already done in --out."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show framework logs."),
) -> None:
    """Train the reference workloads under each precision policy, one process per cell."""
    from mpbench.runner import RunOptions, run_matrix
    from mpbench.runner.config import compile_axis, path_option

    options = RunOptions(
        config=path_option("--config", config),
        frameworks=framework or [],
        workloads=workload or [],
        policies=policy or [],
        device=device,
        epochs=epochs,
        max_steps=max_steps,
        warmup_steps=warmup_steps,
        batch_size=batch_size,
        units=units,
        repeat=repeat,
        precision=precision,
        max_repeats=max_repeats,
        time_budget=time_budget,
        seed=seed,
        data=data_mode,
        data_dir=path_option("--data-dir", data_dir),
        loop=loop,
        jit=jit,
        loss_scale=loss_scale or [],
        accumulate=accumulate or [],
        batch_scale_16bit=batch_scale_16bit or [],
        compile=compile_axis(compile_model, also_eager),
        on_diverge=on_diverge,
        nproc=nproc or [],
        grad_comm=grad_comm,
        nnodes=nnodes,
        node_rank=node_rank,
        rdzv_endpoint=rdzv_endpoint,
        out=path_option("--out", out),
        timeout=timeout,
        threads=threads,
        measure_peak=measure_peak,
        resume=resume,
        verbose=verbose,
        command_line=" ".join(["mpbench", *sys.argv[1:]]),
    )
    raise typer.Exit(run_matrix(options))


# --- compare: owned by the compare/ package; keep this function a thin delegate. ---
@app.command()
def compare(
    paths: list[Path] | None = typer.Argument(
        None, help="Result files or run directories (default: the latest run in --results-dir)."
    ),
    results_dir: Path = typer.Option(
        Path("results"), "--results-dir", help="Where to look for the latest run."
    ),
    baseline: Path | None = typer.Option(
        None, "--baseline", "-b", help="Baseline results file or run directory to gate against."
    ),
    # The single-limit gates are lists so that a repeat is seen and refused (options.single)
    # instead of typer keeping the last limit.
    max_slowdown: list[str] | None = typer.Option(
        None, "--max-slowdown", help="Median step time per cell vs baseline: 10% or 0.1."
    ),
    max_memory_increase: list[str] | None = typer.Option(
        None, "--max-memory-increase", help="Peak memory per cell vs baseline: 10% or 0.1."
    ),
    max_accuracy_drop: list[str] | None = typer.Option(
        None, "--max-accuracy-drop", help="Test accuracy per cell vs baseline, in points: 0.5."
    ),
    min_speedup: list[str] | None = typer.Option(
        None,
        "--min-speedup",
        help="POLICY=X: speed-up vs float32 of the same run, e.g. bf16=1.5; one policy per "
        "option (repeatable); POLICY@N=X gates world size N only, e.g. bf16@2=1.2.",
    ),
    min_scaling_efficiency: list[str] | None = typer.Option(
        None,
        "--min-scaling-efficiency",
        help="N=X: weak-scaling efficiency at world size N vs world size 1 of the same run, "
        "e.g. 2=0.8 or 2=80%; POLICY@N=X for one policy (repeatable).",
    ),
    max_accuracy_delta: list[str] | None = typer.Option(
        None, "--max-accuracy-delta", help="Accuracy vs float32 of the same run, ± points."
    ),
    allow_different_hardware: bool = typer.Option(
        False, "--allow-different-hardware", help="Compare to a baseline from another machine."
    ),
    require_conclusive: bool = typer.Option(
        False,
        "--require-conclusive",
        help="Fail a gate whose 95 % interval straddles its limit (inconclusive), not only "
        "one whose whole interval is past it.",
    ),
    output_format: str = typer.Option(
        "table", "--format", help="table, markdown, json, csv or benchmark-action."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the report here."),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        help="Write a figure: bars with intervals, step-time boxes, loss curves "
        "(.png, .svg, .pdf, .jpg or .jpeg).",
    ),
) -> None:
    """Speed-up, memory and accuracy against float32; gates for CI (exit 1 on regression)."""
    from mpbench.compare import (
        CompareOptions,
        parse_fraction,
        parse_min_scaling_efficiency,
        parse_min_speedup,
        parse_points,
        run_compare,
    )
    from mpbench.compare.options import single

    options = CompareOptions(
        results_dir=results_dir,
        baseline=baseline,
        max_slowdown=parse_fraction("--max-slowdown", single("--max-slowdown", max_slowdown)),
        max_memory_increase=parse_fraction(
            "--max-memory-increase", single("--max-memory-increase", max_memory_increase)
        ),
        max_accuracy_drop_pp=parse_points(
            "--max-accuracy-drop", single("--max-accuracy-drop", max_accuracy_drop)
        ),
        min_speedup=parse_min_speedup(min_speedup),
        min_scaling_efficiency=parse_min_scaling_efficiency(min_scaling_efficiency),
        max_accuracy_delta_pp=parse_points(
            "--max-accuracy-delta", single("--max-accuracy-delta", max_accuracy_delta)
        ),
        allow_different_hardware=allow_different_hardware,
        require_conclusive=require_conclusive,
        format=output_format,
        output=output,
        plot=plot,
    )
    raise typer.Exit(run_compare(paths or [], options=options))


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
