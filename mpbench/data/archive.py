"""Safe extraction of dataset archives (the CIFAR-10 tar.gz files).

Members are extracted one by one into a fresh temporary folder next to the target, which
is renamed into place only when every member passed. Refused: absolute paths, `..`
components, symbolic and hard links, device files and FIFOs; each member also goes through
Python's `tarfile.data_filter` where this Python has it. Files are written by mpbench
itself (exclusive create, mode 0644), never by `TarFile.extract`.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from mpbench.data.errors import DataError, UnsafeArchive

# The CIFAR-10 archives unpack to about 180 MB; anything far beyond is not a dataset.
MAX_EXTRACTED_BYTES = 2 << 30
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


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
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        _extract_into(archive, staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not target.is_dir():  # not a concurrent extraction that finished first
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _extract_into(archive: Path, staging: Path) -> None:
    has_data_filter = hasattr(tarfile, "data_filter")
    total = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
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
                try:
                    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    raise DataError(f"{archive}: member {member.name!r} appears twice") from None
                with source, os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
    except DataError:
        raise
    except _READ_ERRORS as exc:
        raise DataError(f"{archive}: not a readable tar archive ({exc})") from exc
