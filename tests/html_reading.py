"""An html report's tables read back without a browser (the standard library's parser): per
`<table>`, the heading before it and its rows' cells as text, a `<br>` as a line break, as
tables.TextTable holds them. The browser tests read the same from Chromium's DOM."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class ReadTable:
    title: str
    rows: list[list[str]] = field(default_factory=list)  # the header row first


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[ReadTable] = []
        self.heading: str | None = None  # text of the <h2>/<h3> being read
        self.last_heading = ""
        self.cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("h2", "h3"):
            self.heading = ""
        elif tag == "table":
            self.tables.append(ReadTable(self.last_heading))
        elif tag == "tr" and self.tables:
            self.tables[-1].rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""
        elif tag == "br" and self.cell is not None:
            self.cell += "\n"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("h2", "h3") and self.heading is not None:
            self.last_heading, self.heading = self.heading, None
        elif tag in ("td", "th") and self.cell is not None:
            self.tables[-1].rows[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell += data
        elif self.heading is not None:
            self.heading += data


def read_tables(page: str) -> list[ReadTable]:
    parser = _Tables()
    parser.feed(page)
    parser.close()
    return parser.tables


def markdown_tables(text: str) -> list[list[list[str]]]:
    """A markdown report's tables: rows of cells (the alignment row left out), `\\|` as `|`."""
    tables: list[list[list[str]]] = []
    previous = ""
    for line in text.splitlines():
        if line.startswith("| "):
            if not previous.startswith("| "):
                tables.append([])
            cells = line[2:-2].replace("\\|", "\0").split(" | ")
            cells = [c.replace("\0", "|") for c in cells]
            if not all(set(c) <= set("-:") for c in cells):
                tables[-1].append(cells)
        previous = line
    return tables
