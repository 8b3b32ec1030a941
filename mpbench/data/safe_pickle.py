"""A restricted unpickler for the CIFAR-10 python batches.

The genuine batches are Python 2 pickles of a dict holding a numpy array. Rebuilding that
array needs a handful of numpy functions (and `_codecs.encode` for bytes pickled by
Python 3 at protocol 2); every other global a pickle names is refused before it is looked
up, so nothing in the file is ever executed.
"""

from __future__ import annotations

import codecs
import importlib
import io
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from mpbench.data.errors import DataError, UnsafePickle

# numpy >= 2 writes `numpy._core.*` names, numpy 1.x wrote `numpy.core.*`; both resolve to
# the functions of the numpy installed here, looked up once (never by a name from the file).
_NUMPY_CORE = "numpy._core" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core"
_multiarray = importlib.import_module(f"{_NUMPY_CORE}.multiarray")
_numeric = importlib.import_module(f"{_NUMPY_CORE}.numeric")


class _Refused(Exception):
    """Raised inside the unpickler; `loads` turns it into UnsafePickle naming the file."""


def _latin1_encode(text: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """`_codecs.encode` as Python 3 uses it to pickle bytes at protocol 2 (always latin-1):
    any other codec is refused, so the global cannot reach a transforming codec."""
    try:
        latin1 = codecs.lookup(encoding).name == "iso8859-1"
    except LookupError:
        latin1 = False
    if not latin1 or not isinstance(text, str) or errors != "strict":
        raise _Refused(f"_codecs.encode with encoding {encoding!r}")
    return text.encode("latin-1")


_ALLOWED: dict[tuple[str, str], Callable[..., Any]] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
    # plain containers that protocol 2 can only spell as globals
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("__builtin__", "set"): set,
    ("__builtin__", "frozenset"): frozenset,
    ("__builtin__", "bytearray"): bytearray,
}
for _core in ("numpy.core", "numpy._core"):
    _ALLOWED[(f"{_core}.multiarray", "_reconstruct")] = _multiarray._reconstruct
    _ALLOWED[(f"{_core}.multiarray", "scalar")] = _multiarray.scalar
    _ALLOWED[(f"{_core}.numeric", "_frombuffer")] = _numeric._frombuffer

ALLOWED_GLOBALS = frozenset(_ALLOWED)


class RestrictedUnpickler(pickle.Unpickler):
    """Every global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) goes through find_class."""

    def __init__(self, file: io.BufferedIOBase) -> None:
        # encoding="bytes": Python 2 `str` values (the genuine files' keys and pixel data)
        # come back as bytes, as in the CIFAR-10 reference loader.
        super().__init__(file, encoding="bytes")

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise _Refused(f"{module}.{name}")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def loads(data: bytes, where: str) -> Any:
    """Unpickle `data` (the bytes of the file named by `where`) with the allow-list."""
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        raise UnsafePickle(
            f"{where}: refused to unpickle {exc}: the file asks to run code, and only plain "
            "data and numpy arrays are allowed"
        ) from None
    except Exception as exc:  # any parse failure of a malformed file is the user's input
        raise DataError(f"{where}: not a readable pickle ({type(exc).__name__}: {exc})") from exc
