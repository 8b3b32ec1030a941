"""Every table of a report, in order: per section its table, scaling and fp8 tables; then
the baseline comparison and the gates. The terminal and markdown renderers print these."""

from __future__ import annotations

from mpbench.compare.render.fp8_tables import fp8_table, gemm_table
from mpbench.compare.render.tables import (
    TextTable,
    baseline_table,
    gates_table,
    scaling_table,
    section_table,
)
from mpbench.compare.report import Report


def section_tables(report: Report) -> list[TextTable]:
    """Per workload and machine: its table, then its scaling table (data-parallel cells) and
    its fp8 tables (float8 cells)."""
    tables = []
    for section in report.sections:
        tables.append(section_table(section, report.labeler))
        for extra in (scaling_table, fp8_table, gemm_table):
            table = extra(section, report.labeler)
            if table is not None:
                tables.append(table)
    return tables


def report_tables(report: Report) -> list[TextTable]:
    tables = section_tables(report)
    if report.matches:
        tables.append(baseline_table(report))
    if report.results:
        tables.append(gates_table(report))
    return tables
