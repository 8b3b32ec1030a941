"""Reports on a stream that cannot encode Unicode (LC_ALL=C, PYTHONIOENCODING=ascii, an old
Windows console): the symbols the renderers use are spelled in ASCII instead of failing with
UnicodeEncodeError half-way through a table. One place for every renderer that prints: the
table, markdown and the machine formats on stdout, the failure lines on stderr, and the run
summary at the end of `mpbench run`. Files (--output, the step summary) are always UTF-8.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console

# What the renderers print, in ASCII. Anything else (a device name with "®" in it) becomes "?".
ASCII = str.maketrans(
    {
        "×": "x",
        "†": "+",
        "±": "+/-",
        "—": "-",
        "–": "-",
        "≥": ">=",
        "≤": "<=",
        "→": "->",
        "·": "-",
        "•": "*",
        "…": "...",
        "Δ": "delta",
        "µ": "u",
        "✅": "[ok]",
        "❌": "[x]",
        "⚠": "(!)",
        "\ufe0f": "",  # the emoji variation selector after ⚠
        "‘": "'",
        "’": "'",
        "“": '"',
        "”": '"',
    }
)


def needs_ascii(stream: Any) -> bool:
    """True when `stream` encodes text in anything but a UTF encoding."""
    encoding = getattr(stream, "encoding", None)
    if not encoding:
        return False  # io.StringIO and the like hold str: nothing to encode
    try:
        return not codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return True


def to_ascii(text: str, encoding: str = "ascii") -> str:
    """`text` with the report's symbols spelled out, and nothing `encoding` cannot hold."""
    return text.translate(ASCII).encode(encoding, "replace").decode(encoding)


class _Spelled:
    """A text stream that spells what it is given for its encoding; otherwise the stream."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(to_ascii(text, self._stream.encoding))

    def __getattr__(self, name: str) -> Any:  # encoding, flush, isatty, fileno, ...
        return getattr(self._stream, name)


def safe_stream(stream: TextIO) -> TextIO:
    """`stream`, wrapped to spell in ASCII when it cannot encode Unicode."""
    if isinstance(stream, _Spelled) or not needs_ascii(stream):
        return stream
    return _Spelled(stream)  # type: ignore[return-value]


def spell_for(stream: Any, text: str) -> str:
    """`text` as `stream` will print it. Rich lays out a table before the stream sees it, so
    table cells are spelled first: "Δ acc." -> "delta acc." must widen its column, not
    push the border out of line."""
    return to_ascii(text, stream.encoding) if needs_ascii(stream) else text


@contextmanager
def safe_console(console: Console) -> Iterator[Console]:
    """`console` printing through `safe_stream` for a while (the run summary's console is the
    runner's, so it is given back as it was)."""
    original = console.file
    console.file = safe_stream(original)
    try:
        yield console
    finally:
        console.file = original
