"""A Keras model's training FLOPs, counted as torch's FlopCounterMode counts a torch model's
(mpbench/backends/torch/flops.py), from the TensorFlow graph of one training step.

The forward, the loss and the gradients of the trainable weights are traced into one
tf.function graph (traced, never run: no variable moves), and every matmul-class op the
step needs is scored from its static shapes, 2 FLOPs per multiply-add: MatMul,
BatchMatMul*, Einsum, Conv2D / Conv3D (Keras' Conv1D is a Conv2D), DepthwiseConv2dNative
and their gradient ops (a Conv2DTranspose is a Conv2DBackpropInput). Everything else
(bias adds, normalizations, activations, pooling, the softmax) is not counted, as torch's
counter counts none of it.

The backward is counted, not taken as 2 × forward: the ops the gradients need are the graph's
ancestors of the loss and the gradients, so a gradient nothing uses is left out exactly
where autograd does not run it in torch. The first layer's input takes no gradient (its
weight gradient only: 2 × its forward, as FlopCounterMode counts it), and a frozen layer's
weight gradient is not computed. Each gradient op is scored at its real size: a
convolution's weight gradient is the size of its forward, as is its input gradient.

A function the graph calls once (a nested tf.function: Keras runs a grouped convolution as
one) is counted inside, from its own graph, for the outputs the step uses. A matmul-class op
this module has no formula for (a cuDNN RNN, a quantized or sparse matmul), one whose shape
is not static, or one in a loop or a branch (a Keras LSTM's While loop, whose trip count is
not in the graph) leaves the count unknown, with the reason: a count that leaves out matmul
work is not given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

SOURCE = (
    "TensorFlow graph of one forward + backward (the trainable weights' gradients), "
    "matmul and convolution ops, traced, not run"
)
UNKNOWN = "unknown: "


class _Uncountable(Exception):
    """An op whose FLOPs cannot be had from the graph: the message says why."""


def _dims(tensor: Any) -> list[int]:
    """A tensor's static shape; _Uncountable where a dimension is not known."""
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    if dims is None or any(d is None for d in dims):
        raise _Uncountable(f"{tensor.op.type} {tensor.op.name}: shape {tensor.shape} not static")
    return dims


def _matmul(op: Any) -> int:
    """MatMul: [M, K] x [K, N] (either transposed), 2·M·N·K."""
    a = _dims(op.inputs[0])
    k = a[0] if op.get_attr("transpose_a") else a[1]
    return 2 * math.prod(_dims(op.outputs[0])) * k


def _batch_matmul(op: Any) -> int:
    """BatchMatMul*: [..., M, K] x [..., K, N] (adjoints allowed, batch broadcast): every
    output element is a K-long dot product."""
    x = _dims(op.inputs[0])
    k = x[-2] if op.get_attr("adj_x") else x[-1]
    return 2 * math.prod(_dims(op.outputs[0])) * k


def einsum_flops(equation: str, shapes: list[list[int]]) -> int:
    """Einsum of two operands as torch.einsum runs it (a bmm after summing away the indices
    in one operand only and not in the output): 2 × the product of the sizes of every index
    that is in both operands or in the output. One operand: a transpose or a sum, 0."""
    inputs, _, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if len(terms) == 1:
        return 0
    if len(terms) != 2 or len(shapes) != 2:
        raise _Uncountable(f"Einsum {equation!r} of {len(terms)} operands")
    sizes: dict[str, int] = {}
    letters: list[set[str]] = []
    ellipses: list[list[int]] = []
    for term, shape in zip(terms, shapes, strict=True):
        head, dots, tail = term.partition("...")
        free = len(shape) - len(head) - len(tail) if dots else 0
        named = list(head) + list(tail)
        dims = shape[: len(head)] + shape[len(head) + free :]
        if len(named) != len(dims):
            raise _Uncountable(f"Einsum {equation!r} does not fit shapes {shapes}")
        for letter, dim in zip(named, dims, strict=True):
            sizes[letter] = max(sizes.get(letter, 1), dim)  # 1 broadcasts
        letters.append(set(named))
        if dots:
            ellipses.append(shape[len(head) : len(head) + free])
    kept = (letters[0] & letters[1]) | set(output.replace("...", ""))
    flops = 2 * math.prod(sizes[letter] for letter in kept)
    # The ellipsis' dimensions, broadcast right-aligned: kept where the output has them or
    # both operands do (a batch or a contraction), summed away beforehand otherwise.
    if ellipses and ("..." in output or len(ellipses) == 2):
        rank = max(len(e) for e in ellipses)
        padded = [[1] * (rank - len(e)) + e for e in ellipses]
        flops *= math.prod(max(column) for column in zip(*padded, strict=True))
    return flops


def _einsum(op: Any) -> int:
    equation = op.get_attr("equation").decode()
    return einsum_flops(equation, [_dims(t) for t in op.inputs])


def _convolution(op: Any) -> int:
    """Conv2D / Conv3D / Conv: the filter [*window, in_channels / groups, out_channels]
    applied at every output position: 2 × output elements × the filter's window and input
    channels (torch's conv_flop_count)."""
    return 2 * math.prod(_dims(op.outputs[0])) * math.prod(_dims(op.inputs[1])[:-1])


def _convolution_input_grad(op: Any) -> int:
    """Conv*BackpropInput (the input gradient, and a Conv2DTranspose's forward): the forward
    convolution's work, from the filter and the output gradient (input 2)."""
    return 2 * math.prod(_dims(op.inputs[2])) * math.prod(_dims(op.inputs[1])[:-1])


def _convolution_filter_grad(op: Any) -> int:
    """Conv*BackpropFilter (the weight gradient): the forward convolution's work, from the
    output gradient (input 2) and the filter's shape (the op's output)."""
    return 2 * math.prod(_dims(op.inputs[2])) * math.prod(_dims(op.outputs[0])[:-1])


def _depthwise(op: Any) -> int:
    """DepthwiseConv2dNative: the filter [kh, kw, channels, multiplier], each output channel
    from one input channel: 2 × output elements × kh × kw."""
    return 2 * math.prod(_dims(op.outputs[0])) * math.prod(_dims(op.inputs[1])[:2])


def _depthwise_input_grad(op: Any) -> int:
    return 2 * math.prod(_dims(op.inputs[2])) * math.prod(_dims(op.inputs[1])[:2])


def _depthwise_filter_grad(op: Any) -> int:
    return 2 * math.prod(_dims(op.inputs[2])) * math.prod(_dims(op.outputs[0])[:2])


# Op type -> its FLOPs from the op's static shapes.
FORMULAS: dict[str, Callable[[Any], int]] = {
    "MatMul": _matmul,
    "BatchMatMul": _batch_matmul,
    "BatchMatMulV2": _batch_matmul,
    "BatchMatMulV3": _batch_matmul,
    "Einsum": _einsum,
    "Conv": _convolution,
    "Conv2D": _convolution,
    "Conv3D": _convolution,
    "Conv2DBackpropInput": _convolution_input_grad,
    "Conv2DBackpropInputV2": _convolution_input_grad,
    "Conv3DBackpropInput": _convolution_input_grad,
    "Conv3DBackpropInputV2": _convolution_input_grad,
    "Conv2DBackpropFilter": _convolution_filter_grad,
    "Conv2DBackpropFilterV2": _convolution_filter_grad,
    "Conv3DBackpropFilter": _convolution_filter_grad,
    "Conv3DBackpropFilterV2": _convolution_filter_grad,
    "DepthwiseConv2dNative": _depthwise,
    "DepthwiseConv2dNativeBackpropInput": _depthwise_input_grad,
    "DepthwiseConv2dNativeBackpropFilter": _depthwise_filter_grad,
}
# Op types that do matmul-class work this module has no formula for: cuDNN and block RNN
# cells, quantized, sparse and XLA matmuls and convolutions, fused attention.
MATMUL_CLASS = re.compile(
    r"MatMul|Matmul|Conv(?!ert)|Einsum|Dot|Cudnn|LSTM|GRU|Attention|Gemm", re.IGNORECASE
)


@dataclass
class Count:
    """One training step's matmul FLOPs per micro-batch: `total` (forward, loss and
    gradients), `forward` (the forward and the loss alone), each by op type in `by_op`;
    both None where `uncounted` says why the graph could not be counted."""

    total: float | None
    forward: float | None
    by_op: dict[str, float] = field(default_factory=dict)
    uncounted: list[str] = field(default_factory=list)

    @property
    def source(self) -> str:
        if self.total is None:
            return UNKNOWN + "; ".join(self.uncounted)
        return SOURCE

    def record(self) -> dict[str, Any]:
        """The cell's `flops_per_micro_batch` and `flops_source`."""
        return {"flops_per_micro_batch": self.total, "flops_source": self.source}


@dataclass
class _Needed:
    """The ops some outputs need (their ancestors through data and control edges: what the
    runtime runs to fetch them, a gradient nothing uses pruned), and of each op the outputs
    that are used (a function call's body is counted for those alone)."""

    ops: list[Any]
    used: dict[str, set[int]]


def _needed(outputs: Iterable[Any]) -> _Needed:
    seen: dict[str, Any] = {}
    used: dict[str, set[int]] = {}
    stack: list[tuple[Any, int | None]] = [(t.op, t.value_index) for t in outputs]
    while stack:
        op, index = stack.pop()
        # A control edge needs the whole op.
        used.setdefault(op.name, set()).update(
            range(len(op.outputs)) if index is None else (index,)
        )
        if op.name in seen:
            continue
        seen[op.name] = op
        stack.extend((t.op, t.value_index) for t in op.inputs)
        stack.extend((control, None) for control in op.control_inputs)
    return _Needed(list(seen.values()), used)


# Ops that call a function once (a nested tf.function: Keras' grouped convolution is one,
# jit-compiled, and its gradient another): counted inside, with the body's own shapes.
CALLS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
# Ops that run a function a number of times, or one of several, the graph does not say.
_LOOPS = frozenset({"While", "StatelessWhile", "For"})
_BRANCHES = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})


def _called(op: Any) -> list[str]:
    """The names of the functions an op calls (a loop's body, a branch, a call)."""
    names = []
    for value in op.node_def.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        elif value.HasField("list") and value.list.func:
            names.extend(f.name for f in value.list.func)
    return names


def _function(graphs: list[Any], name: str) -> Any:
    """Function `name`, from the innermost of `graphs` that has it (None where none has)."""
    for graph in graphs:
        try:
            found = graph._get_function(name)
        except Exception:  # not this graph's: the next one's, or none
            continue
        if found is not None:
            return found
    return None


def _matmul_ops_in(graphs: list[Any], name: str, seen: set[str]) -> set[str]:
    """The matmul-class op types inside function `name` and the functions it calls."""
    if name in seen:
        return set()
    seen.add(name)
    function = _function(graphs, name)
    definition = getattr(function, "cached_definition", None)
    if definition is None:  # a body this TensorFlow does not let us read: assume the worst
        return {f"{name} (a function body that could not be read)"}
    found: set[str] = set()
    for node in definition.node_def:
        if node.op in FORMULAS or MATMUL_CLASS.search(node.op):
            found.add(node.op)
        for value in node.attr.values():
            if value.HasField("func"):
                found |= _matmul_ops_in(graphs, value.func.name, seen)
            elif value.HasField("list"):
                for function_name in value.list.func:
                    found |= _matmul_ops_in(graphs, function_name.name, seen)
    return found


@dataclass
class _Score:
    total: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    uncounted: list[str] = field(default_factory=list)

    def add(self, op_type: str, flops: int) -> None:
        self.total += flops
        self.by_op[op_type] = self.by_op.get(op_type, 0) + flops


def _score(outputs: list[Any], graphs: list[Any], score: _Score) -> None:
    """Add the matmul FLOPs of what `outputs` need in graphs[0] (the outer graphs: where its
    functions are found) to `score`, or why some could not be counted."""
    needed = _needed(outputs)
    for op in needed.ops:
        formula = FORMULAS.get(op.type)
        if formula is not None:
            try:
                score.add(op.type, formula(op))
            except _Uncountable as exc:
                score.uncounted.append(str(exc))
            continue
        if MATMUL_CLASS.search(op.type):
            score.uncounted.append(f"{op.type} {op.name}: no FLOP formula for this op")
            continue
        names = _called(op)
        if not names:
            continue
        body = getattr(_function(graphs, names[0]), "graph", None)
        if op.type in CALLS and len(names) == 1 and body is not None:
            used = sorted(needed.used[op.name])
            _score([body.outputs[i] for i in used], [body, *graphs], score)
            continue
        inside: set[str] = set()
        seen: set[str] = set()
        for name in names:
            inside |= _matmul_ops_in(graphs, name, seen)
        if inside:
            where = (
                "a loop (its trip count is not in the graph)" if op.type in _LOOPS
                else "a branch (which one runs is not in the graph)" if op.type in _BRANCHES
                else "a function whose body could not be read with its shapes"
            )  # fmt: skip
            score.uncounted.append(
                f"{op.type} {op.name} runs {', '.join(sorted(inside))} in {where}"
            )


def graph_count(graph: Any, forward: list[Any], step: list[Any]) -> Count:
    """The matmul FLOPs of the ops that `step` (the loss and the gradients) needs in
    `graph`, and of those `forward` (the loss) needs alone."""
    score = _Score()
    _score(step, [graph], score)
    by_op = {k: float(v) for k, v in sorted(score.by_op.items())}
    if score.uncounted:
        found = sorted(set(score.uncounted))
        shown = found[:3] + ([f"{len(found) - 3} more"] if len(found) > 3 else [])
        return Count(None, None, by_op, [f"matmul-class work not countable: {'; '.join(shown)}"])
    forward_score = _Score()
    _score(forward, [graph], forward_score)
    return Count(float(score.total), float(forward_score.total), by_op)


def training_count(model: Any, x: Any, y: Any) -> Count:
    """The FLOPs of one training step of `model` on the micro-batch (x, y): its forward in
    training mode, its compiled loss (`model.loss`, as the custom loop calls it) and the
    gradients of its trainable weights, traced into one graph and never run. Raises what
    tracing raises."""
    variables = model.trainable_variables
    loss_fn = model.loss

    @tf.function
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        gradients = tape.gradient(loss, variables)
        return loss, [g for g in gradients if g is not None]

    concrete = step.get_concrete_function(tf.constant(x), tf.constant(y))
    loss, gradients = concrete.structured_outputs
    needed = [loss]
    for gradient in gradients:  # an embedding's gradient is IndexedSlices
        sliced = isinstance(gradient, tf.IndexedSlices)
        needed.extend((gradient.values, gradient.indices) if sliced else (gradient,))
    return graph_count(concrete.graph, [loss], needed)


def counted(model: Any, x: Any, y: Any) -> Count:
    """training_count, or an unknown count that says why the step could not be traced
    (a user's model of any shape: said, not raised)."""
    from mpbench.backends.tensorflow.precision import _cause

    try:
        return training_count(model, x, y)
    except Exception as exc:
        return Count(
            None,
            None,
            uncounted=[
                "the model, its loss and gradients could not be traced into one TensorFlow "
                f"graph ({type(exc).__name__}: {_cause(exc)})"
            ],
        )
