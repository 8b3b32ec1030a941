"""A forward pass on torch's meta device that knows its small integer values, to find a
table lookup out of range before a cell makes one (issue 56, item 4).

A model built on the meta device has shapes and no values: a forward there catches what is
wrong with shapes for free, but not what is wrong with values. A RoBERTa's position ids are
values (its non-pad tokens counted from `pad_token_id + 1`), so `seq_len =
max_position_embeddings` passes a meta forward and fails every cell with an IndexError. Here
the few tensors whose values follow from the inputs alone (token ids, masks, position ids:
small, integer or derived without the weights) are also computed on the CPU, beside their
meta twins, and every embedding, gather and index_select is checked against the size of the
table it reads. What cannot be known (anything that reads a weight) stays meta-only; a
forward that meta cannot run (a MoE's data-dependent routing) is inconclusive, never refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.module_tracker import ModuleTracker
from torch.utils.weak import WeakTensorKeyDictionary

# A tensor is shadowed on the CPU only up to this many elements: ids and positions are
# batch × seq_len; an activation (which needs the weights anyway) never is.
SHADOW_LIMIT = 1 << 20
_META = torch.device("meta")
_CPU = torch.device("cpu")
_MISSING = object()
aten = torch.ops.aten


@dataclass(frozen=True)
class OutOfRange:
    """A lookup the forward would make past the end of its table: `index` along a dimension
    of `size`, by `op`, at `place` (the table's parameter or buffer name, else the module
    that made it)."""

    op: str
    place: str
    index: int
    size: int


class _Stop(Exception):
    def __init__(self, found: OutOfRange) -> None:
        super().__init__(f"{found.place}: index {found.index} of {found.size}")
        self.found = found


def meta_forward(model: torch.nn.Module, **inputs: torch.Tensor) -> OutOfRange | None:
    """A forward of `model` (built on the meta device) on `inputs` (CPU tensors are lifted
    to meta inside, their values kept; meta ones have none): the first lookup out of range
    it makes, else None. What the forward raises, it raises (`meta_only` says whether that
    is meta's limit rather than the model's)."""
    names = {id(t): n for n, t in (*model.named_parameters(), *model.named_buffers())}
    tracker = ModuleTracker()
    mode = _Shadowing(names, tracker)
    try:
        # Gradients on, as in a training step (and ModuleTracker's hooks fail on a module
        # that returns a parameter's view made without them: perceiver's positions).
        with torch.random.fork_rng(devices=[]), torch.enable_grad(), tracker, mode:
            model(**{key: value.to(_META) for key, value in inputs.items()})
    except _Stop as stop:
        return stop.found
    return None


def out_of_range(model: torch.nn.Module, **inputs: torch.Tensor) -> OutOfRange | None:
    """meta_forward's lookup out of range; None also where the forward cannot run on meta
    to the end (a MoE's data-dependent routing, an `.item()` of a weight): no verdict, a
    cell is the judge."""
    try:
        return meta_forward(model, **inputs)
    except Exception:
        return None


def meta_only(exc: BaseException) -> bool:
    """Whether `exc` is the meta device's limit, not the model's: an op meta cannot run
    (`Tensor.item() cannot be called on meta tensors`, a kernel with no meta version), which
    the same model runs on a real device."""
    text = str(exc).lower()
    return "meta tensor" in text or "meta device" in text or "'meta'" in text


class _Shadowing(TorchDispatchMode):
    """Runs every op on meta, and those whose tensor inputs all have CPU values also on the
    CPU (the shadow), checking each lookup's indices against its table."""

    def __init__(self, names: dict[int, str], tracker: ModuleTracker) -> None:
        super().__init__()
        self.names = names
        self.tracker = tracker
        self.real: WeakTensorKeyDictionary = WeakTensorKeyDictionary()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._check_lookup(func, args)
        real = self._real_of((args, kwargs))
        if real is not None and func is aten._local_scalar_dense.default:
            return func(*real[0], **real[1])  # .item() of a tensor whose value is known
        try:
            out = func(*args, **kwargs)
        except Exception as meta_error:
            if real is None:
                raise
            return self._from_cpu(func, real, meta_error)
        shadowed = real is not None and _small(out) and self._shadow(func, out, real)
        if not shadowed and self._writes_known(func, args, kwargs):
            self.real = WeakTensorKeyDictionary()  # a known value changed unseen: forget all
        return out

    def _from_cpu(self, func: Any, real: tuple[tuple, dict], meta_error: Exception) -> Any:
        """An op meta cannot run (a data-dependent shape: nonzero, unique) whose inputs are
        known: the CPU's result, lifted to meta; where the CPU fails too, meta's error."""
        try:
            real_out = func(*real[0], **real[1])
        except Exception:
            raise meta_error from None
        out = tree_map(_as_meta, real_out)
        self._attach(out, real_out)
        return out

    def _shadow(self, func: Any, out: Any, real: tuple[tuple, dict]) -> bool:
        """The op run on the known values too, its outputs given theirs; False where the CPU
        could not run it."""
        try:
            self._attach(out, func(*real[0], **real[1]))
        except Exception:
            return False
        return True

    def _writes_known(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """Whether the op writes into a tensor whose value is known (in place, or `out=`):
        run without its values, it leaves that value (and its views') stale."""
        schema = getattr(func, "_schema", None)
        if schema is None:
            return bool(len(self.real))
        for position, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = args[position] if position < len(args) else kwargs.get(argument.name)
            if isinstance(value, torch.Tensor) and value.device == _META and value in self.real:
                return True
        return False

    def _real_of(self, tree: Any) -> tuple[tuple, dict] | None:
        """(args, kwargs) with every meta tensor replaced by its shadow and the meta device
        by the CPU; None where a meta tensor has none."""
        leaves, spec = tree_flatten(tree)
        out = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor) and leaf.device == _META:
                leaf = self.real.get(leaf, _MISSING)
                if leaf is _MISSING:
                    return None
            elif isinstance(leaf, torch.device) and leaf == _META:
                leaf = _CPU
            out.append(leaf)
        args, kwargs = tree_unflatten(out, spec)
        return tuple(args), dict(kwargs)

    def _attach(self, out: Any, real_out: Any) -> None:
        for meta, real in zip(tree_flatten(out)[0], tree_flatten(real_out)[0], strict=False):
            tensors = isinstance(meta, torch.Tensor) and isinstance(real, torch.Tensor)
            if tensors and meta.device == _META and real.numel() <= SHADOW_LIMIT:
                self.real[meta] = real

    def _check_lookup(self, func: Any, args: tuple) -> None:
        """Raise _Stop where an embedding, gather or index_select reads past its table (the
        indices' values known, the table's need not be)."""
        if func is aten.embedding.default:
            table, dim, index = args[0], 0, args[1]
        elif func in (aten.gather.default, aten.index_select.default):
            table, dim, index = args[0], args[1], args[2]
        else:
            return
        values = self._value(index)
        if values is None or values.numel() == 0 or values.is_floating_point():
            return
        size = table.shape[dim]
        top, bottom = int(values.max()), int(values.min())
        if top >= size or bottom < 0:  # none of the three takes a negative index
            place = self.names.get(id(table)) or _module(self.tracker)
            index = top if top >= size else bottom
            raise _Stop(OutOfRange(str(func.overloadpacket), place, index, size))

    def _value(self, tensor: Any) -> torch.Tensor | None:
        if not isinstance(tensor, torch.Tensor):
            return None
        return self.real.get(tensor) if tensor.device == _META else tensor


def _as_meta(value: Any) -> Any:
    return value.to(_META) if isinstance(value, torch.Tensor) else value


def _small(out: Any) -> bool:
    tensors = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.numel() <= SHADOW_LIMIT for t in tensors)


def _module(tracker: ModuleTracker) -> str:
    inner = max(tracker.parents, key=lambda name: name.count("."), default="the model")
    _, _, path = inner.partition(".")
    return path or inner
