"""The names of groups and cells, made here once for every output of a report.

A group (one framework × workload × config on one machine) is named by its framework and
what sets it apart: `torch`, `torch [accumulate=2]`, `torch [compile]`, `tf [loop=custom]`,
`torch ×2 [comm bf16]`. That one string is the table's row name (with the policy after it:
`torch [accumulate=2] bf16`), the legend line under the table, the verdicts, the plot's legend
and panel titles, and the `group` field of JSON and CSV.

What sets a group apart, in this order:
- the recipe it ran with, whenever not at the default (`accumulate=2`, `compile`): it says how
  the cells ran, not only how they differ, like the world size (results.variant);
- config entries that differ between the report's groups of the same framework and workload,
  by name and value (`batch_size=256`, `loop=custom`; a flag that is on by its name, `jit`;
  entries at a known default unsaid), the same entries for that framework in every workload,
  so a config has one name, and one colour in the plot, throughout the report;
- the data-parallel layout (`×2`, `×2 [comm bf16]`).

A cell label (gates, notes, drift lines, JSON's `cell`) is
`framework/workload/policy` followed by the same marks and the row's own (`@512`,
`[loss scale 1024]`, `(fallback)`): `torch/mnist_dense/mixed_float16 [accumulate=2]
[loss scale 1024]`, and the machine when the report holds several.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from mpbench.compare.summary.cells import CellKey, GroupKey
from mpbench.results.identity import PARALLEL_KEYS
from mpbench.results.machine import short_fingerprint as short_fingerprint  # for the renderers
from mpbench.results.variant import (
    DEFAULTS,
    GROUP_RECIPE,
    bracket,
    entry,
    group_marks,
    join,
    recipe_entries,
)

# The framework as a row name says it: short enough for a table column, the same everywhere.
SHORT_FRAMEWORKS = {"torch": "torch", "tensorflow": "tf"}


def short_framework(framework: str) -> str:
    return SHORT_FRAMEWORKS.get(framework, framework)


class Labeler:
    """Names for the groups of one report. A key it was not built with is named from its own
    config (no entry is known to vary)."""

    def __init__(self, keys: Iterable[GroupKey]) -> None:
        keys = set(keys)
        self._many_machines = len({k.fingerprint for k in keys}) > 1
        configs: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
        for key in keys:
            configs[(key.framework, key.workload)].append(dict(key.config))
        self._varying: dict[str, set[str]] = defaultdict(set)
        for (framework, _), dicts in configs.items():
            self._varying[framework] |= set(varying_entries(dicts))

    def marks(self, key: GroupKey) -> str:
        """What sets the group apart after its framework: `[accumulate=2, batch_size=256] ×2`;
        empty for a plain group that nothing else in the report differs from."""
        config = key.config_dict()
        entries = recipe_entries(config)
        for name in sorted(self._varying.get(key.framework, ())):
            value = config.get(name)
            if value is not None and value != DEFAULTS.get(name, _NO_DEFAULT):
                entries.append(entry(name, value))
        return join(bracket(entries), key.layout().mark()) or ""

    def group(self, key: GroupKey) -> str:
        """`torch`, `torch [accumulate=2]`, `tf [loop=custom]`, `torch ×2 [comm bf16]`."""
        return join(short_framework(key.framework), self.marks(key)) or key.framework

    def cell(self, key: CellKey) -> str:
        """`torch/mnist_dense/mixed_float16 [accumulate=2] [loss scale 1024]`, with the
        machine when the report holds several."""
        group = key.group
        label = f"{group.framework}/{group.workload}/{key.row.policy}"
        label = join(label, self.marks(group), key.row.variant) or label
        if self._many_machines:
            label += f" on {group.machine().label()}"
        return label

    def variant(self, key: CellKey) -> str | None:
        """How the cell ran beside its policy (results.variant: recipe and layout marks, then
        the row's); None for a plain cell. The same string `mpbench.results.load` gives the
        cell's records."""
        return join(group_marks(key.group.config_dict()), key.row.variant)


_NO_DEFAULT = object()


def varying_entries(configs: list[dict[str, str]]) -> list[str]:
    """The config entries that differ between `configs`, other than the recipe entries (always
    marked when not at their default) and the data-parallel layout (marked whenever there)."""
    skip = set(PARALLEL_KEYS) | set(GROUP_RECIPE)
    names = sorted({n for d in configs for n in d if n not in skip})
    return [n for n in names if len({d.get(n) for d in configs}) > 1]
