"""Data errors a user can cause. All are InvalidInput: the CLI prints one line and exits 2."""

from __future__ import annotations

from mpbench.errors import InvalidInput


def one_line(message: str) -> str:
    """`message` without line breaks: a file name may contain one, a message must not."""
    return " ".join(message.splitlines())


class DataError(InvalidInput):
    """A data file is malformed: wrong magic, truncated, wrong shape or dtype, bad labels."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class UnsafeData(DataError):
    """A file asks for something mpbench refuses to do (run code, write outside a folder)."""


class UnsafePickle(UnsafeData):
    """A pickle names a global outside the allow-list: nothing in it is executed."""


class UnsafeArchive(UnsafeData):
    """An archive member is a link, a device, an absolute path or climbs out with `..`."""


class ChecksumMismatch(DataError):
    """A download's SHA-256 differs from the published one; the download was deleted."""


class DataNotFound(DataError):
    """`--data real` and no real copy was found or could be fetched."""
