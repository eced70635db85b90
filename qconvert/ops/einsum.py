"""Einsum as TRANSPOSE, RESHAPE, GATHER (diagonals), SUM, MUL, BATCH_MATMUL and FULLY_CONNECTED.

Each index (label) of an equation is classified per pair of operands: a label in both operands
and kept (in the output, or in an operand still to come) is a batch axis, one in both and not
kept is contracted, one in one operand only is free; a label in one operand only and not kept is
summed out of it first, and a label repeated within an operand ("ii") takes its diagonal (a
GATHER of the flattened repeated axes). The pair then is one BATCH_MATMUL over [batch, free,
contracted] layouts (a FULLY_CONNECTED when one operand is a constant and there is no batch
axis: its int8 kernel quantizes the weights per channel), or one MUL when nothing is
contracted. More than two operands fold left to right. "..." stands for the same run of
broadcast axes in every operand, right-aligned as numpy aligns them. A label of size 1 in one
operand and n in another broadcasts, as in onnxruntime and numpy: a kept one by MUL's or
BATCH_MATMUL's broadcasting, a contracted one by summing the other operand over it first.
"""

from __future__ import annotations

import math
import string

import numpy as np

from .gemm import fully_connected
from .layout import reshape, transpose
from .registry import onnx_op


def _parse(ctx, equation: str, ranks: list[int]) -> tuple[list[list[str]], list[str]]:
    """The labels of each operand and of the output; the axes "..." covers are labelled
    ".0", ".1", ... from the left of the widest run, so that runs of different lengths align at
    the right."""
    equation = equation.replace(" ", "")
    left, arrow, right = equation.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"equation {equation!r} has {len(terms)} operands, the node {len(ranks)} "
                        "inputs")
    letters = set(string.ascii_letters)
    spans = []
    for term, rank in zip(terms, ranks):
        head, dots, tail = term.partition("...")
        if not set(head + tail) <= letters or "." in tail:
            raise ctx.error(f"equation {equation!r}: operand {term!r} is not letters around at "
                            "most one '...'")
        span = rank - len(head) - len(tail)
        if span < 0 or (span and not dots):
            raise ctx.error(f"equation {equation!r}: operand {term!r} does not have rank {rank}")
        spans.append(span)
    widest = max(spans, default=0)

    def labels(term: str, span: int) -> list[str]:
        head, _, tail = term.partition("...")
        return list(head) + [f".{k}" for k in range(widest - span, widest)] + list(tail)

    operands = [labels(t, s) for t, s in zip(terms, spans)]
    if arrow:
        head, dots, tail = right.partition("...")
        if not set(head + tail) <= letters or "." in tail:
            raise ctx.error(f"equation {equation!r}: the output {right!r} is not letters around "
                            "at most one '...'")
        output = labels(right, widest if dots else 0)
        if widest and not dots and any(spans):
            raise ctx.error(f"equation {equation!r}: the operands have '...' axes the output omits")
        seen = {label for labels_ in operands for label in labels_}
        if len(set(output)) != len(output) or not set(output) <= seen:
            raise ctx.error(f"equation {equation!r}: output labels must be distinct operand labels")
    else:  # implicit output: the broadcast axes, then the letters used once, in ASCII order
        counts: dict[str, int] = {}
        for label in (label for labels_ in operands for label in labels_):
            counts[label] = counts.get(label, 0) + 1
        output = [f".{k}" for k in range(widest)] + sorted(
            label for label, n in counts.items() if n == 1 and not label.startswith("."))
    return operands, output


class _Operand:
    """A tensor and the label of each of its axes."""

    def __init__(self, tensor: str, labels: list[str]):
        self.tensor, self.labels = tensor, list(labels)

    def size(self, ctx, label: str) -> int:
        return ctx.shape(self.tensor)[self.labels.index(label)]


def _permuted(ctx, operand: _Operand, order: list[str]) -> _Operand:
    """The operand with its axes in `order` (a TRANSPOSE unless they already are)."""
    if order == operand.labels:
        return operand
    perm = [operand.labels.index(label) for label in order]
    return _Operand(transpose(ctx, operand.tensor, perm), order)


def _diagonal(ctx, operand: _Operand) -> _Operand:
    """A label repeated within the operand ("ii") keeps the diagonal: the repeated axes side by
    side, flattened to one of size n**k, and GATHERed at the multiples of (n**k - 1) / (n - 1)."""
    unique = list(dict.fromkeys(operand.labels))
    if len(unique) == len(operand.labels):
        return operand
    sizes = dict(zip(operand.labels, ctx.shape(operand.tensor)))
    order = [k for label in unique for k, other in enumerate(operand.labels) if other == label]
    x = transpose(ctx, operand.tensor, order)
    counts = [operand.labels.count(label) for label in unique]
    x = reshape(ctx, x, [sizes[label] ** k for label, k in zip(unique, counts)])
    for axis, (label, k) in enumerate(zip(unique, counts)):
        if k == 1:
            continue
        n = sizes[label]
        step = (n ** k - 1) // (n - 1) if n > 1 else 0
        indices = ctx.constant("diagonal", np.arange(n, dtype=np.int32) * step)
        out_shape = list(ctx.shape(x))
        out_shape[axis] = n
        y = ctx.tensor(operand.tensor + "_diag", out_shape, ctx.dtype(x))
        ctx.add_op("GATHER", [x, indices], [y], {"axis": axis, "batch_dims": 0})
        x = y
    return _Operand(x, unique)


def _sum(ctx, operand: _Operand, labels: list[str], keep_dims: bool = False) -> _Operand:
    """The operand summed over `labels` (SUM)."""
    if not labels:
        return operand
    axes = [operand.labels.index(label) for label in labels]
    shape = ctx.shape(operand.tensor)
    kept = [label for label in operand.labels if keep_dims or label not in labels]
    out_shape = [1 if k in axes else d for k, d in enumerate(shape) if keep_dims or k not in axes]
    y = ctx.tensor(operand.tensor + "_sum", out_shape, ctx.dtype(operand.tensor))
    ctx.add_op("SUM", [operand.tensor, ctx.constant("axes", np.array(sorted(axes), np.int32))], [y],
               {"keep_dims": keep_dims})
    return _Operand(y, kept)


def _matrix_order(operand: _Operand, batch: list[str], rows: list[str],
                  columns: list[str]) -> tuple[list[str], bool]:
    """The order to lay the operand out in as [batch, rows, columns] matrices, and whether it is
    read transposed (BATCH_MATMUL's adj_x/adj_y): [batch, columns, rows] when that is the order
    it already has, so that no TRANSPOSE is needed."""
    plain, swapped = batch + rows + columns, batch + columns + rows
    if operand.labels == swapped and plain != swapped:
        return swapped, True
    return plain, False


def _product(ctx, a: _Operand, b: _Operand, keep: set[str]) -> _Operand:
    """a times b summed over the labels both have and `keep` lacks; labels [batch, free a, free b]."""
    for label in set(a.labels) & set(b.labels):  # a broadcast "..." axis summed where it is 1 elsewhere
        sa, sb = a.size(ctx, label), b.size(ctx, label)
        if sa != sb and label not in keep:
            a, b = (a, _sum(ctx, b, [label], True)) if sa == 1 else (_sum(ctx, a, [label], True), b)
    batch = [label for label in a.labels if label in b.labels and label in keep]
    contracted = [label for label in a.labels if label in b.labels and label not in keep]
    if not contracted:
        return _multiply(ctx, a, b, batch)
    if not batch and ctx.const(a.tensor) is not None and ctx.const(b.tensor) is None:
        a, b = b, a
    free_a = [label for label in a.labels if label not in b.labels]
    free_b = [label for label in b.labels if label not in a.labels]
    dtype = ctx.dtype(a.tensor)
    if dtype.kind != "f":
        return _multiply_sum(ctx, a, b, batch, free_a, free_b, contracted)

    def sizes(operand, labels):
        return [operand.size(ctx, label) for label in labels]

    rows = math.prod(sizes(a, free_a))
    inner = math.prod(sizes(a, contracted))
    columns = math.prod(sizes(b, free_b))
    out_labels = batch + free_a + free_b
    weights = ctx.const(b.tensor)
    if not batch and weights is not None:  # a constant right operand: FULLY_CONNECTED
        w = np.transpose(weights, [b.labels.index(label) for label in free_b + contracted])
        # a's free axes stay apart (FULLY_CONNECTED keeps them): a leading batch stays axis 0
        x = reshape(ctx, _permuted(ctx, a, free_a + contracted).tensor, sizes(a, free_a) + [inner])
        y = ctx.tensor(a.tensor + "_fc", sizes(a, free_a) + [columns], dtype)
        fully_connected(ctx, x, w.reshape(columns, inner), None, y)
        return _Operand(reshape(ctx, y, sizes(a, free_a) + sizes(b, free_b)), out_labels)
    batch_a, batch_b = sizes(a, batch), sizes(b, batch)
    if len(batch) > 3:  # BATCH_MATMUL takes rank 5 at most: the batch axes become one
        if batch_a != batch_b:
            raise ctx.error(f"{len(batch)} broadcast batch axes: TFLite's BATCH_MATMUL takes at most 3")
        batch_a = batch_b = [math.prod(batch_a)]
    a_order, adj_x = _matrix_order(a, batch, free_a, contracted)
    b_order, adj_y = _matrix_order(b, batch, contracted, free_b)
    x = reshape(ctx, _permuted(ctx, a, a_order).tensor, batch_a + ([inner, rows] if adj_x else [rows, inner]))
    z = reshape(ctx, _permuted(ctx, b, b_order).tensor,
                batch_b + ([columns, inner] if adj_y else [inner, columns]))
    batch_out = list(np.broadcast_shapes(tuple(batch_a), tuple(batch_b)))
    y = ctx.tensor(a.tensor + "_mm", batch_out + [rows, columns], dtype)
    ctx.add_op("BATCH_MATMUL", [x, z], [y], {"adj_x": adj_x, "adj_y": adj_y})
    batch_full = [max(a.size(ctx, label), b.size(ctx, label)) for label in batch]
    return _Operand(reshape(ctx, y, batch_full + sizes(a, free_a) + sizes(b, free_b)), out_labels)


def _multiply(ctx, a: _Operand, b: _Operand, batch: list[str]) -> _Operand:
    """a times b with nothing contracted (an outer or elementwise product): MUL, broadcasting a
    over b's free axes and b over a's."""
    free_a = [label for label in a.labels if label not in b.labels]
    free_b = [label for label in b.labels if label not in a.labels]
    x = _permuted(ctx, a, batch + free_a).tensor
    z = _permuted(ctx, b, batch + free_b).tensor
    x_shape = list(ctx.shape(x)) + [1] * len(free_b)
    z_shape = list(ctx.shape(z))
    z_shape = z_shape[:len(batch)] + [1] * len(free_a) + z_shape[len(batch):]
    x, z = reshape(ctx, x, x_shape), reshape(ctx, z, z_shape)
    y = ctx.tensor(a.tensor + "_mul", list(np.broadcast_shapes(tuple(x_shape), tuple(z_shape))),
                   ctx.dtype(x))
    ctx.add_op("MUL", [x, z], [y])
    return _Operand(y, batch + free_a + free_b)


def _multiply_sum(ctx, a, b, batch, free_a, free_b, contracted) -> _Operand:
    """The product for integer operands (BATCH_MATMUL and FULLY_CONNECTED are float kernels):
    MUL over [batch, free a, free b, contracted], then SUM over the contracted axes."""
    product = _multiply(ctx, _permuted(ctx, a, batch + free_a + contracted),
                        _permuted(ctx, b, batch + free_b + contracted), batch + contracted)
    return _sum(ctx, product, contracted)


def _first_operand_sized(ctx, inputs, operands_labels, output, y) -> str:
    """Why the output's shape lacks a broadcast label's size, when that is the reason: ONNX's
    shape inference sizes an output label by the first operand that has it (1), where
    onnxruntime broadcasts it; the inferred shapes are the ones the TFLite graph gets."""
    for label, size in zip(output, ctx.shape(y)):
        found = [ctx.shape(x)[labels.index(label)] for x, labels in zip(inputs, operands_labels)
                 if label in labels]
        if size == 1 and found[0] == 1 and max(found) > 1 and not label.startswith("."):
            return (f": label {label!r} is 1 in the first operand that has it and {max(found)} in "
                    "another, which onnxruntime broadcasts but ONNX's shape inference (whose shapes "
                    "qconvert follows) sizes from that first operand; put an operand of the full "
                    "size first, or Expand the size-1 one")
    return ""


@onnx_op("Einsum")
def import_einsum(node, ctx):
    equation = node.attr("equation", "")
    inputs, y = node.inputs, node.outputs[0]
    operands_labels, output = _parse(ctx, equation, [ctx.rank(x) for x in inputs])
    sizes: dict[str, int] = {}
    for x, labels in zip(inputs, operands_labels):
        for label, size in zip(labels, ctx.shape(x)):
            known = sizes.setdefault(label, size)
            if known != size and 1 not in (known, size):
                raise ctx.error(f"equation {equation!r}: label {label!r} has sizes {known} and "
                                f"{size}")
            sizes[label] = max(known, size)
    expected = [sizes[label] for label in output]
    if list(ctx.shape(y)) != expected:
        raise ctx.error(f"equation {equation!r} gives shape {expected}, not the output's "
                        f"{list(ctx.shape(y))}" + _first_operand_sized(ctx, inputs, operands_labels,
                                                                         output, y))
    operands = [_diagonal(ctx, _Operand(x, labels)) for x, labels in zip(inputs, operands_labels)]
    current = None
    for k, operand in enumerate(operands):
        later = {label for other in operands[k + 1:] for label in other.labels}
        keep = set(output) | later
        operand = _sum(ctx, operand, [label for label in operand.labels if label not in keep
                                      and (current is None or label not in current.labels)])
        if current is not None:
            current = _sum(ctx, current, [label for label in current.labels if label not in keep
                                          and label not in operand.labels])
            current = _product(ctx, current, operand, keep)
        else:
            current = operand
    current = _sum(ctx, current, [label for label in current.labels if label not in output])
    shape = [ctx.shape(current.tensor)[current.labels.index(label)] for label in output]
    if shape != expected:  # a "..." axis of size 1 in every operand that reached it
        raise ctx.error(f"equation {equation!r}: broadcast axes give shape {shape}, not {expected}")
    if current.labels == output or len(output) < 2:
        reshape(ctx, current.tensor, expected, y)
    else:
        transpose(ctx, current.tensor, [current.labels.index(label) for label in output], y)
