"""The `--plot` figure as an `<svg>` element for `--format html` to put inside its page: no
XML prolog or DOCTYPE, no date, text kept as text (it scales, can be searched and read aloud,
and is a tenth of the size of glyph outlines), the fixed size replaced by the page's CSS
width, a <title> as its text alternative."""

from __future__ import annotations

import io
import re

from mpbench.compare.plot.figure import _matplotlib

TITLE = "mpbench compare figure: what each policy buys against float32, per workload"


def figure_svg(figure) -> str:
    """A figure build_figure drew (the one --plot writes: drawn once) as an inline <svg>."""
    matplotlib = _matplotlib()
    buffer = io.StringIO()
    # hashsalt: most ids matplotlib makes up are then the same at every run (a clip path of a
    # non-rectangular shape still takes an object's address: the page is not byte-stable).
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "mpbench"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    return inline(buffer.getvalue())


def inline(svg: str) -> str:
    """A standalone SVG file as an element of a page."""
    start = svg.index("<svg")
    element = svg[start:]
    tag_end = element.index(">")
    tag = element[:tag_end]
    # The viewBox keeps the proportions; the page's CSS sets the width.
    tag = re.sub(r'\s(width|height)="[^"]*"', "", tag)
    tag += ' role="img" aria-labelledby="figure-title"'
    title = f'<title id="figure-title">{TITLE}</title>'
    return f"{tag}>{title}{element[tag_end + 1 :]}".strip()
