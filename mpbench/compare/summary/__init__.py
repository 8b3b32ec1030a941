"""Summarising the records: repeats merged into cells and groups, each ratio estimated with
its interval, one name per group, the scaling rows, the verdicts and how numbers are written
(docs/architecture.md)."""
