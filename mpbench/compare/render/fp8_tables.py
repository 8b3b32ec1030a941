"""The fp8 tables of a section: each float8 cell against bf16, the policy it builds on, and
the GEMMs its prediction timed (docs/policies.md, "fp8 against bf16"). They read what
summary/build.py computed (`comparison.vs_base`) and what the records hold (`fp8.prediction`);
nothing is estimated here."""

from __future__ import annotations

from collections import defaultdict

from mpbench.compare.render.tables import Footnotes, TextTable, group_names, status_text
from mpbench.compare.summary import fmt
from mpbench.compare.summary.cells import CellSummary, PolicyGroup, Section
from mpbench.compare.summary.comparison import compile_said, short
from mpbench.compare.summary.labels import Labeler
from mpbench.fp8_gemms import explain
from mpbench.results.schema import Fp8Prediction

_AGAINST_BASE = [
    "cell",
    "fp8",
    "fp8 FLOPs",
    "compiled",
    "vs bf16",
    "predicted",
    "vs float32",
    "mem vs bf16",
    "Δ acc vs bf16",
    "status",
]
_GEMMS = ["cell", "GEMM m×k×n", "GEMMs", "bf16 ms", "fp8 ms", "cast ms", "predicted"]


def _fp8_rows(section: Section) -> list[tuple[PolicyGroup, str, CellSummary]]:
    return [
        (group, row, cell)
        for group in section.groups
        for row, cell in group.cells.items()
        if cell.fp8 is not None
    ]


def fp8_table(section: Section, labeler: Labeler) -> TextTable | None:
    """Each float8 cell against bf16 of its group (speed-up, memory, accuracy), with the gain
    its GEMMs predicted and whether each side was compiled; None without a float8 cell."""
    rows = _fp8_rows(section)
    if not rows:
        return None
    names = group_names(section, labeler)
    title = f"fp8 against bf16: {section.workload} on {section.device}"
    table = TextTable(title, list(_AGAINST_BASE))
    notes = Footnotes()
    for group, row, cell in rows:
        comparison = group.comparisons.get(row)
        against = comparison.vs_base if comparison is not None else None
        base = group.cells.get(against.base) if against is not None else None
        compiled = "yes" if cell.compiled else "no"
        if base is not None and base.ok:
            compiled += f" / {'yes' if base.compiled else 'no'}"
        if against is not None and against.compiled:
            said = compile_said(
                against.compiled, "add --compile to compile both", against.compile_ran
            )
            compiled += " " + notes.mark(said)
        if cell.fp8.emulated:
            vs_base = "emulated " + notes.mark("emulated fp8: no speed is measured, only numerics")
        elif against is None:
            vs_base = fmt.DASH + " " + notes.mark(f"{short(row)}: no bf16 cell beside it")
        else:
            vs_base = fmt.ratio_interval(against.speedup)
        memory = fmt.ratio_interval(against.memory_ratio if against else None)
        if against is not None and against.memory_refused:
            memory = f"{fmt.DASH} " + notes.mark(against.memory_refused)
        values = {
            "cell": f"{names[group.key]} {short(row)}",
            "fp8": cell.fp8.mode,
            "fp8 FLOPs": _flop_share(cell, notes),
            "compiled": compiled,
            "vs bf16": vs_base,
            "predicted": _predicted(cell),
            "vs float32": fmt.ratio_interval(comparison.speedup if comparison else None),
            "mem vs bf16": memory,
            "Δ acc vs bf16": fmt.points_interval(against.accuracy_delta_pp if against else None),
            "status": status_text(cell),
        }
        table.rows.append([values[c] for c in _AGAINST_BASE])
        table.styles.append(None)
    table.footnotes = [
        "fp8 runs every op but its GEMMs in bf16, so bf16 is what it must beat. vs bf16: "
        "bf16's step time / fp8's; predicted: the same ratio over the fp8 layers' GEMMs alone, "
        "from bf16 and fp8 GEMMs timed at their shapes before training plus the casts' "
        "traffic (the next table); compiled: fp8 / bf16 under torch.compile; fp8 FLOPs: the "
        "fp8 GEMMs' share of the step's matmul FLOPs"
    ]
    for group, row, cell in rows:
        comparison = group.comparisons.get(row)
        against = comparison.vs_base if comparison is not None else None
        measured = against.speedup.value if against and against.speedup else None
        said = explain(cell.fp8.prediction, measured)
        if said:
            table.footnotes.append(f"{names[group.key]} {short(row)}: {said}")
        swapped = cell.fp8.swapped()
        if swapped:
            table.footnotes.append(f"{names[group.key]} {short(row)}: {swapped}")
    table.footnotes += notes.lines()
    return table


def _flop_share(cell: CellSummary, notes: Footnotes) -> str:
    """`98 %`, or `unknown [n]` with the record's reason."""
    return cell.fp8.share() or "unknown " + notes.mark(cell.fp8.coverage())


def _predicted(cell: CellSummary) -> str:
    # where there is none, the explanation under the table says why
    return fmt.ratio(cell.fp8.predicted_gain)


def gemm_table(section: Section, labeler: Labeler) -> TextTable | None:
    """Per float8 cell, its fp8 layers' GEMMs by shape: how many, bf16 and fp8 time, the
    cast's and the gain predicted over bf16 (the first repeat's timings); None where no cell
    has a prediction."""
    rows = [(g, r, c) for g, r, c in _fp8_rows(section) if c.fp8.prediction is not None]
    if not rows:
        return None
    names = group_names(section, labeler)
    table = TextTable(f"fp8 GEMMs: {section.workload} on {section.device}", list(_GEMMS))
    for group, row, cell in rows:
        prediction = cell.fp8.prediction
        for shape, line in _by_shape(prediction).items():
            values = {
                "cell": f"{names[group.key]} {short(row)}",
                "GEMM m×k×n": "×".join(str(d) for d in shape),
                **line,
            }
            table.rows.append([values[c] for c in _GEMMS])
            table.styles.append(None)
        table.group_ends.add(len(table.rows) - 1)
        if prediction.hardware:  # else the note says why nothing was timed
            table.footnotes.append(f"{names[group.key]} {short(row)}: {prediction.method}")
        if prediction.note:
            table.footnotes.append(f"{names[group.key]} {short(row)}: {prediction.note}")
    table.footnotes.insert(
        0,
        "a training step runs three GEMMs per fp8 layer: forward (m = tokens, k = in, n = out), "
        "the input's gradient and the weight's; cast: dynamic scaling's traffic (amax and "
        "cast of both operands) at the measured bandwidth; predicted: bf16 / (fp8 + cast)",
    )
    return table


def _by_shape(prediction: Fp8Prediction) -> dict[tuple[int, int, int], dict[str, str]]:
    """The prediction's rows merged by shape (a transformer repeats each shape per block)."""
    found: dict[tuple[int, int, int], list] = defaultdict(list)
    for row in prediction.rows:
        found[(row.m, row.k, row.n)].append(row)
    out = {}
    for shape, rows in found.items():
        first = rows[0]
        roles = sorted({r.role for r in rows})
        out[shape] = {
            "GEMMs": f"{len(rows)} ({', '.join(roles)})",
            "bf16 ms": _ms(first.bf16_ms),
            "fp8 ms": _ms(first.fp8_ms),
            "cast ms": _ms(first.cast_ms),
            "predicted": fmt.ratio(first.predicted_gain),
        }
    return out


def _ms(value: float | None) -> str:
    return fmt.DASH if value is None else fmt.significant(value)
