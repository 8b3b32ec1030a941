"""Errors that mean "the user asked for something invalid" (exit code 2, one line)."""

from __future__ import annotations

from collections.abc import Iterable


class InvalidInput(Exception):
    """Bad input: the CLI prints the message as one line and exits 2."""


def unknown_choice(kind: str, value: str, choices: Iterable[str]) -> InvalidInput:
    valid = ", ".join(choices)
    return InvalidInput(f"unknown {kind} {value!r}; valid choices: {valid}")
