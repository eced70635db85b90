"""resize_nearest_to_depth_to_space: a RESIZE_NEAREST_NEIGHBOR about to run int8 that upsamples H
and W by integer factors (an FPN's or YOLO neck's x2 Upsample) becomes copies of its input:
- equal factors f: CONCATENATION of f * f copies along the channels (nested when f * f > 5: the
  x8 of PP-OCR's FPN is 4 x 4 x 4 copies), then DEPTH_TO_SPACE(f), which spreads channel block
  (i * f + j) to pixel offset (i, j);
- otherwise, per axis with a factor above 1: CONCATENATION of the copies along the channels
  (W) or along W (H), then a RESHAPE that turns the copies into neighbouring pixels.

XNNPACK does not handle RESIZE_NEAREST_NEIGHBOR at all (not even in float): each one left the
delegate and split the graph (PP-OCRv4's detector ran in 4 partitions, YOLOX's neck cut twice).
CONCATENATION (at most 5 inputs), DEPTH_TO_SPACE and RESHAPE are delegated in int8. Factors
whose copy counts do not split into concatenations of at most 5 (a prime factor 7 or more) stay.

Bit-exact: only int8 copies, every new tensor gets the input's range (all these ops are same-scale,
so the values keep their params), and only when the kernel's sampling is output index // factor
on both axes: align_corners false, half_pixel_centers either (they agree for integer factors),
checked with the kernel's float32 arithmetic (kernels/internal/reference/resize_nearest_neighbor.h).
The importer emits these flags for ONNX's asymmetric/floor and half_pixel modes at integer scales.

Only where the op runs int8 (calibrated range, no float_reason, int8_blocker None, not wanted
int16 by the options): a float op would gain nothing, it stays in the interpreter either way.
"""

from __future__ import annotations

import numpy as np

from ..ir import Model, Operator
from .quantization import FLOAT32, Int16Choice, about_to_run_int8

MAX_CONCAT_INPUTS = 5  # XNNPACK delegates a CONCATENATION of 2 to 5 inputs


def _repeats(in_size: int, out_size: int, half_pixel: bool) -> bool:
    """Whether the kernel's nearest index along one axis (not align_corners) is x // factor."""
    if out_size % in_size:
        return False
    x = np.arange(out_size, dtype=np.float32)
    scale = np.float32(in_size) / np.float32(out_size)
    index = np.floor((x + np.float32(0.5 if half_pixel else 0.0)) * scale).astype(np.int64)
    index = np.clip(index, 0, in_size - 1)
    return bool(np.array_equal(index, np.arange(out_size) // (out_size // in_size)))


def _chunks(count: int) -> list[int] | None:
    """Copy counts of at most MAX_CONCAT_INPUTS whose product is `count` (nested concatenations);
    None when `count` has a prime factor above it."""
    chunks = []
    while count > 1:
        chunk = next((d for d in range(MAX_CONCAT_INPUTS, 1, -1) if count % d == 0), None)
        if chunk is None:
            return None
        chunks.append(chunk)
        count //= chunk
    return chunks


def _copies(model: Model, anchor: Operator, part: str, count: int, axis: int) -> str:
    """`count` copies of `part` side by side along `axis`, by nested CONCATENATIONs."""
    for chunk in _chunks(count):
        shape = list(model.arrays[part].shape)
        shape[axis] *= chunk
        out = model.add_array_like(part + "_copies", shape, part)
        model.insert_before(anchor, Operator("CONCATENATION", [part] * chunk, [out], {"axis": axis},
                                             source=anchor.source))
        part = out
    return part


def _reshape(model: Model, anchor: Operator, x: str, shape, out: str | None = None) -> str:
    out = out or model.add_array_like(x + "_spread", shape, x)
    target = model.add_constant(x + "_shape", np.array(shape, np.int32))
    model.insert_before(anchor, Operator("RESHAPE", [x, target], [out], source=anchor.source))
    return out


def resize_nearest_to_depth_to_space(model: Model, int16: Int16Choice = Int16Choice()) -> bool:
    changed = False
    for op in model.operators:
        if (op.type != "RESIZE_NEAREST_NEIGHBOR" or op.options.get("align_corners")
                or not about_to_run_int8(op, model, int16)):
            continue
        x, y = op.inputs[0], op.outputs[0]
        source, target = model.arrays[x], model.arrays[y]
        if (len(source.shape) != 4 or len(target.shape) != 4 or source.dtype != FLOAT32
                or source.minmax is None):
            continue
        n, h, w, c = source.shape
        half = bool(op.options.get("half_pixel_centers"))
        if not (_repeats(h, target.shape[1], half) and _repeats(w, target.shape[2], half)):
            continue
        fh, fw = target.shape[1] // h, target.shape[2] // w
        if (fh, fw) == (1, 1) or _chunks(fh * fw) is None:
            continue
        if fh == fw:
            # f * f copies along the channels; DEPTH_TO_SPACE puts copy (i * f + j) at (i, j).
            stacked = _copies(model, op, x, fh * fh, 3)
            model.replace_operator(op, Operator("DEPTH_TO_SPACE", [stacked], [y], {"block_size": fh},
                                                source=op.source))
        else:
            # Both steps write their RESHAPE's result; the last one writes y.
            current = x
            if fw > 1:
                wide = _copies(model, op, current, fw, 3)
                current = _reshape(model, op, wide, (n, h, w * fw, c), y if fh == 1 else None)
            if fh > 1:
                tall = _copies(model, op, current, fh, 2)
                _reshape(model, op, tall, (n, h * fh, w * fw, c), y)
            model.remove_operator(op)
        changed = True
    return changed
