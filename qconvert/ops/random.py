"""Random ops: RandomNormal(Like), RandomUniform(Like), Bernoulli and Multinomial as TFLite's
random kernels (tensorflow/lite/kernels/random_ops.cc).

TFLite's RANDOM_STANDARD_NORMAL and RANDOM_UNIFORM take the output's shape as an int32 1-D
tensor (here a constant: the loader knows every shape; one that follows a dynamic dimension is
computed at run time by onnx/dynamic_dims.py) and write float32 standard normal / uniform
[0, 1) draws (Philox, Box-Muller); MULTINOMIAL takes [batch, classes] logits and an int32 scalar
count and writes [batch, count] int32 or int64 class indices, as ONNX's Multinomial does. So:
- RandomNormal(Like): RANDOM_STANDARD_NORMAL, then MUL by `scale` and ADD of `mean` (each only
  when it changes something), CAST when the output is not float32;
- RandomUniform(Like): RANDOM_UNIFORM, then MUL by high - low and ADD of low;
- Bernoulli(p): LESS(RANDOM_UNIFORM of p's shape, p) -- true with probability p -- cast to the
  output's type;
- Multinomial: MULTINOMIAL(logits, sample_size).
The ...Like forms take the shape of their input (and its dtype when they name none).

Seeds. TFLite seeds each op with RandomOptions (seed, seed2), both 0 meaning "from /dev/urandom",
which would make a file's draws differ from run to run; ONNX's `seed` is a float. So the bytes
written depend only on the model (the house rule), and each op's sequence is fixed:
- a node with `seed`: seed = the float32 bit pattern of it, seed2 = SEEDED_SEED2, so that ONNX's
  "the same seed, the same draws" holds between nodes too;
- a node without one: seed = UNSEEDED_SEED, seed2 = the CRC-32 of its output's name (with 1 set,
  never 0), so that unseeded nodes draw independent sequences, as onnxruntime's do. Unlike
  onnxruntime's unseeded nodes, the file then draws the same sequence each time it is loaded
  (each invoke continues it).

No `evaluate`: the loader never folds these ops (onnx/folding.py NOT_FOLDABLE, refused.RANDOM_OPS).
The check cannot compare draws of two generators: check/random_draws.py feeds each op's draws to
both runtimes; the draw tensor is named draw_name(output) so that it finds it.
"""

from __future__ import annotations

import zlib

import numpy as np
from onnx import helper

from .registry import onnx_op, onnx_types, tflite_op

# The ONNX ops this family imports (the loader never folds them, control flow never hoists them).
RANDOM_OPS = ("Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
              "RandomUniformLike")
# The TFLite kernels that draw, and the draws' distribution the check feeds in their place.
DRAWING_OPS = {"RANDOM_STANDARD_NORMAL": "normal", "RANDOM_UNIFORM": "uniform",
               "MULTINOMIAL": "classes"}
SEEDED_SEED2 = 0x5EED  # seed2 of a node with an ONNX seed
UNSEEDED_SEED = 0x9C0417  # seed of a node without one (seed2: its output's name's CRC-32)

# op_version.cc has no case for them: version 1 (TFLite 2.8).
tflite_op("RANDOM_STANDARD_NORMAL", options="RandomOptions")
tflite_op("RANDOM_UNIFORM", options="RandomOptions")
tflite_op("MULTINOMIAL", options="RandomOptions")


def draw_name(output: str) -> str:
    """The name of the tensor a random kernel writes for the ONNX output `output` (before the
    scale, offset or comparison that make the output), which the check feeds."""
    return f"{output}/draw"


def seeds(node) -> dict[str, int]:
    """RandomOptions' seed and seed2 for the node (see the module docstring): deterministic,
    never both 0."""
    seed = node.attr("seed")
    if seed is not None:
        return {"seed": int(np.array(seed, np.float32).view(np.uint32)), "seed2": SEEDED_SEED2}
    return {"seed": UNSEEDED_SEED, "seed2": zlib.crc32(node.outputs[0].encode()) | 1}


def _draw(ctx, node, kernel: str, shape: tuple[int, ...], last: bool) -> str:
    """The kernel's float32 draws of `shape`: into the node's output when nothing follows
    (`last`), else into draw_name(output)."""
    y = node.outputs[0]
    out = y if last else ctx.tensor(draw_name(y), shape, np.float32)
    dims = ctx.constant("shape", np.array(shape, np.int32))
    ctx.add_op(kernel, [dims], [out], seeds(node))
    return out


def _cast(ctx, x: str, y: str) -> None:
    ctx.add_op("CAST", [x], [y], {"in_data_type": ctx.dtype(x), "out_data_type": ctx.dtype(y)})


def _affine(ctx, node, kernel: str, scale: float, offset: float) -> None:
    """y = offset + scale * draw (MUL and ADD in float32, each only where it changes the draw),
    cast to y's type when that is not float32."""
    y = node.outputs[0]
    shape = ctx.shape(y)
    if ctx.dtype(y).kind != "f":
        raise ctx.error(f"its output type {ctx.dtype(y)} is not a float type (ONNX allows float "
                        "types only)")
    steps = [("MUL", np.float32(scale))] if scale != 1 else []
    steps += [("ADD", np.float32(offset))] if offset != 0 else []
    cast = ctx.dtype(y) != np.float32
    x = _draw(ctx, node, kernel, shape, last=not steps and not cast)
    for k, (op, value) in enumerate(steps):
        last = k == len(steps) - 1 and not cast
        out = y if last else ctx.tensor(f"{y}/{op.lower()}", shape, np.float32)
        ctx.add_op(op, [x, ctx.constant(op.lower(), value)], [out])
        x = out
    if cast:
        _cast(ctx, x, y)


def _checked_shape(ctx, node) -> tuple[int, ...]:
    shape = tuple(int(d) for d in node.attr("shape", ()))
    if any(d < 0 for d in shape):
        raise ctx.error(f"its shape {list(shape)} has a negative dimension")
    if tuple(ctx.shape(node.outputs[0])) != shape:
        raise ctx.error(f"the output's shape {list(ctx.shape(node.outputs[0]))} is not its shape "
                        f"attribute {list(shape)}")
    return shape


@onnx_op("RandomNormal", "RandomNormalLike")
def import_random_normal(node, ctx):
    """mean + scale * RANDOM_STANDARD_NORMAL (module docstring)."""
    if node.op_type == "RandomNormal":
        _checked_shape(ctx, node)
    _affine(ctx, node, "RANDOM_STANDARD_NORMAL", float(node.attr("scale", 1.0)),
            float(node.attr("mean", 0.0)))


@onnx_op("RandomUniform", "RandomUniformLike")
def import_random_uniform(node, ctx):
    """low + (high - low) * RANDOM_UNIFORM (module docstring): uniform over [low, high)."""
    if node.op_type == "RandomUniform":
        _checked_shape(ctx, node)
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    if not high >= low:
        raise ctx.error(f"its high {high:g} is below its low {low:g}")
    _affine(ctx, node, "RANDOM_UNIFORM", float(np.float32(high) - np.float32(low)), low)


@onnx_types("Bernoulli")
def _bernoulli_types(shapes, dtypes, attrs):
    """p's shape, in `dtype` or p's type (onnx infers none: Bernoulli is a function op)."""
    if shapes[0] is None:
        return [None]
    dtype = attrs.get("dtype")
    return [(tuple(shapes[0]), dtypes[0] if dtype is None else helper.tensor_dtype_to_np_dtype(dtype))]


@onnx_op("Bernoulli")
def import_bernoulli(node, ctx):
    """LESS(RANDOM_UNIFORM, p): true with probability p for p in [0, 1] (0 never, 1 always, as a
    draw in [0, 1) is below 1), cast to the output's type."""
    p, y = node.inputs[0], node.outputs[0]
    if ctx.dtype(p) != np.float32:
        raise ctx.error(f"its input {p!r} is {ctx.dtype(p)}, not a float type")
    shape = ctx.shape(p)
    draws = _draw(ctx, node, "RANDOM_UNIFORM", shape, last=False)
    below = y if ctx.dtype(y) == np.bool_ else ctx.tensor(f"{y}/less", shape, np.bool_)
    ctx.add_op("LESS", [draws, p], [below])
    if below != y:
        _cast(ctx, below, y)


@onnx_op("Multinomial")
def import_multinomial(node, ctx):
    """MULTINOMIAL(logits, sample_size): [batch, sample_size] class indices drawn with the
    probabilities softmax(logits) per row (ONNX's input is unnormalized log-probabilities, as
    TFLite's), int32 or int64 as the output is in the graph."""
    logits, y = node.inputs[0], node.outputs[0]
    shape, count = ctx.shape(logits), int(node.attr("sample_size", 1))
    if len(shape) != 2 or ctx.dtype(logits) != np.float32:
        raise ctx.error(f"its input {logits!r} is {ctx.dtype(logits)} of shape {list(shape)}; "
                        "TFLite's MULTINOMIAL takes float [batch, classes] logits")
    if shape[1] < 1:
        raise ctx.error(f"its input {logits!r} has no classes to draw from (shape {list(shape)})")
    if count < 1:
        raise ctx.error(f"sample_size {count} draws nothing: an empty output has no TFLite tensor")
    if ctx.dtype(y) not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ctx.error(f"its output type {ctx.dtype(y)} is not int32 or int64")
    if ctx.shape(y) != (shape[0], count):
        raise ctx.error(f"the output's shape {list(ctx.shape(y))} is not [{shape[0]}, {count}]")
    samples = ctx.constant("sample_size", np.array(count, np.int32))
    ctx.add_op("MULTINOMIAL", [logits, samples], [y], seeds(node))
