"""Rendering the report: one module per format (terminal, markdown, JSON, CSV,
benchmark-action) and the text tables the human formats share; how numbers are written is
summary/fmt.py, which the verdicts and gates use too (docs/architecture.md)."""
