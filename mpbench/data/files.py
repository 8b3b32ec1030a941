"""Looking at and reading data files without trusting them.

Everything here turns the ways a hostile or broken file system entry can fail (no
permission, a directory or FIFO where a file should be, a file far larger than any
dataset, a gzip bomb) into a one-line DataError naming the path, so the CLI exits 2
instead of printing a traceback, hanging on a FIFO or exhausting memory.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import zlib
from pathlib import Path

from mpbench.data.errors import DataError

# The largest file mpbench reads whole: the biggest genuine one (MNIST's raw training
# images, 47 MB) with a wide margin. A larger file is not a dataset file; refusing it up
# front keeps a hostile file from filling memory.
MAX_FILE_BYTES = 1 << 30
# Not-found style errors: the entry simply is not there (a missing folder in the path).
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def kind(path: Path) -> str | None:
    """What is at `path`: "file", "dir", "other" (FIFO, device, socket) or None when
    absent. Any other failure to look (no permission, a name too long, a NUL byte) is a
    DataError, where pathlib's is_file() would raise or quietly say False."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in _ABSENT:
            return None
        raise DataError(f"{path}: cannot look at it ({exc.strerror or exc})") from exc
    except ValueError as exc:  # an embedded NUL byte
        raise DataError(f"{str(path)!r}: not a usable path ({exc})") from exc
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


def is_file(path: Path) -> bool:
    return kind(path) == "file"


def is_dir(path: Path) -> bool:
    return kind(path) == "dir"


def read_file(path: Path, limit: int | None = None) -> bytes:
    """The whole of a regular file of at most `limit` bytes, or DataError naming it.

    Opened non-blocking so a FIFO planted under a data file's name cannot hang the run,
    and checked to be a regular file before a byte is read (never /dev/zero)."""
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise DataError(f"{str(path)!r}: not a usable path ({exc})") from exc
    try:  # checked on the descriptor before wrapping it: fdopen refuses a directory
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise DataError(_too_big(path, info.st_size, limit))
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)  # +1: a file that grew (or lies about its size)
        except OSError as exc:
            raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if len(data) > limit:
        raise DataError(_too_big(path, len(data), limit))
    return data


def gunzip(raw: bytes, path: Path, limit: int | None = None) -> bytes:
    """Decompress at most `limit` bytes: a few kilobytes of gzip can claim terabytes."""
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            data = f.read(limit + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: not a valid gzip file ({exc})") from exc
    if len(data) > limit:
        raise DataError(f"{path}: unpacks to more than {limit >> 20} MiB; not a dataset file")
    return data


def _too_big(path: Path, size: int, limit: int) -> str:
    return f"{path}: {size} bytes, more than the {limit >> 20} MiB a dataset file can be"
