"""The --plot figure: its layout (figure.py), the bar panels, the per-step series and the
shared style; matplotlib is imported only when a figure is drawn (docs/architecture.md)."""
