"""`mpbench history`'s outputs, the history's and the fleet's: its tables in compare's table
model (TextTable), drawn and written by compare's renderers (terminal, markdown), so the two
commands never disagree on how a table looks; JSON and CSV keep full floats. Numbers are
spelled by compare's own formatting (compare/summary/fmt.py): a speed-up reads the same in both.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

from mpbench.compare.render.json_report import estimate_json
from mpbench.compare.render.tables import TextTable
from mpbench.compare.summary import fmt
from mpbench.compare.summary.estimate import Estimate
from mpbench.history.changepoints import MIN_POINTS
from mpbench.history.ci import FAIL, INCONCLUSIVE, NewestVerdict
from mpbench.history.findings import BY_DATE, HistoryReport
from mpbench.history.fleet import FleetCell, FleetTable
from mpbench.history.series import STEP_TIME, Point, Series
from mpbench.results.store import StoredRun

JSON_VERSION = 1
_STYLE = {FAIL: "failed", INCONCLUSIVE: "warning"}  # compare's row styles
# What every history table holds is text but the counts: left-aligned, never cut.
_HISTORY_TEXT = frozenset(
    {"series", "points", "first", "newest (95 %)", "change points (95 %)", "newest run", "commit",
     "started", "run", "value (95 %)", "note"}
)  # fmt: skip


# --- what every format writes from ---------------------------------------------------------


@dataclass
class Page:
    """A history's or a fleet's report as each format writes it (HISTORY_RENDERERS): the
    heading, tables and notes the terminal, markdown and html show, and the data behind them
    (a HistoryReport, or the fleet's tables), which JSON and CSV write whole. A history's page
    carries the fleet of its machines too (html shows both)."""

    heading: str
    tables: list[TextTable]
    notes: list[str]
    history: HistoryReport | None = None
    fleet: list[FleetTable] = field(default_factory=list)


def page_text(page: Page) -> str:
    """The tables as plain text, 200 columns wide (--output, a pipe)."""
    from mpbench.compare.render.terminal import document_text

    return document_text(page.heading, page.tables, page.notes)


def page_markdown(page: Page) -> str:
    from mpbench.compare.render.markdown import markdown_document

    return markdown_document(page.heading, page.tables, page.notes)


def history_page_json(page: Page) -> str:
    assert page.history is not None
    return history_json(page.history)


def history_page_csv(page: Page) -> str:
    assert page.history is not None
    return history_csv(page.history)


def fleet_page_json(page: Page) -> str:
    return fleet_json(page.fleet)


def fleet_page_csv(page: Page) -> str:
    return fleet_csv(page.fleet)


# Which function writes a history's and a fleet's page in each format (compare's dispatch,
# compare/render/dispatch.py: imported only when that page is written).
HISTORY_RENDERERS = {
    "table": f"{__name__}:page_text",
    "markdown": f"{__name__}:page_markdown",
    "json": f"{__name__}:history_page_json",
    "csv": f"{__name__}:history_page_csv",
    "html": "mpbench.history.html:history_html",
}
FLEET_RENDERERS = {
    **HISTORY_RENDERERS,
    "json": f"{__name__}:fleet_page_json",
    "csv": f"{__name__}:fleet_page_csv",
    "html": "mpbench.history.html:fleet_html",
}


# --- words and numbers ----------------------------------------------------------------------


def run_name(run: StoredRun, by: str = "commit") -> str:
    """A point's name on the x axis: its commit, or its start when ordered by date or when
    the commit is unknown."""
    if by != BY_DATE and run.short_commit:
        return run.short_commit
    return (run.started_at or run.run_id)[:16].replace("T", " ")


def value_text(series: Series, estimate: Estimate | None) -> str:
    if series.metric == STEP_TIME:
        if estimate is None:
            return fmt.DASH
        text = f"{fmt.ms(estimate.value)} ms"
        if estimate.has_interval:
            text += f" ({fmt.ms_range(estimate.low, estimate.high)})"
            text += fmt.WITHIN_RUN_MARK if estimate.kind == "within-run only" else ""
        return text
    return fmt.ratio_interval(estimate)


def change_text(series: Series, by: str) -> str:
    """`+23.1 % (+15.2 to +31.6) at 5e6f7a8b`, one line per change point."""
    lines = []
    for change, _, after in series.changes():
        text = f"{change.change * 100:+.1f} % ({change.low * 100:+.1f} to "
        text += f"{change.high * 100:+.1f}) at {run_name(after.run, by)}"
        if change.first != change.index or change.last != change.index:
            first = series.trusted_point(change.first).run
            last = series.trusted_point(change.last).run
            text += f" (95 %: {run_name(first, by)} … {run_name(last, by)})"
        lines.append(text)
    return "\n".join(lines) or "none"


def verdict_text(verdict: NewestVerdict) -> str:
    """`FAIL: regression +23.1 % ...`; the outcome once where the text begins with it."""
    if verdict.text.startswith(verdict.outcome):
        return verdict.text
    return f"{verdict.outcome}: {verdict.text}"


def section_title(series: Series) -> tuple[str, str, str]:
    group = series.group
    return (group.device, group.fingerprint, group.workload)


# --- history tables -------------------------------------------------------------------------


def history_tables(report: HistoryReport, points: bool = False) -> list[TextTable]:
    tables: list[TextTable] = []
    current: tuple[str, str, str] | None = None
    table: TextTable | None = None
    for series, verdict in zip(report.series, report.verdicts, strict=True):
        where = section_title(series)
        if where != current:
            current = where
            workload = where[2]
            machine = series.group.machine()
            runs = {
                p.run.run_id for s in report.series if section_title(s) == where for p in s.points
            }
            table = TextTable(
                f"{workload} on {machine.label()}, {len(runs)} runs",
                [
                    "series",
                    "points",
                    "first",
                    "newest (95 %)",
                    "change points (95 %)",
                    "newest run",
                ],
                text_columns=_HISTORY_TEXT,
                prose_columns=frozenset({"newest run"}),
            )
            tables.append(table)
        assert table is not None
        first, newest = series.points[0], series.points[-1]
        noise = _noise(series)
        noise = f", noise ±{noise * 100:.1f} %" if noise is not None else ""
        table.rows.append(
            [
                f"{series.label} {series.metric}",
                f"{len(series.points)}{noise}",
                value_text(series, first.estimate),
                value_text(series, newest.estimate),
                change_text(series, report.by),
                verdict_text(verdict),
            ]
        )
        table.styles.append(_STYLE.get(verdict.outcome))
        if points:
            tables.append(points_table(series, report.by))
    return tables


def _noise(series: Series) -> float | None:
    """The series' noise (sigma of one point), where it has the points to estimate it: from
    fewer, changepoints.py falls back to a floor, which is no measurement."""
    detection = series.detection
    return detection.sigma if detection is not None and detection.points >= MIN_POINTS else None


def points_table(series: Series, by: str) -> TextTable:
    starts = {after.run.run_id: change for change, _, after in series.changes()}
    table = TextTable(
        f"{series.label} {series.metric} on {series.group.device}: every point",
        ["#", "commit" if by != BY_DATE else "started", "run", "value (95 %)", "note"],
        text_columns=_HISTORY_TEXT,
        prose_columns=frozenset({"note"}),
    )
    for i, point in enumerate(series.points, start=1):
        change = starts.get(point.run.run_id)
        note = f"new level {change.change * 100:+.1f} %" if change is not None else ""
        if point.distrust:
            note = f"not used: {point.distrust}"
        table.rows.append(
            [
                str(i),
                run_name(point.run, by),
                point.run.run_id,
                value_text(series, point.estimate),
                note,
            ]
        )
        table.styles.append("warning" if change is not None else "dim" if point.distrust else None)
    return table


# --- fleet tables ---------------------------------------------------------------------------


def fleet_text_tables(tables: list[FleetTable]) -> list[TextTable]:
    out = []
    for fleet in tables:
        headers = ["policy", *(m.machine.label() for m in fleet.machines)]
        table = TextTable(
            f"{fleet.workload}: each machine's newest run",
            headers,
            text_columns=frozenset(headers),
        )
        for row in fleet.rows:
            cells = [_fleet_cell(row.cells.get(m.fingerprint)) for m in fleet.machines]
            table.rows.append([row.name, *cells])
            table.styles.append(None)
        # The device's arithmetic (`CC 9.0`, `avx512_bf16`): why a policy pays on it or not.
        table.rows.append(["arithmetic", *(m.machine.arithmetic or "" for m in fleet.machines)])
        table.rows.append(
            ["config", *(fleet.configs.get(m.fingerprint, "") for m in fleet.machines)]
        )
        table.rows.append(["run", *(_run_label(m.run) for m in fleet.machines)])
        table.styles += ["dim", "dim", "dim"]
        out.append(table)
    return out


def _run_label(run: StoredRun) -> str:
    return run.run_id + (f" at {run.short_commit}" if run.short_commit else "")


def _fleet_cell(cell: FleetCell | None) -> str:
    if cell is None:
        return fmt.DASH
    if cell.status is not None:
        return f"{cell.status}" + (f": {cell.why}" if cell.why else "")
    if cell.step_time_s is not None:
        return f"{fmt.ms(cell.step_time_s.value)} ms a step (reference)"
    lines = [f"{fmt.ratio_interval(cell.speedup)} speed-up"]
    extra = []
    if cell.memory_ratio is not None:
        extra.append(f"memory {fmt.ratio(cell.memory_ratio.value)}")
    if cell.accuracy_delta_pp is not None:
        extra.append(f"Δacc {fmt.points_interval(cell.accuracy_delta_pp)}")
    if extra:
        lines.append(", ".join(extra))
    if cell.verdict:
        lines.append(f"→ {cell.verdict}")
    return "\n".join(lines)


# --- JSON -----------------------------------------------------------------------------------


def _run(run: StoredRun) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "commit": run.git_commit,
        "commit_time": run.commit_time,
        "started_at": run.started_at,
    }


def history_json(report: HistoryReport) -> str:
    out = {
        "mpbench_history": JSON_VERSION,
        "sources": report.sources,
        "order": report.by,
        "threshold": report.threshold,
        "runs": [_run(r) for r in report.runs],
        "series": [_series(s, v) for s, v in zip(report.series, report.verdicts, strict=True)],
        "failed": [f"{s.label} {s.metric} on {s.group.device}" for s, _ in report.failed],
    }
    return json.dumps(out, indent=2) + "\n"


def _series(series: Series, verdict: NewestVerdict) -> dict[str, Any]:
    group = series.group
    return {
        "metric": series.metric,
        "unit": "s" if series.metric == STEP_TIME else "x",
        "label": series.label,
        "device": group.device,
        "fingerprint": group.fingerprint,
        "workload": group.workload,
        "framework": group.framework,
        "policy": series.row.policy,
        "variant": series.row.variant,
        "config": group.config_dict(),
        "points": [_point(p) for p in series.points],
        "noise": _noise(series),
        "change_points": [
            {
                **_run(after.run),
                "previous": _run(before.run),
                "before": change.before,
                "after": change.after,
                "change": change.change,
                "low": change.low,
                "high": change.high,
                "between": [
                    series.trusted_point(change.first).run.run_id,
                    series.trusted_point(change.last).run.run_id,
                ],
            }
            for change, before, after in series.changes()
        ],
        "newest": {"outcome": verdict.outcome, "text": verdict.text},
    }


def _point(point: Point) -> dict[str, Any]:
    return {
        **_run(point.run),
        "estimate": estimate_json(point.estimate),
        "distrust": point.distrust,
    }


def fleet_json(tables: list[FleetTable]) -> str:
    out = {
        "mpbench_fleet": JSON_VERSION,
        "workloads": [
            {
                "workload": t.workload,
                "machines": [
                    {
                        "label": m.machine.label(),
                        "class": m.machine.device_class,
                        "device": m.machine.device,
                        "fingerprint": m.fingerprint,
                        **_run(m.run),
                    }
                    for m in t.machines
                ],
                "rows": [
                    {
                        "row": r.name,
                        "policy": r.row.policy,
                        "variant": r.row.variant,
                        "cells": {
                            m.fingerprint: _fleet_json_cell(r.cells.get(m.fingerprint))
                            for m in t.machines
                        },
                    }
                    for r in t.rows
                ],
            }
            for t in tables
        ],
    }
    return json.dumps(out, indent=2) + "\n"


def _fleet_json_cell(cell: FleetCell | None) -> dict[str, Any] | None:
    if cell is None:
        return None
    return {
        "speedup": estimate_json(cell.speedup),
        "memory_ratio": estimate_json(cell.memory_ratio),
        "accuracy_delta_pp": estimate_json(cell.accuracy_delta_pp),
        "step_time_s": estimate_json(cell.step_time_s),
        "verdict": cell.verdict,
        "why": cell.why,
        "status": cell.status,
    }


# --- CSV ------------------------------------------------------------------------------------

_POINT_COLUMNS = [
    "device", "fingerprint", "workload", "framework", "policy", "variant", "series", "metric",
    "unit", "run_id", "commit", "commit_time", "started_at", "value", "low", "high",
    "interval", "used", "change_point",
]  # fmt: skip


def history_csv(report: HistoryReport) -> str:
    """One row per point of every series: what a spreadsheet or pandas plots."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_POINT_COLUMNS)
    for series in report.series:
        group = series.group
        starts = {after.run.run_id for _, _, after in series.changes()}
        for point in series.points:
            estimate = point.estimate
            writer.writerow(
                [
                    group.device, group.fingerprint, group.workload, group.framework,
                    series.row.policy, series.row.variant or "", series.label, series.metric,
                    "s" if series.metric == STEP_TIME else "x", point.run.run_id,
                    point.run.git_commit or "", point.run.commit_time or "",
                    point.run.started_at or "", _number(estimate.value),
                    _number(estimate.low if estimate.has_interval else None),
                    _number(estimate.high if estimate.has_interval else None),
                    estimate.kind if estimate.has_interval else "",
                    "no" if point.distrust else "yes",
                    "yes" if point.run.run_id in starts else "no",
                ]
            )  # fmt: skip
    return buffer.getvalue()


_FLEET_COLUMNS = [
    "workload", "row", "policy", "variant", "machine", "device", "fingerprint", "run_id",
    "commit", "speedup", "speedup_low", "speedup_high", "memory_ratio", "accuracy_delta_pp",
    "accuracy_delta_low", "accuracy_delta_high", "step_time_s", "verdict", "status", "why",
]  # fmt: skip


def fleet_csv(tables: list[FleetTable]) -> str:
    """One row per policy and machine."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_FLEET_COLUMNS)
    for table in tables:
        for row in table.rows:
            for column in table.machines:
                cell = row.cells.get(column.fingerprint)
                if cell is None:
                    continue
                machine = column.machine
                writer.writerow(
                    [
                        table.workload, row.name, row.row.policy, row.row.variant or "",
                        machine.label(), machine.device, machine.fingerprint, column.run.run_id,
                        column.run.git_commit or "", *_triple(cell.speedup),
                        _number(cell.memory_ratio.value if cell.memory_ratio else None),
                        *_triple(cell.accuracy_delta_pp),
                        _number(cell.step_time_s.value if cell.step_time_s else None),
                        cell.verdict or "", cell.status or "", cell.why or "",
                    ]
                )  # fmt: skip
    return buffer.getvalue()


def _triple(estimate: Estimate | None) -> list[str]:
    if estimate is None:
        return ["", "", ""]
    if not estimate.has_interval:
        return [_number(estimate.value), "", ""]
    return [_number(estimate.value), _number(estimate.low), _number(estimate.high)]


def _number(value: float | None) -> str:
    return "" if value is None else repr(float(value))
