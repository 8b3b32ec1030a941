"""Reading named arrays out of an `.npz` without letting the file choose the allocation.

`np.load` allocates whatever shape an array's header announces before reading its data,
so a 200-byte npz can ask for terabytes. Here every member is bounded by its declared
size in the zip directory (which zipfile enforces while decompressing), and the header's
shape must account for exactly the bytes that follow it before any array is built.
"""

from __future__ import annotations

import io
import lzma
import math
import struct
import zipfile
import zlib

import numpy as np

from mpbench.data.errors import DataError, UnsafePickle

# Per array: MNIST's training images are 47 MB; anything far beyond is not MNIST.
MAX_MEMBER_BYTES = 1 << 30
# What zipfile and numpy's header parser raise on a broken file. RuntimeError: an
# encrypted member, or a compression method zipfile lacks (a RuntimeError subclass).
_READ_ERRORS = (
    OSError,
    EOFError,
    ValueError,
    KeyError,
    RuntimeError,
    struct.error,
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
)


def read_arrays(raw: bytes, keys: tuple[str, ...], where: str) -> dict[str, np.ndarray]:
    """`keys` from the npz bytes `raw` (of the file named by `where`); DataError naming
    the file for anything malformed, UnsafePickle for an object array."""
    if not zipfile.is_zipfile(io.BytesIO(raw)):  # else np.load would take it for a pickle
        raise DataError(f"{where}: not a valid .npz file (no zip archive structure)")
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            members = _members(archive)
            missing = [k for k in keys if k not in members]
            if missing:
                names = [name[:40] for name in list(members)[:10]]  # a hostile zip: thousands
                found = ", ".join(names) + (", ..." if len(members) > 10 else "") or "none"
                raise DataError(
                    f"{where}: no {', '.join(missing)} array (arrays found: {found}); "
                    f"expected {', '.join(keys)}"
                )
            return {key: _read_member(archive, members[key], f"{where} {key}") for key in keys}
    except DataError:
        raise
    except _READ_ERRORS as exc:
        raise DataError(f"{where}: not a valid .npz file ({exc})") from exc


def _members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """Array name -> member, named as np.load names them (`x.npy` is array `x`)."""
    out: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        name = info.filename.removesuffix(".npy")
        out.setdefault(name, info)
    return out


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> np.ndarray:
    if info.file_size > MAX_MEMBER_BYTES:
        raise DataError(
            f"{where}: unpacks to {info.file_size} bytes, more than the "
            f"{MAX_MEMBER_BYTES >> 20} MiB an MNIST array can be"
        )
    data = archive.read(info)  # at most file_size bytes; the CRC is checked
    stream = io.BytesIO(data)
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise DataError(f"{where}: .npy format version {version} is not supported")
    if any(d < 0 for d in shape):
        raise DataError(f"{where}: header announces a negative shape {shape}")
    if dtype.hasobject:
        raise UnsafePickle(f"{where}: holds pickled objects; mpbench reads only plain arrays")
    count = math.prod(shape)
    body = len(data) - stream.tell()
    if count * dtype.itemsize != body:
        raise DataError(
            f"{where}: header announces shape {shape} of {dtype} ({count * dtype.itemsize} "
            f"bytes) but {body} bytes follow it"
        )
    if count == 0:  # frombuffer refuses an empty read; the shape checks report it
        return np.empty(shape, dtype=dtype)
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
    return flat.reshape(shape, order="F" if fortran else "C").copy()
