"""The HTML page every `--format html` report is written in: one self-contained file (its
style inline, no script, no font, image or style from another host: a Content-Security-Policy
forbids any load), light and dark from the viewer's preference, readable on a phone (tables
scroll sideways in their own box). The report's tables (tables.TextTable, the model the
terminal and markdown draw) become `<table>`s with `<th>` headers, their footnotes and
verdicts below them. Every text that comes from a record, a name or a git message is escaped
here (`esc`); the renderers pass text, never markup, except what this module made.
"""

from __future__ import annotations

import html
import re

from mpbench.compare.render.tables import INCONCLUSIVE, TEXT_COLUMNS, TextTable

# The columns whose values may wrap between words: the terminal's (gate messages, statuses).
from mpbench.compare.render.terminal import _WRAPPING as WRAPPING


def esc(text: object) -> str:
    """Text as HTML: `<`, `>`, `&` and both quotes escaped (safe in an attribute too)."""
    return html.escape(str(text), quote=True)


# No request of any kind may leave the page: images only as data: URLs, styles inline.
_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_CSS = """
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #5b636e; --bg: #ffffff;
  --panel: #f5f7fa; --line: #d5dae1; --bad: #b42318; --bad-bg: #fdecea; --warn: #8a5a00;
  --warn-bg: #fff6e0; --good: #1a7f37; --accent: #0b63c4; --point: #0b63c4;
  --level: #d97706; --change: #c0262d; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e9ed; --muted: #9aa4b1; --bg: #12161b; --panel: #1b2129;
    --line: #343c47; --bad: #ff7b72; --bad-bg: #3a1d1d; --warn: #e3b341; --warn-bg: #33290f;
    --good: #56d364; --accent: #6cb6ff; --point: #6cb6ff; --level: #f0a83a;
    --change: #ff7b72; }
}
* { box-sizing: border-box; }
body { margin: 0 auto; padding: 1rem; max-width: 1400px; background: var(--bg);
  color: var(--fg); font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto,
  "Noto Sans", "DejaVu Sans", sans-serif; }
h1 { font-size: 1.5rem; margin: .2rem 0 .6rem; }
h2 { font-size: 1.15rem; margin: 1.6rem 0 .5rem; overflow-wrap: anywhere; }
h3 { font-size: 1rem; margin: 1rem 0 .3rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .15rem .8rem;
  margin: 0 0 1rem; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; min-width: 100%;
  font-size: .87rem; }
th, td { padding: .25rem .45rem; border-bottom: 1px solid var(--line); white-space: nowrap;
  text-align: right; vertical-align: top; }
thead th { background: var(--panel); }
/* The row's name stays in view while a wide table scrolls sideways (a phone). */
tbody td:first-child { position: sticky; left: 0; background: var(--bg); }
thead th:first-child { position: sticky; left: 0; }
th.text, td.text { text-align: left; }
td.prose { white-space: normal; min-width: 9rem; text-align: left; }
tr.group-end td { border-bottom: 2px solid var(--muted); }
tr.failed td { color: var(--bad); background: var(--bad-bg); }
tr.dim td { color: var(--muted); }
tr.warning td { background: var(--warn-bg); }
a.mark { color: var(--accent); text-decoration: none; }
.notes { color: var(--muted); font-size: .9rem; margin: .4rem 0 0; padding: 0;
  list-style: none; }
.notes li { margin: .2rem 0; overflow-wrap: anywhere; }
.notes li:target { color: var(--fg); background: var(--warn-bg); }
ul.verdicts li, ul.plain li { margin: .2rem 0; overflow-wrap: anywhere; }
.outcome { padding: .6rem .8rem; border-radius: 6px; font-weight: 600; margin: .6rem 0; }
.outcome.fail { color: var(--bad); background: var(--bad-bg); }
.outcome.pass { color: var(--good); background: var(--panel); }
.outcome.warn { color: var(--warn); background: var(--warn-bg); }
.badge { font-weight: 700; }
.badge.fail { color: var(--bad); } .badge.pass { color: var(--good); }
.badge.inconclusive { color: var(--warn); }
figure { margin: 1rem 0; }
figure.plot { background: #ffffff; border-radius: 6px; padding: .4rem; overflow-x: auto; }
figure.plot svg { width: 100%; min-width: 640px; height: auto; }
figcaption { color: var(--muted); font-size: .9rem; margin-top: .3rem; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 560px),
  1fr)); gap: .8rem; }
.chart { border: 1px solid var(--line); border-radius: 6px; padding: .4rem; margin: 0; }
.chart svg { width: 100%; height: auto; display: block; }
.chart text { fill: var(--muted); font-size: 11px; }
.chart .axis { stroke: var(--line); }
.chart .interval { stroke: var(--point); stroke-opacity: .35; stroke-width: 2; }
.chart .point { fill: var(--point); }
.chart .untrusted { fill: var(--bg); stroke: var(--muted); stroke-width: 1.5; }
.chart .level { stroke: var(--level); stroke-width: 2; }
.chart line.change { stroke: var(--change); stroke-dasharray: 4 3; }
.chart text.change { fill: var(--change); font-weight: 600; }
footer { color: var(--muted); font-size: .85rem; margin-top: 2rem; }
"""


def page(title: str, body: list[str]) -> str:
    """The whole document: `body` is markup this package made (its text already escaped)."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="mpbench">',
        f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
    ]
    return "\n".join([*head, *body, "</main>", "</body>", "</html>"]) + "\n"


def facts(items: list[tuple[str, str]]) -> str:
    """A header's `name: value` pairs as a definition list."""
    rows = "".join(f"<dt>{esc(name)}</dt><dd>{esc(value)}</dd>" for name, value in items)
    return f'<dl class="facts">{rows}</dl>'


def bullet_list(lines: list[str], css: str = "plain") -> str:
    return f'<ul class="{css}">' + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"


_FOOTNOTE = re.compile(r"^\[(\d+)\] ")
_MARK = re.compile(r"\[(\d+)\]")
_BADGES = {"FAIL": "fail", INCONCLUSIVE: "inconclusive", "pass": "pass"}


def table_html(table: TextTable, anchor: str, heading: str = "h2") -> str:
    """One report table: its title, the table in a box that scrolls sideways, its caption
    and footnotes (each numbered one an anchor `anchor`-n, which the cells' `[n]` link to,
    with the footnote's text on hover), and its verdicts; the title a `heading` element."""
    notes = {m.group(1): line for line in table.footnotes if (m := _FOOTNOTE.match(line))}
    text = TEXT_COLUMNS | table.text_columns
    # Per column: "text" (left-aligned), "prose" (text that may wrap), or "" (a number).
    kinds = [
        "prose" if h in WRAPPING | table.prose_columns else "text" if h in text else ""
        for h in table.headers
    ]
    title = f"<{heading}>{esc(table.title)}</{heading}>"
    out = [f'<section id="{anchor}">', title, '<div class="scroll">']
    out.append("<table>")
    head = "".join(
        f'<th scope="col"{_class(k and "text")}>{esc(h)}</th>'
        for h, k in zip(table.headers, kinds, strict=True)
    )
    out.append(f"<thead><tr>{head}</tr></thead>")
    out.append("<tbody>")
    for index, row in enumerate(table.rows):
        css = [table.styles[index]] if index < len(table.styles) and table.styles[index] else []
        css += ["group-end"] if index in table.group_ends else []
        cells = []
        for column, (value, kind) in enumerate(zip(row, kinds, strict=True)):
            inner = _cell(value, notes, anchor)
            if column == 0 and table.headers[0] == "result":
                inner = f'<span class="badge {_BADGES.get(value, "pass")}">{inner}</span>'
            cells.append(f"<td{_class(kind)}>{inner}</td>")
        out.append(f"<tr{_class(' '.join(css))}>{''.join(cells)}</tr>")
    out += ["</tbody>", "</table>", "</div>"]
    lines = (table.caption.splitlines() if table.caption else []) + table.footnotes
    if lines:
        items = []
        for line in lines:
            found = _FOOTNOTE.match(line)
            where = f' id="{anchor}-{found.group(1)}"' if found else ""
            items.append(f"<li{where}>{esc(line)}</li>")
        out.append(f'<ul class="notes">{"".join(items)}</ul>')
    if table.verdicts:
        out += ["<h3>Verdict</h3>", bullet_list(table.verdicts, "verdicts")]
    out.append("</section>")
    return "\n".join(out)


def _class(css: str) -> str:
    return f' class="{css}"' if css else ""


def _cell(value: str, notes: dict[str, str], anchor: str) -> str:
    """A cell's text escaped, its lines apart (`<br>`), each `[n]` a link to footnote n
    whose text shows on hover: a skipped or failed cell reads with its reason."""
    lines = []
    for line in value.split("\n"):
        parts = _MARK.split(line)  # text, number, text, number, ...
        spans = []
        for i, part in enumerate(parts):
            if i % 2 == 0:
                spans.append(esc(part))
            elif part in notes:
                spans.append(
                    f'<a class="mark" href="#{anchor}-{part}" title="{esc(notes[part])}">'
                    f"[{part}]</a>"
                )
            else:
                spans.append(esc(f"[{part}]"))
        lines.append("".join(spans))
    return "<br>".join(lines)


def outcome(text: str, kind: str) -> str:
    """A banner: the gates' verdict (`fail`, `pass`) or a warning (`warn`)."""
    return f'<p class="outcome {kind}" role="status">{esc(text)}</p>'
