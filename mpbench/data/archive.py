"""Safe extraction of dataset archives (the CIFAR-10 tar.gz files).

Members are extracted one by one, from a forward-only stream of bounded length, into a
fresh temporary folder next to the target, which is renamed into place only when every
member passed (a caller that then refuses the data deletes the folder again). Refused:
absolute paths, `..` components, symbolic and hard links, device files and FIFOs, more
than MAX_MEMBERS members or MAX_EXTRACTED_BYTES of data; each member also goes through
Python's `tarfile.data_filter` where this Python has it. Files are written by mpbench
itself (exclusive create, mode 0644), never by `TarFile.extract`.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import re
import shutil
import struct
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from mpbench.data.errors import DataError, UnsafeArchive
from mpbench.data.files import is_dir

# The CIFAR-10 archives unpack to about 180 MB; anything far beyond is not a dataset.
MAX_EXTRACTED_BYTES = 2 << 30
# Headers and padding on top of the members' data; the decompressed stream stops here.
MAX_STREAM_BYTES = MAX_EXTRACTED_BYTES + (64 << 20)
# The genuine archives hold 8 or 9 members; each member costs memory and an inode.
MAX_MEMBERS = 1000
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")
# What reading a broken archive raises: tarfile's own errors, and those of the gzip, bz2
# and xz streams under it ("r:*" opens all three), and bad text in member headers.
_READ_ERRORS = (
    tarfile.TarError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    OSError,
    ValueError,
    struct.error,
)


def member_path(member: tarfile.TarInfo, archive: Path) -> PurePosixPath:
    """The member's relative path, or UnsafeArchive when it is not a plain file or folder
    inside the target."""
    name = member.name
    where = f"{archive}: member {name!r}"
    if name.startswith(("/", "\\")) or _WINDOWS_DRIVE.match(name):
        raise UnsafeArchive(f"{where} has an absolute path; refusing the archive")
    parts = [p for p in re.split(r"[/\\]", name) if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"{where} climbs out of the folder with '..'; refusing the archive")
    if member.issym() or member.islnk():
        raise UnsafeArchive(f"{where} is a link; refusing the archive")
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchive(f"{where} is a device or special file; refusing the archive")
    return PurePosixPath(*parts)


def _inside(folder: Path, path: Path) -> bool:
    folder_real = os.path.realpath(folder)
    return os.path.commonpath([folder_real, os.path.realpath(path)]) == folder_real


def extract_safely(archive: Path, target: Path) -> Path:
    """Extract `archive` into `target` (created; if it already exists it is returned as is,
    since a complete extraction only ever appears there by an atomic rename)."""
    if is_dir(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _extract_into(archive, staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not is_dir(target):  # not a concurrent extraction that finished first
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _write_member(source: IO[bytes], dest: Path, archive: Path, name: str) -> None:
    """Copy one member's data into a file mpbench creates itself (never a file the
    archive placed there before: a name appearing twice is refused)."""
    try:
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise DataError(f"{archive}: member {name!r} appears twice") from None
    except OSError as exc:  # a name too long for this file system, no space, ...
        raise DataError(f"{archive}: cannot extract member {name!r} ({exc})") from exc
    with source, os.fdopen(fd, "wb") as out:
        while chunk := source.read(1 << 20):  # read errors: the caller's _READ_ERRORS
            try:
                out.write(chunk)
            except OSError as exc:
                raise DataError(f"{archive}: cannot extract member {name!r} ({exc})") from exc


def _extract_into(archive: Path, staging: Path) -> None:
    has_data_filter = hasattr(tarfile, "data_filter")
    total = 0
    try:
        with _open_stream(archive) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise UnsafeArchive(
                        f"{archive}: more than {MAX_MEMBERS} members; refusing the archive"
                    )
                relative = member_path(member, archive)
                if has_data_filter:
                    try:
                        tarfile.data_filter(member, str(staging))
                    except tarfile.FilterError as exc:
                        raise UnsafeArchive(
                            f"{archive}: member {member.name!r} refused: {exc}"
                        ) from None
                if not relative.parts:
                    continue
                dest = staging.joinpath(*relative.parts)
                if not _inside(staging, dest):
                    raise UnsafeArchive(
                        f"{archive}: member {member.name!r} resolves outside the folder"
                    )
                if member.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                total += member.size
                if total > MAX_EXTRACTED_BYTES:
                    raise UnsafeArchive(
                        f"{archive}: unpacks to more than {MAX_EXTRACTED_BYTES >> 20} MiB; "
                        "refusing the archive"
                    )
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is None:  # pragma: no cover - regular files always have data
                    raise DataError(f"{archive}: member {member.name!r} has no data")
                _write_member(source, dest, archive, member.name)
    except DataError:
        raise
    except _READ_ERRORS as exc:
        raise DataError(f"{archive}: not a readable tar archive ({exc})") from exc


@contextlib.contextmanager
def _open_stream(archive: Path) -> Iterator[_Bounded]:
    """The archive's decompressed bytes, read forwards only and never more than
    MAX_STREAM_BYTES of them. tarfile reads some headers (pax, GNU long names) whole into
    memory at the size they announce; the bound keeps a compressed stream of zeros from
    turning one such header into gigabytes."""
    with contextlib.ExitStack() as stack:
        stream: IO[bytes] = stack.enter_context(open(archive, "rb"))
        magic = stream.read(6)
        stream.seek(0)
        if magic.startswith(b"\x1f\x8b"):
            stream = stack.enter_context(gzip.GzipFile(fileobj=stream))
        elif magic.startswith(b"BZh"):
            stream = stack.enter_context(bz2.BZ2File(stream))
        elif magic.startswith(b"\xfd7zXZ\x00"):
            stream = stack.enter_context(lzma.LZMAFile(stream))
        yield _Bounded(stream, archive, MAX_STREAM_BYTES)


@dataclass
class _Bounded:
    """A read-only stream that refuses the archive once `left` bytes have been read."""

    stream: IO[bytes]
    archive: Path
    left: int

    def read(self, size: int | None = -1) -> bytes:
        want = self.left + 1 if size is None or size < 0 else min(size, self.left + 1)
        data = self.stream.read(want)
        self.left -= len(data)
        if self.left < 0:
            raise UnsafeArchive(
                f"{self.archive}: unpacks to more than {MAX_STREAM_BYTES >> 20} MiB; "
                "refusing the archive"
            )
        return data
