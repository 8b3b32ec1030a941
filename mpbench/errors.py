"""Errors that mean "the user asked for something invalid" (exit code 2, one line), and the
one way each of mpbench's messages quotes an exception it caught."""

from __future__ import annotations

from collections.abc import Iterable


class InvalidInput(Exception):
    """Bad input: the CLI prints the message as one line and exits 2."""


def unknown_choice(kind: str, value: str, choices: Iterable[str]) -> InvalidInput:
    valid = ", ".join(choices)
    return InvalidInput(f"unknown {kind} {value!r}; valid choices: {valid}")


def first_line(exc: BaseException) -> str:
    """An exception's first line (stripped), or its type's name where it says nothing: what
    a record's reason or a note quotes of a library's error, whose later lines are a
    traceback or advice on its own tools."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception's message on one line: every line of it, joined (a library's second line
    is often the one that says what is wrong: transformers' `Validation error for field
    'n_layer':` is followed by `expected int, got str`), at most `limit` characters."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    text = text or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
