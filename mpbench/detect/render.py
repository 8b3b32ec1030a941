"""Render a DetectReport: rich tables for people, JSON for programs (schema: docs/detect.md)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mpbench.detect.cpu import ARM_FLAGS, X86_FLAGS
from mpbench.detect.peaks import PEAK_KEYS, lookup
from mpbench.detect.report import DetectReport
from mpbench.policies import MeasuredStep, PolicyRating, Rating

_FLAG_MEANING = {
    "amx_bf16": "AMX tiles: bf16 matrix multiply",
    "amx_tile": "AMX tile registers",
    "amx_int8": "AMX tiles: int8 matrix multiply",
    "amx_fp16": "AMX tiles: fp16 matrix multiply",
    "avx512_bf16": "AVX-512 bf16 dot products",
    "avx512_fp16": "AVX-512 native fp16 arithmetic",
    "avx512_vnni": "AVX-512 int8 dot products",
    "avx512f": "AVX-512 foundation",
    "avx2": "AVX2 (256-bit SIMD)",
    "bf16": "Arm bf16 dot products",
    "i8mm": "Arm int8 matrix multiply",
    "asimdhp": "Arm half-precision SIMD",
    "sve": "Arm Scalable Vector Extension",
    "sve2": "Arm SVE2",
}
# Every Rating has a style (tests check it): emulated is yellow like slow, since it runs but
# gains nothing here; the caption under the policy table says what its step time means.
_RATING_STYLE = {
    Rating.FAST: "green",
    Rating.SLOW: "yellow",
    Rating.EMULATED: "yellow",
    Rating.UNSUPPORTED: "red",
}
EMULATED_CAPTION = (
    "emulated: runs with the policy's numerics (its accuracy is real), but not on the "
    "hardware the policy is for: its step time is the cost of emulation, never a speed-up"
)


def report_json(report: DetectReport) -> str:
    return json.dumps(report.to_dict(), indent=2)


def _yes_no(value: bool | None) -> Text:
    if value is None:
        return Text("unknown", style="dim")
    return Text("yes", style="green") if value else Text("no", style="dim")


def _count(value: int | None) -> str:
    return "?" if value is None else str(value)


def _cpu_heading(report: DetectReport) -> Text:
    cpu = report.cpu
    return Text(
        f"CPU: {cpu.model} ({cpu.architecture}) - {_count(cpu.sockets)} socket(s), "
        f"{_count(cpu.physical_cores)} physical / {_count(cpu.logical_cores)} logical cores"
    )


def _cpu_table(report: DetectReport) -> Table:
    cpu = report.cpu
    table = Table()
    table.add_column("flag")
    table.add_column("present")
    table.add_column("what it gives")
    # x86 flags on an Arm CPU are all "no" and say nothing; show the ones of its own ISA.
    shown = ARM_FLAGS if cpu.architecture == "aarch64" else X86_FLAGS
    for name in shown:
        present = cpu.flags.get(name)
        table.add_row(Text(name), _yes_no(present), Text(_FLAG_MEANING.get(name, "")))
    return table


def _tflops(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _gpu_rows(report: DetectReport):
    """(GpuInfo, its CUDA index or None) for every GPU, each followed by its MIG slices."""
    mapping = report.cuda_mapping()
    position = {id(g): i for i, g in enumerate(mapping.gpus or ())}
    for gpu in report.gpus:
        yield gpu, position.get(id(gpu))
        for mig in gpu.mig_devices:
            yield mig, position.get(id(mig))


def _gpu_table(report: DetectReport) -> Table:
    driver = report.nvidia_driver
    title = "NVIDIA GPUs"
    if driver:
        title += (
            f" - driver {driver.driver_version or '?'}, CUDA {driver.cuda_driver_version or '?'}"
        )
    table = Table(title=Text(title), title_justify="left")
    table.add_column("#")
    table.add_column("cuda")
    table.add_column("name", no_wrap=True)
    for column in ("CC", "memory", "Tensor Cores", "TF32", "bf16", "fp8", "UUID / PCI"):
        table.add_column(column)
    for gpu, cuda_index in _gpu_rows(report):
        memory = "?" if gpu.memory_total_gib is None else f"{gpu.memory_total_gib:g} GiB"
        where = gpu.uuid or "?"
        if not gpu.is_mig_slice:
            where += f"\n{gpu.pci_bus_id or '?'}"
            if gpu.mig_mode:
                where += "\nMIG mode on"
        table.add_row(
            Text(("  " if gpu.is_mig_slice else "") + gpu.label),
            Text("-" if cuda_index is None else str(cuda_index)),
            Text(gpu.name),
            Text(gpu.capability or "?"),
            Text(memory),
            _yes_no(gpu.tensor_cores),
            _yes_no(gpu.tf32),
            _yes_no(gpu.bf16),
            _yes_no(gpu.fp8),
            Text(where),
        )
    return table


def _peak_table(report: DetectReport) -> Table:
    table = Table(title=Text("Peak dense TFLOP/s (vendor datasheet)"), title_justify="left")
    table.add_column("#")
    for key in PEAK_KEYS:
        table.add_column(key, justify="right")
    table.add_column("source")
    for gpu, _ in _gpu_rows(report):
        known = None if gpu.is_mig_slice else lookup(gpu.name)
        if gpu.is_mig_slice:
            source = "MIG slice: a share of the GPU, no datasheet peak (measure it: --measure)"
        else:
            source = known.source if known else "unknown part: no peak, no MFU"
        table.add_row(
            Text(gpu.label),
            *(Text(_tflops(gpu.peak_tflops.get(key))) for key in PEAK_KEYS),
            Text(source),
        )
    return table


def _measured_table(report: DetectReport) -> Table | Text:
    measured = report.measured or {}
    title = (
        f"Measured matmul TFLOP/s on {measured.get('device')} - nn.Linear's matmul as a step "
        "runs it (fp16/bf16 under torch.autocast), square n x n, 2*n^3 FLOPs, "
        f"{measured.get('threads')} thread(s), torch {measured.get('torch_version')}"
    )
    if not measured.get("ok"):
        return Text(f"{title}: failed: {measured.get('error')}")
    if measured.get("contended"):
        title += " - CONTENDED: figures low"
    table = Table(title=Text(title), title_justify="left", caption=_contention_caption(measured))
    table.caption_justify = "left"
    for column in ("dtype", "best", "median", "at n", "datasheet", "best / datasheet", "note"):
        justify = "left" if column in ("dtype", "note") else "right"
        table.add_column(column, justify=justify)
    for key, result in measured.get("dtypes", {}).items():
        datasheet = result.get("datasheet_tflops")
        best = result.get("best_tflops")
        ratio = f"{100 * best / datasheet:.0f} %" if best and datasheet else "-"
        sizes = [r for r in result.get("sizes", []) if r.get("best_tflops")]
        at = max(sizes, key=lambda r: r["best_tflops"])["n"] if sizes else None
        note = result.get("error") or result.get("skipped") or ""
        if not note and key == "fp8" and result.get("op"):
            note = "torch._scaled_mm, bf16 out"  # not nn.Linear's matmul (measure_child.FP8_OP)
        skipped_sizes = [r for r in result.get("sizes", []) if r.get("skipped")]
        if not note and skipped_sizes:
            note = f"n={skipped_sizes[0]['n']}+ skipped: {skipped_sizes[0]['skipped']}"
        table.add_row(
            Text(f"{key}: {result.get('dtype')}"),
            Text(_tflops(_round(best))),
            Text(_tflops(_round(result.get("median_tflops")))),
            Text("-" if at is None else str(at)),
            Text(_tflops(datasheet)),
            Text(ratio),
            Text(note),
        )
    return table


def _bandwidth_line(bandwidth: dict) -> Text:
    """The measured memory bandwidth: the triad's best and median pass, the copy's best."""
    if not bandwidth.get("ok"):
        return Text(f"Measured memory bandwidth: failed: {bandwidth.get('error')}")
    return Text(
        f"Measured memory bandwidth: {bandwidth['best_gbps']:.3g} GB/s best, "
        f"{bandwidth['median_gbps']:.3g} median ({bandwidth['op']}, "
        f"{bandwidth['array_bytes'] / 1e6:.0f} MB arrays, {bandwidth['iterations']} passes); "
        f"copy {bandwidth['copy_best_gbps']:.3g} GB/s"
    )


def _steps_table(steps: dict) -> Table | Text:
    """detect --measure's training steps: each framework's policies against its float32."""
    answers = steps.get("frameworks") or {}
    if not answers:
        return Text("Measured training step: no framework measured")
    first = next(iter(answers.values()))
    title = (
        f"Measured training step on {steps.get('device')} - {first.get('step') or 'mnist_dense'}"
        f", {first.get('threads') or 'default'} thread(s); speed-up = float32's median step / "
        "the policy's"
    )
    table = Table(title=Text(title), title_justify="left")
    for column in ("framework", "policy", "median step", "speed-up", "note"):
        table.add_column(
            column, justify="right" if column in ("median step", "speed-up") else "left"
        )
    for framework, answer in answers.items():
        version = answer.get("framework_version") or "?"
        name = f"{framework} {version}"
        if not answer.get("ok"):
            table.add_row(
                Text(name), Text("-"), Text("-"), Text("-"), Text(f"failed: {answer.get('error')}")
            )
            continue
        for i, (policy, entry) in enumerate((answer.get("policies") or {}).items()):
            table.add_row(
                Text(name if i == 0 else ""),
                Text(policy),
                *_step_cells(policy, entry),
                _step_note(answer, entry, i),
            )
    return table


def _step_cells(policy: str, entry: dict) -> list[Text]:
    speedup = entry.get("speedup")
    if not isinstance(speedup, int | float):
        return [Text("-"), Text("-")]
    seconds = entry.get("median_s") or entry.get("first_s")
    step = MeasuredStep("", "", speedup, "", bool(entry.get("stopped_early")))
    shown = "-" if not isinstance(seconds, int | float) else _duration(seconds)
    return [Text(shown), Text("baseline" if policy == "float32" else step.describe())]


def _duration(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{1000 * seconds:.3g} ms"


def _step_note(answer: dict, entry: dict, row: int) -> Text:
    notes = [entry.get("error") or entry.get("why") or ""]
    if row == 0:
        notes.append(answer.get("not_cached") or "")
    return Text(
        "; ".join(n for n in notes if n),
        style="yellow" if answer.get("not_cached") and row == 0 else "",
    )


def _contention_caption(measured: dict) -> Text | None:
    """How busy the machine was while it measured, and whether the figures were cached."""
    reading = measured.get("contention")
    if not isinstance(reading, dict):
        return None
    if measured.get("not_cached"):
        return Text(measured["not_cached"], style="yellow")
    text = (
        f"quiet while measuring: other processes used {reading.get('other_cores', 0):.2f} of "
        f"{reading.get('cpus')} cores"
    )
    if measured.get("cache_file"):
        text += f"; cached in {measured['cache_file']}"
    return Text(text)


def _tuning_table(report: DetectReport) -> Table:
    table = Table(
        title=Text("Machine tuning (the checks of pyperf system show, and the load now)"),
        title_justify="left",
    )
    table.add_column("setting")
    table.add_column("state")
    table.add_column("advice")
    for item in report.tuning.items:
        style = {True: "green", False: "yellow"}.get(item.tuned, "")
        table.add_row(Text(item.name), Text(item.state, style=style), Text(item.advice or ""))
    return table


def _round(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def _probe_summary(report: DetectReport, name: str) -> str:
    info = report.framework(name)
    if info is None or not info.installed:
        return "not installed"
    probe = info.probe
    if probe is None:
        return "not imported (--probe imports it in a child process)" if name != "keras" else ""
    if not probe.ok:
        return f"import failed: {probe.error}"
    parts = []
    if name == "torch":
        if probe.hip_version:
            parts.append(f"ROCm {probe.hip_version}")
        elif probe.cuda_version:
            parts.append(f"CUDA {probe.cuda_version} build")
        else:
            parts.append("CPU-only build")
        parts.append(f"{len(probe.devices)} GPU(s) visible")
        if probe.bf16_supported is not None:
            parts.append(f"native bf16 {'yes' if probe.bf16_supported else 'no'}")
        if probe.mps_available:
            parts.append("MPS available")
    else:
        parts.append(
            f"built with CUDA {probe.cuda_version}" if probe.built_with_cuda else "CPU-only build"
        )
        parts.append(f"{len(probe.devices)} GPU(s) visible")
    parts.append(f"import {probe.seconds:g} s")
    return ", ".join(parts)


def _framework_table(report: DetectReport) -> Table:
    table = Table(title="Frameworks", title_justify="left")
    table.add_column("framework")
    table.add_column("version")
    table.add_column("what it sees")
    for info in report.frameworks:
        version = info.version or "-"
        if info.distribution and info.distribution != info.name:
            version += f" ({info.distribution})"
        table.add_row(Text(info.name), Text(version), Text(_probe_summary(report, info.name)))
    return table


def _policy_table(report: DetectReport) -> Table:
    emulated = any(r.rating is Rating.EMULATED for e in report.devices for r in e.ratings)
    table = Table(
        title="Precision policies",
        title_justify="left",
        show_lines=True,
        caption=Text(EMULATED_CAPTION) if emulated else None,
        caption_justify="left",
    )
    table.add_column("device")
    table.add_column("policy")
    table.add_column("rating")
    table.add_column("why")
    for entry in report.devices:
        device = f"{entry.label}\n{entry.name}"
        for i, rating in enumerate(entry.ratings):
            said = _per_framework(entry, i) or [rating]
            table.add_row(
                Text(device if i == 0 else ""),
                Text(rating.policy),
                _joined(said, lambda r: Text(r.rating.value, style=_RATING_STYLE[r.rating])),
                _joined(said, lambda r: Text(r.reason)),
            )
    return table


def _per_framework(entry, index: int) -> list[PolicyRating]:
    """The frameworks' ratings of the entry's `index`-th policy where they differ (rating or
    reason); [] where they agree, and the device's one rating says it all."""
    ratings = [found[index] for found in entry.framework_ratings.values()]
    if len({(r.rating, r.reason) for r in ratings}) <= 1:
        return []
    return ratings


def _joined(ratings: list[PolicyRating], cell) -> Text:
    """One line per framework, each named ("torch: slow"), or the one rating alone."""
    if len(ratings) == 1 and ratings[0].framework is None:
        return cell(ratings[0])
    lines = [Text.assemble(f"{r.framework}: ", cell(r)) for r in ratings]
    return Text("\n").join(lines)


def _recommendation_table(report: DetectReport) -> Table:
    table = Table(title="Recommendation", title_justify="left")
    table.add_column("device")
    table.add_column("policy")
    table.add_column("why")
    for entry in report.devices:
        rec = entry.recommendation
        table.add_row(Text(entry.label), Text(rec.policy, style="bold"), Text(rec.reason))
    return table


def print_report(report: DetectReport, console: Console | None = None) -> None:
    console = console or Console()
    host = report.host
    console.print(
        Text.assemble(
            (f"mpbench {report.mpbench_version}", "bold"),
            f" detect - {host.os} {host.os_release} {host.machine}, Python {host.python}",
        )
    )
    console.print(_cpu_heading(report))
    console.print(_cpu_table(report))
    if report.gpus:
        console.print(_gpu_table(report))
        console.print(_peak_table(report))
    else:
        console.print(Text("NVIDIA GPUs: none found"))
    if report.measured is not None:
        console.print(_measured_table(report))
        if report.measured.get("bandwidth") is not None:
            console.print(_bandwidth_line(report.measured["bandwidth"]))
    if report.measured_steps is not None:
        console.print(_steps_table(report.measured_steps))
    if report.tpu:
        tpu = report.tpu
        console.print(Text(f"TPU: {tpu.name}, {tpu.chips} chip(s) ({'; '.join(tpu.evidence)})"))
    if report.tuning is not None:
        console.print(_tuning_table(report))
    console.print(_framework_table(report))
    console.print(_policy_table(report))
    console.print(_recommendation_table(report))
    if report.notes:
        console.print("Notes:")
        for note in report.notes:
            console.print(Text(f"  - {note}"))
