"""What the zoo tests share: a name refused by the zoo, in one line naming it."""

from __future__ import annotations

import pytest

from mpbench.errors import InvalidInput
from mpbench.workloads import user


def one_line(name: str, call=user.load) -> str:
    with pytest.raises(InvalidInput) as raised:
        call(name)
    said = str(raised.value)
    assert "\n" not in said and said.startswith(f"--workload {name!r}: "), said
    return said
