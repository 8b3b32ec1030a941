"""How a cell ran beside its framework, workload and policy, spelled once for every output.

`mpbench run` can run one policy several ways (docs/recipes.md, docs/distributed.md,
docs/telemetry.md): accumulating micro-batches, compiled, data-parallel, at a larger 16-bit
batch, at a static loss scale, or as the fallback of a diverged cell. `mpbench compare` names
such cells in its tables, plot, JSON and CSV, and `mpbench.results.load` in its `variant`
column, with the words made here, so that the table's `torch [accumulate=2] bf16` is
`[accumulate=2]` in pandas too.

Two kinds of marks, in this order:
- group marks apply to float32 as well, so cells that share them are compared with each other:
  the recipe entries that are not at their default (`[accumulate=2, compile]`) and the
  data-parallel layout (`×2`, `×2 [comm bf16]`);
- row marks apply to some policies only, so such a cell is compared with the plain float32 of
  its group: a 16-bit batch larger than float32's (`@512`), fp16's static loss scale
  (`[loss scale 1024]`), a fallback of a diverged cell (`(fallback)`).
A plain cell has no variant (None).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mpbench.results.schema import CellRecord

# Recipe entries that apply to every policy, at the default a record leaves them out with
# (runner/matrix.py, Recipe): a cell is marked with each one that is not at its default.
GROUP_RECIPE: dict[str, Any] = {"accumulate": 1, "compile": False}
# Entries whose default a label leaves unsaid when it names them (TensorFlow's --jit: `tf [jit]`
# beside `tf`).
DEFAULTS: dict[str, Any] = {**GROUP_RECIPE, "jit": False}
FALLBACK = "(fallback)"


def entry(name: str, value: Any) -> str:
    """A config entry as a label writes it: `accumulate=2`, `compile` (a flag that is on),
    `jit=false`, `loop=custom` (text without quotes), `loss_scale=1e+30`."""
    if value is True:
        return name
    if value is False:
        return f"{name}=false"
    if isinstance(value, str):
        return f"{name}={value}"
    if isinstance(value, float):
        return f"{name}={value:g}"
    return f"{name}={json.dumps(value, sort_keys=True)}"


def bracket(entries: list[str]) -> str:
    """`[accumulate=2, compile]`; empty for no entries."""
    return f"[{', '.join(entries)}]" if entries else ""


def recipe_entries(config: Mapping[str, Any]) -> list[str]:
    """The group recipe entries of a config that are not at their default."""
    return [
        entry(name, config[name])
        for name, default in GROUP_RECIPE.items()
        if config.get(name, default) != default
    ]


@dataclass(frozen=True, order=True)
class Layout:
    """How many replicas a cell ran on, and the precision of their gradient all-reduce. Only a
    data-parallel cell's config has these entries, so a world-size-1 cell has none."""

    world_size: int = 1
    nnodes: int = 1
    nproc_per_node: int = 1
    grad_comm: str = "fp32"

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Layout:
        def whole(name: str) -> int:
            value = config.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else 1

        comm = config.get("grad_comm")
        world = whole("world_size")
        return cls(world, whole("nnodes"), whole("nproc_per_node"), comm or "fp32")

    @property
    def parallel(self) -> bool:
        return self.world_size > 1

    def mark(self) -> str:
        """`×2`, `×2 [comm bf16]`, `×8 [2 nodes, comm bf16]`; empty at world size 1."""
        if not self.parallel:
            return ""
        extra = [f"{self.nnodes} nodes"] if self.nnodes > 1 else []
        extra += [f"comm {self.grad_comm}"] if self.grad_comm != "fp32" else []
        return f"×{self.world_size}" + (f" {bracket(extra)}" if extra else "")

    def order(self) -> tuple[int, int, bool, str]:
        """World size, nodes, then fp32 all-reduce before the 16-bit ones."""
        return (self.world_size, self.nnodes, self.grad_comm != "fp32", self.grad_comm)


def row_marks(policy: str, config: Mapping[str, Any], fallback: bool) -> str:
    """`@512` (a 16-bit cell at a larger batch than float32's, --batch-scale-16bit),
    `[loss scale 1024]` (fp16 at a static scale), `(fallback)`; space-separated, in that
    order; empty for none. `config` as the record has it."""
    marks = []
    reference, batch = config.get("reference_batch_size"), config.get("batch_size")
    if isinstance(reference, int) and batch != reference:
        marks.append(f"@{batch}")
    scale = config.get("loss_scale")
    # A static scale belongs to fp16 (docs/recipes.md); its fallback drops it.
    static = isinstance(scale, (int, float)) and not isinstance(scale, bool)
    if static and policy == "mixed_float16":
        marks.append(f"[loss scale {scale:g}]")
    if fallback:
        marks.append(FALLBACK)
    return " ".join(marks)


def join(*marks: str | None) -> str | None:
    """Marks in order, space-separated; None when there are none."""
    text = " ".join(m for m in marks if m)
    return text or None


def group_marks(config: Mapping[str, Any]) -> str:
    """`[accumulate=2, compile] ×2 [comm bf16]`: the recipe and layout marks of a group."""
    return join(bracket(recipe_entries(config)), Layout.of(config).mark()) or ""


def variant(policy: str, config: Mapping[str, Any], fallback: bool) -> str | None:
    """Every mark of a cell, group marks first: `[accumulate=2] @512`; None for a plain cell."""
    return join(group_marks(config), row_marks(policy, config, fallback))


def record_variant(record: CellRecord) -> str | None:
    """The variant of the cell a record measured."""
    return variant(record.policy, record.config, bool(record.fallback_of))
