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
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

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


def _bytearray(source: bytes | str = b"", *encoding: str) -> bytearray:
    """`bytearray` as pickles spell it: from bytes, or from text and its (latin-1) codec.
    Never from a number or an array: bytearray(10**12) would zero-fill a terabyte."""
    if isinstance(source, str):
        return bytearray(_latin1_encode(source, *encoding))
    if not isinstance(source, bytes) or encoding:
        raise _Refused(f"builtins.bytearray of a {type(source).__name__}")
    return bytearray(source)


def _container(kind: type[set[Any]] | type[frozenset[Any]]) -> Callable[..., Any]:
    """`set` / `frozenset` as protocol 2 spells them: from a list of the items. Not from
    an array, whose iteration a pickle could make arbitrarily long."""

    def build(items: list[Any] | tuple[Any, ...] = ()) -> set[Any] | frozenset[Any]:
        if not isinstance(items, list | tuple):
            raise _Refused(f"builtins.{kind.__name__} of a {type(items).__name__}")
        _check_hashed(items, "set item")
        return kind(items)

    return build


_ALLOWED: dict[tuple[str, str], Callable[..., Any]] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}
# plain containers that protocol 2 can only spell as globals
for _module in ("builtins", "__builtin__"):
    _ALLOWED[(_module, "set")] = _container(set)
    _ALLOWED[(_module, "frozenset")] = _container(frozenset)
    _ALLOWED[(_module, "bytearray")] = _bytearray
for _core in ("numpy.core", "numpy._core"):
    _ALLOWED[(f"{_core}.multiarray", "_reconstruct")] = _multiarray._reconstruct
    _ALLOWED[(f"{_core}.multiarray", "scalar")] = _multiarray.scalar
    _ALLOWED[(f"{_core}.numeric", "_frombuffer")] = _numeric._frombuffer

ALLOWED_GLOBALS = frozenset(_ALLOWED)


class _Unhashable(Exception):
    """A dict key or set item that is not a plain scalar; `loads` makes it a DataError."""


# What may be hashed while unpickling: dict keys and set items. Hashing a tuple or
# frozenset recurses in C once per nesting level, so a key nested a million deep (a 1 MB
# file) overflows the C stack: a segfault, not an exception. Genuine batches only ever use
# bytes (or str) keys.
_HASHABLE = (bytes, str, int, float, bool, type(None))


def _check_hashed(items: Any, what: str) -> None:
    for item in items:
        if not isinstance(item, _HASHABLE):
            raise _Unhashable(f"a {type(item).__name__} as a {what}")


# The pure-Python unpickler (in the stdlib since 3.0; typed loosely, being private).
_PurePython: Any = pickle._Unpickler  # type: ignore[attr-defined]


class RestrictedUnpickler(_PurePython):
    """Every global (GLOBAL, STACK_GLOBAL, INST, OBJ, EXT*) goes through find_class.

    Built on the pure-Python unpickler because the C one offers no hook before it hashes
    a dict key or set item: here the opcodes that hash check their operands first
    (_HASHABLE). A genuine batch is a few ten thousand small opcodes and one large
    string, so this costs milliseconds."""

    dispatch: ClassVar[dict[int, Callable[..., Any]]] = dict(_PurePython.dispatch)

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

    # Until the next MARK's items are popped, self.stack holds exactly those items.
    def _setitem(self) -> None:
        _check_hashed(self.stack[-2:-1], "dict key")
        _PurePython.load_setitem(self)

    def _setitems(self) -> None:
        _check_hashed(self.stack[0::2], "dict key")
        _PurePython.load_setitems(self)

    def _dict(self) -> None:
        _check_hashed(self.stack[0::2], "dict key")
        _PurePython.load_dict(self)

    def _additems(self) -> None:
        _check_hashed(self.stack, "set item")
        _PurePython.load_additems(self)

    def _frozenset(self) -> None:
        _check_hashed(self.stack, "set item")
        _PurePython.load_frozenset(self)

    dispatch[pickle.SETITEM[0]] = _setitem
    dispatch[pickle.SETITEMS[0]] = _setitems
    dispatch[pickle.DICT[0]] = _dict
    dispatch[pickle.ADDITEMS[0]] = _additems
    dispatch[pickle.FROZENSET[0]] = _frozenset


def loads(data: bytes, where: str) -> Any:
    """Unpickle `data` (the bytes of the file named by `where`) with the allow-list."""
    try:
        # Silenced: numpy warns about some odd dtype arguments, and a file must not be
        # able to add lines to mpbench's stderr (a refusal is exactly one line).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return RestrictedUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        raise UnsafePickle(
            f"{where}: refused to unpickle {exc}: the file asks to run code, and only plain "
            "data and numpy arrays are allowed"
        ) from None
    except _Unhashable as exc:
        raise DataError(
            f"{where}: holds {exc}; only bytes, strings and numbers are accepted there"
        ) from None
    except Exception as exc:  # any parse failure of a malformed file is the user's input
        raise DataError(f"{where}: not a readable pickle ({type(exc).__name__}: {exc})") from exc
