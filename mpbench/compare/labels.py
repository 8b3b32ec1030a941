"""Short names for cells, long enough to be unambiguous in the report at hand.

`torch/mnist_dense/float32` is enough when one config ran on one machine; the config
entries that differ (and the machine) are added only when the report needs them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from mpbench.compare.cells import CellKey, GroupKey


class Labeler:
    def __init__(self, keys: Iterable[GroupKey]) -> None:
        keys = set(keys)
        self._many_machines = len({k.fingerprint for k in keys}) > 1
        configs: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
        for key in keys:
            configs[(key.framework, key.workload)].append(dict(key.config))
        self._varying: dict[tuple[str, str], list[str]] = {}
        for where, dicts in configs.items():
            names = sorted({n for d in dicts for n in d})
            self._varying[where] = [n for n in names if len({d.get(n) for d in dicts}) > 1]

    def group(self, key: GroupKey) -> str:
        label = f"{key.framework}/{key.workload}"
        varying = self._varying.get((key.framework, key.workload), [])
        if varying:
            config = dict(key.config)
            label += " [" + ", ".join(f"{n}={_value(config, n)}" for n in varying) + "]"
        if self._many_machines:
            label += f" on {key.device} ({short_fingerprint(key.fingerprint)})"
        return label

    def framework(self, key: GroupKey) -> str:
        """The framework, plus the config entries that tell its groups apart (table rows)."""
        varying = self._varying.get((key.framework, key.workload), [])
        if not varying:
            return key.framework
        config = dict(key.config)
        return f"{key.framework} [" + ", ".join(f"{n}={_value(config, n)}" for n in varying) + "]"

    def cell(self, key: CellKey) -> str:
        group = self.group(key.group)
        head, _, tail = group.partition(" ")
        return f"{head}/{key.policy}" + (f" {tail}" if tail else "")


# Recipe entries a record leaves out at their default (CellSpec.config): said as the default.
_ABSENT = {"accumulate": "1", "compile": "false"}


def _value(config: dict[str, str], name: str) -> str:
    return config.get(name, _ABSENT.get(name, "null"))


def short_fingerprint(fingerprint: str) -> str:
    return fingerprint[:12] if fingerprint else "unknown"
