"""Short names for cells, long enough to be unambiguous in the report at hand.

`torch/mnist_dense/float32` is enough when one config ran on one machine; the config
entries that differ (and the machine) are added only when the report needs them. A
data-parallel group is always marked with its world size (`torch/mnist_dense/float32 ×2`,
`×2 [comm bf16]`), a world-size-1 group never: the mark says how the cell ran, not only how
it differs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable

from mpbench.compare.cells import PARALLEL_KEYS, CellKey, GroupKey, Layout


class Labeler:
    def __init__(self, keys: Iterable[GroupKey]) -> None:
        keys = set(keys)
        self._many_machines = len({k.fingerprint for k in keys}) > 1
        configs: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
        for key in keys:
            configs[(key.framework, key.workload)].append(dict(key.config))
        self._varying: dict[tuple[str, str], list[str]] = {}
        for where, dicts in configs.items():
            self._varying[where] = varying_entries(dicts)

    def group(self, key: GroupKey) -> str:
        label = f"{key.framework}/{key.workload}"
        label += config_suffix(dict(key.config), self._varying.get((key.framework, key.workload)))
        if self._many_machines:
            label += f" on {key.device} ({short_fingerprint(key.fingerprint)})"
        return label

    def framework(self, key: GroupKey) -> str:
        """The framework, plus the config entries that tell its groups apart (table rows)."""
        varying = self._varying.get((key.framework, key.workload))
        return key.framework + config_suffix(dict(key.config), varying)

    def cell(self, key: CellKey) -> str:
        group = self.group(key.group)
        head, _, tail = group.partition(" ")
        return f"{head}/{key.policy}" + (f" {tail}" if tail else "")


# Recipe entries a record leaves out at their default (CellSpec.config): said as the default.
_ABSENT = {"accumulate": "1", "compile": "false"}


def varying_entries(configs: list[dict[str, str]]) -> list[str]:
    """The config entries that differ between `configs`, the data-parallel layout left out
    (config_suffix marks it whenever it is there)."""
    names = sorted({n for d in configs for n in d if n not in PARALLEL_KEYS})
    return [n for n in names if len({d.get(n) for d in configs}) > 1]


def config_suffix(config: dict[str, str], varying: list[str] | None) -> str:
    """` ×2 [accumulate=4]`: the data-parallel mark (Layout.mark), then the `varying` entries;
    empty for a world-size-1 group whose config varies in nothing. `config` holds JSON texts."""
    layout = Layout.of({n: json.loads(config[n]) for n in PARALLEL_KEYS if n in config})
    text = f" {layout.mark()}" if layout.parallel else ""
    if varying:
        text += " [" + ", ".join(f"{n}={_value(config, n)}" for n in varying) + "]"
    return text


def _value(config: dict[str, str], name: str) -> str:
    return config.get(name, _ABSENT.get(name, "null"))


def short_fingerprint(fingerprint: str) -> str:
    return fingerprint[:12] if fingerprint else "unknown"
