"""Pad (all opsets: attributes before 11, constant inputs since, axes since 18) and the TFLite PAD,
PADV2 and MIRROR_PAD ops (also emitted by padding.explicit_pad for conv and pool padding).

Modes: constant -> PAD (PADV2 for a non-zero value), reflect -> MIRROR_PAD(REFLECT), edge -> per
padded axis, the edge slice (BROADCAST_TO its pad width) concatenated on both sides, wrap -> TILE
then SLICE of the periodic extension. Negative pads crop first (SLICE), as onnxruntime does.
A constant_value computed at run time is the tensor PADV2 reads. Constant-mode pads computed at
run time (the model declares the output's shape, which shape inference cannot know) pad by a
constant margin, then SLICE the output at a computed begin (_computed_pad); pads computed from
the input's size (a shape computed when the model runs) PAD by a tensor and SLICE a computed
size, so that the output follows the size (_sized_pad); the other modes need them constant.
Axes must be constants.
"""

from __future__ import annotations

import numpy as np

from .registry import SAME16, QuantRule, onnx_op, tflite_op
from .slice import slice_tensor
from .tile import broadcast_to, tile
from .versions import by_input_dtype, input_rank

MAX_PAD_RANK = 5  # TFLite's PAD/PADV2 kernels


# --- TFLite ops ---------------------------------------------------------------------------------
def _pad_version(op, model):
    """op_version.cc's PAD / PADV2: rank > 4 first, then the dtype."""
    return 4 if input_rank(op, model) > 4 else _mirror_pad_version(op, model)


_mirror_pad_version = by_input_dtype({np.int16: 3, np.int8: 2})


def _evaluate_pad(inputs, op):
    x, paddings = inputs[0], np.asarray(inputs[1], np.int64)
    value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else 0
    return [np.pad(x, paddings, constant_values=np.asarray(value).item()).astype(x.dtype)]


def _evaluate_mirror_pad(inputs, op):
    mode = "reflect" if op.options.get("mode", "REFLECT") == "REFLECT" else "symmetric"
    return [np.pad(inputs[0], np.asarray(inputs[1], np.int64), mode=mode)]


def remap_paddings(op, model, perm):
    """The op padded transpose(x, perm): row i of the paddings is about axis perm[i] of x."""
    paddings = model.constant(op.inputs[1])
    if paddings is None or paddings.shape != (len(perm), 2):
        return None
    permuted = np.empty_like(paddings)
    permuted[list(perm)] = paddings
    model.set_input(op, 1, model.add_constant("paddings", permuted))
    return perm


# PADV2's constant pad value (input 2) is quantized with the output's params.
for _name, _options, _evaluate, _quant in [
        ("PAD", "PadOptions", _evaluate_pad, SAME16),
        ("PADV2", "PadV2Options", _evaluate_pad, QuantRule(activations=(0, 2), output="same", int16=True))]:
    tflite_op(_name, options=_options, version=_pad_version, evaluate=_evaluate, layout="axis",
              layout_inputs=(0,), remap_axes=remap_paddings, quant=_quant)
tflite_op("MIRROR_PAD", options="MirrorPadOptions", quant=SAME16, version=_mirror_pad_version,
          evaluate=_evaluate_mirror_pad, layout="axis", layout_inputs=(0,),
          remap_axes=remap_paddings)


# --- ONNX importer ------------------------------------------------------------------------------
# Why pads and axes must be constants, and what makes them so (require_const's message).
_SHAPE_GIVING = ("TFLite's PAD needs it constant because the output's shape follows from it: make "
                 "it an initializer, or compute it from constants and input shapes only (the "
                 "loader folds those)")


def _optional_input(node, index) -> str:
    return node.inputs[index] if len(node.inputs) > index else ""


def _pad_widths(node, ctx, pads_known: bool = True) -> tuple[np.ndarray | None, object]:
    """([rank, 2] begin/end pad per axis, constant value) from attributes or inputs; the value is
    a tensor's name when it is computed at run time (and the mode is constant: the others do not
    read it). pads_known False: the pads are computed at run time, (None, value)."""
    rank = ctx.rank(node.inputs[0])
    if ctx.opset < 11:
        pads = node.attr("pads", node.attr("paddings"))
        value, axes = node.attr("value", 0.0), None
    else:
        pads = ctx.require_const(node.inputs[1], "Pad pads", _SHAPE_GIVING) if pads_known else None
        value_name, axes_name = _optional_input(node, 2), _optional_input(node, 3)
        value = ctx.const(value_name) if value_name else None
        if value_name and value is None and node.attr("mode", "constant") == "constant":
            value = value_name
        axes = ctx.require_const(axes_name, "Pad axes", _SHAPE_GIVING) if axes_name else None
    if not isinstance(value, str):
        value = 0 if value is None else np.asarray(value).reshape(-1)[0].item()
    if pads is None:
        return None, value
    pads = [int(p) for p in np.atleast_1d(pads)]
    axes = list(range(rank)) if axes is None else [int(a) for a in np.atleast_1d(axes)]
    if len(pads) != 2 * len(axes) or any(not -rank <= a < rank for a in axes):
        raise ctx.error(f"pads {pads} do not match axes {axes} of a rank-{rank} input")
    widths = np.zeros((rank, 2), np.int64)
    for i, axis in enumerate(axes):
        widths[axis % rank] = (pads[i], pads[i + len(axes)])
    return widths, value


def _output(ctx, x, shape, y, last):
    """The final output name when this is the last op, else a new intermediate."""
    return y if last else ctx.tensor(x + "_pad", shape, ctx.dtype(x))


def _crop(ctx, x, widths, y, last):
    """SLICE away negative pads (cropping)."""
    crop = np.maximum(-widths, 0)
    size = np.array(ctx.shape(x)) - crop.sum(axis=1)
    return slice_tensor(ctx, x, crop[:, 0], size, _output(ctx, x, size, y, last))


def _constant_pad(ctx, x, widths, value, y):
    if len(widths) > MAX_PAD_RANK:
        raise ctx.error(f"rank {len(widths)}: TFLite pads tensors of up to {MAX_PAD_RANK} dimensions")
    _constant_pad_op(ctx, [x, ctx.constant("paddings", widths.astype(np.int32))], value, y)


def _constant_pad_op(ctx, inputs, value, y):
    """PAD (value 0) or PADV2 of inputs [x, paddings] with `value` (a number, or a tensor's name
    when computed at run time)."""
    x = inputs[0]
    if isinstance(value, str):  # computed at run time: PADV2 reads a one-element tensor
        if ctx.dtype(value) != ctx.dtype(x) or int(np.prod(ctx.shape(value))) != 1:
            raise ctx.error(f"constant_value {value!r} of dtype {ctx.dtype(value)} and shape "
                            f"{list(ctx.shape(value))}: one {ctx.dtype(x)} value expected")
        ctx.add_op("PADV2", inputs + [value], [y])
    elif value == 0:
        ctx.add_op("PAD", inputs, [y])
    else:
        dtype = ctx.dtype(x)
        if dtype.kind in "iu" and value != int(value):
            raise ctx.error(f"pad value {value} is not an integer for a {dtype} tensor")
        ctx.add_op("PADV2", inputs + [ctx.constant("pad_value", np.array(value, dtype))], [y])


def _reflect_pad(ctx, x, widths, y):
    shape = ctx.shape(x)
    too_wide = [a for a in range(len(shape)) if widths[a].any() and widths[a].max() >= shape[a]]
    if too_wide:
        a = too_wide[0]
        raise ctx.error(f"reflect pads {widths[a].tolist()} on axis {a} of size {shape[a]}: each "
                        "must be smaller than the dimension")
    ctx.add_op("MIRROR_PAD", [x, ctx.constant("paddings", widths.astype(np.int32))], [y],
               {"mode": "REFLECT"})


def _edge(ctx, x, axis, index, width):
    """The slice at `index` of `axis`, repeated `width` times along it."""
    shape = list(ctx.shape(x))
    begin = [0] * len(shape)
    begin[axis] = index
    edge = slice_tensor(ctx, x, begin, shape[:axis] + [1] + shape[axis + 1:])
    if width > 1:
        edge = broadcast_to(ctx, edge, shape[:axis] + [int(width)] + shape[axis + 1:])
    return edge


def _edge_pad(ctx, x, widths, y):
    """Per padded axis: CONCATENATION of [first slice repeated, x, last slice repeated]."""
    axes = [a for a in range(len(widths)) if widths[a].any()]
    for k, axis in enumerate(axes):
        shape = list(ctx.shape(x))
        if shape[axis] == 0:
            raise ctx.error(f"edge padding of the empty axis {axis}")
        before, after = (int(w) for w in widths[axis])
        parts = ([_edge(ctx, x, axis, 0, before)] if before else []) + [x] + \
                ([_edge(ctx, x, axis, shape[axis] - 1, after)] if after else [])
        shape[axis] += before + after
        out = _output(ctx, x, shape, y, k == len(axes) - 1)
        ctx.add_op("CONCATENATION", parts, [out], {"axis": axis})
        x = out


def _wrap_pad(ctx, x, widths, y):
    """Element i of the padded axis is x[(i - begin) mod n]: TILE enough periods, then SLICE."""
    shape = np.array(ctx.shape(x))
    if np.any((shape == 0) & widths.any(axis=1)):
        raise ctx.error("wrap padding of an empty axis")
    start = np.where(widths.any(axis=1), (-widths[:, 0]) % np.maximum(shape, 1), 0)
    size = shape + widths.sum(axis=1)
    multiples = -(-(start + size) // np.maximum(shape, 1))
    tiled = tile(ctx, x, np.where(widths.any(axis=1), multiples, 1))
    slice_tensor(ctx, tiled, start, size, y)


def _computed_pad(node, ctx, mode: str) -> None:
    """Constant-mode pads computed at run time, whatever their signs: x padded by a constant
    margin of the output's size on both sides of every axis (PAD / PADV2), then the output cut
    from it by SLICE at begin margin - pad_begin (a negative pad begins inside x: cropping). A
    pad of the axis is at most its output size (the other pad crops at most the whole input),
    so the cut stays inside the margins; every shape is static. The other modes pad with
    reflected or repeated values, which a margin cannot hold."""
    x, y, pads = node.inputs[0], node.outputs[0], node.inputs[1]
    if mode != "constant":
        producer = ctx.model.producer(pads)
        if producer is not None and producer.type == "CAST" and producer.source.startswith("input "):
            pads = producer.inputs[0]  # a graph input narrowed to int32: the model's name for it
        raise ctx.error(f"{mode} padding with pads (input {pads!r}) computed at run time: qconvert "
                        "builds it from TFLite ops sized by the pads (and crops negative ones with "
                        "a SLICE of computed size), and TFLite's tensors need static shapes; make "
                        "the pads an initializer")
    rank, shape, out_shape = ctx.rank(x), np.array(ctx.shape(x)), np.array(ctx.shape(y))
    if rank > MAX_PAD_RANK:
        raise ctx.error(f"rank {rank}: TFLite pads tensors of up to {MAX_PAD_RANK} dimensions")
    axes_name = _optional_input(node, 3)
    axes = (list(range(rank)) if not axes_name else
            [int(a) for a in np.atleast_1d(ctx.require_const(axes_name, "Pad axes", _SHAPE_GIVING))])
    if ctx.shape(pads) != (2 * len(axes),) or any(not -rank <= a < rank for a in axes):
        raise ctx.error(f"pads {pads!r} of shape {list(ctx.shape(pads))} do not match axes {axes} "
                        f"of a rank-{rank} input")
    axes = [a % rank for a in axes]
    _, value = _pad_widths(node, ctx, pads_known=False)
    if pads in ctx.run_time_shaped and pads in ctx.at_sizes:
        _sized_pad(ctx, x, y, pads, axes, value)
        return
    margin = np.zeros(rank, np.int32)
    margin[axes] = out_shape[axes]
    padded = ctx.tensor(f"{y}_margins", tuple(shape + 2 * margin), ctx.dtype(x))
    _constant_pad_op(ctx, [x, ctx.constant("paddings", np.stack([margin, margin], axis=1))], value, padded)
    begins = _pad_begins(ctx, pads, axes, rank, y)
    begin = ctx.tensor(f"{y}_cut_begin", (rank,), np.int32)
    ctx.add_op("SUB", [ctx.constant("margin", margin), begins], [begin])
    ctx.add_op("SLICE", [padded, begin, ctx.constant("size", out_shape.astype(np.int32))], [y])


def _sized_pad(ctx, x: str, y: str, pads: str, axes: list, value) -> None:
    """Constant-mode pads computed from the input's size when the model runs (Swin's window
    padding (7 - W % 7) % 7, which keep_dynamic cannot follow as a constant): PAD by their
    positive parts, read as a tensor (the interpreter sizes the output each run), then SLICE
    away the negative parts, its size computed from the padded SHAPE. Every size follows the
    input's; the static shapes are the pads' values at the loader's sizes."""
    rank, at = ctx.rank(x), np.asarray(ctx.at_sizes[pads], np.int64)
    widths_at = np.zeros((rank, 2), np.int64)
    widths_at[axes] = np.stack([at[:len(axes)], at[len(axes):]], axis=1)

    def vector(kind: str, inputs: list, hint: str, shape=(rank,), options=None) -> str:
        out = ctx.tensor(f"{y}_{hint}", shape, np.int32)
        ctx.add_op(kind, inputs, [out], options)
        return out

    zero = ctx.constant("zero", np.zeros((), np.int32))
    column = ctx.constant("shape", np.array([rank, 1], np.int32))
    grows, crops = [], []
    for side, offset in (("begins", 0), ("ends", len(axes))):
        widths = _pad_begins(ctx, pads, axes, rank, y, offset, side)
        positive = vector("MAXIMUM", [widths, zero], f"positive_{side}")
        grows.append(vector("RESHAPE", [positive, column], f"grow_{side}", (rank, 1)))
        negated = vector("SUB", [zero, widths], f"negated_{side}")
        crops.append(vector("MAXIMUM", [negated, zero], f"crop_{side}"))
    paddings = vector("CONCATENATION", grows, "paddings", (rank, 2), {"axis": 1})
    padded_shape = tuple(np.add(ctx.shape(x), np.maximum(widths_at, 0).sum(axis=1)))
    padded = ctx.tensor(f"{y}_padded", padded_shape, ctx.dtype(x))
    _constant_pad_op(ctx, [x, paddings], value, padded)
    size = vector("SHAPE", [padded], "padded_shape", options={"out_type": np.int32})
    size = vector("SUB", [size, crops[0]], "less_begins")
    size = vector("SUB", [size, crops[1]], "size")
    ctx.add_op("SLICE", [padded, crops[0], size], [y])


def _pad_begins(ctx, pads: str, axes: list, rank: int, y: str, offset: int = 0, side: str = "begins") -> str:
    """The rank-long vector of begin pads (0 for the axes not named) GATHERed from the pads;
    from `offset` on, the end pads."""
    joined = ctx.tensor(f"{y}_pads_and_zero", (2 * len(axes) + 1,), np.int32)
    ctx.add_op("CONCATENATION", [pads, ctx.constant("zero", np.zeros(1, np.int32))], [joined], {"axis": 0})
    indices = np.full(rank, 2 * len(axes), np.int32)  # the zero
    indices[axes] = offset + np.arange(len(axes))
    found = ctx.tensor(f"{y}_pad_{side}", (rank,), np.int32)
    ctx.add_op("GATHER", [joined, ctx.constant("indices", indices)], [found], {"axis": 0, "batch_dims": 0})
    return found


@onnx_op("Pad")
def import_pad(node, ctx):
    x, y = node.inputs[0], node.outputs[0]
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise ctx.error(f"unknown pad mode {mode!r}")
    if ctx.opset >= 11 and ctx.const(node.inputs[1]) is None:
        _computed_pad(node, ctx, mode)
        return
    widths, value = _pad_widths(node, ctx)
    cropping, padding = bool((widths < 0).any()), bool((widths > 0).any())
    if not cropping and not padding:
        ctx.add_op("IDENTITY", [x], [y])
        return
    if cropping:
        x = _crop(ctx, x, widths, y, last=not padding)
        if not padding:
            return
        widths = np.maximum(widths, 0)
    if mode == "constant":
        _constant_pad(ctx, x, widths, value, y)
    elif mode == "reflect":
        _reflect_pad(ctx, x, widths, y)
    elif mode == "edge":
        _edge_pad(ctx, x, widths, y)
    else:
        _wrap_pad(ctx, x, widths, y)
