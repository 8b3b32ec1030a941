"""A model's input `x`: one array, or several by name (docs/workloads.md, "A model of several
inputs").

A `UserWorkload`'s `x` may be a mapping of the model's keyword arguments to arrays (an
encoder-decoder's `{"input_ids": ..., "decoder_input_ids": ...}`); torch cells call
`model(**x)`, Keras cells hand the dict to the model as Keras takes one. Every array of it
has the samples as its first axis, so a batch is the same rows of each. These helpers take
either form (numpy arrays or torch tensors alike: they only index, slice and measure), so
that each rule about batches of `x` is written once, whichever form it has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

# An array-like (numpy array, torch tensor), or a mapping of keyword names to them.
Inputs = Any


def named(x: Inputs) -> bool:
    """Whether `x` is several inputs by name (a mapping), not one array."""
    return isinstance(x, Mapping)


def each(x: Inputs, fn: Callable[[Any], Any]) -> Inputs:
    """`fn` applied to every array of `x`, in the same form (a dict where `x` is a mapping)."""
    if named(x):
        return {key: fn(value) for key, value in x.items()}
    return fn(x)


def parts(x: Inputs, role: str) -> Iterator[tuple[str, Any]]:
    """(what a message calls it, array) for every array of `x`: `x_train` itself, or
    `x_train['input_ids']` and so on."""
    if named(x):
        for key, value in x.items():
            yield f"{role}[{key!r}]", value
    else:
        yield role, x


def arrays(x: Inputs) -> list[Any]:
    """Every array of `x`, in order (one for one array)."""
    return list(x.values()) if named(x) else [x]


def first(x: Inputs) -> Any:
    """One array of `x`: for what all its arrays share (the samples, the device)."""
    return next(iter(x.values())) if named(x) else x


def samples(x: Inputs) -> int:
    """The samples `x` holds: its first axis (the same for every array of a mapping)."""
    return len(first(x))


def rows(x: Inputs, index: Any) -> Inputs:
    """The same rows (a slice, an index array) of every array of `x`."""
    return each(x, lambda array: array[index])


def head(x: Inputs, count: int) -> Inputs:
    """The first `count` samples of `x`."""
    return rows(x, slice(None, count))
