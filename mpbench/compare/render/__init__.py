"""Rendering the report: one module per format (terminal, markdown, JSON, CSV,
benchmark-action), the text tables the human formats share, and how numbers are written
(docs/architecture.md)."""
