"""A node's output types in the loader's folding pass (qconvert/onnx/node_types.py): a
ConstantOfShape of a shape computed from run-time values waits for that shape's value at the
loader's sizes, and only once nothing else types the graph (`guess`) takes each entry as a size
the values decide. Guessed at once, Faster R-CNN's merged levels were zeros [64, 64, 64, 64]
where the value, known a round later, was [64, 256, 7, 7]."""

from __future__ import annotations

import numpy as np
from onnx import helper

from qconvert.onnx.node_types import infer_node

ZEROS = helper.make_node("ConstantOfShape", ["shape"], ["zeros"])


def _infer(constants: dict, guess: bool) -> dict:
    shapes, dtypes = {"shape": (4,)}, {"shape": np.dtype(np.int64)}
    infer_node(ZEROS, shapes, dtypes, constants, {"": 17}, lambda node, axis: 64 + axis,
               varying=True, guess=guess)
    return shapes


def test_a_shape_not_known_yet_leaves_the_output_untyped_until_guessing():
    assert "zeros" not in _infer({}, guess=False)
    assert _infer({}, guess=True)["zeros"] == (64, 65, 66, 67)  # each a size the values decide


def test_a_shape_known_at_the_loaders_sizes_is_taken_without_guessing():
    known = {"shape": np.array([64, 256, 7, 7], np.int64)}
    assert _infer(known, guess=False)["zeros"] == (64, 256, 7, 7)


def test_a_size_inference_cannot_tell_waits_too():
    """A Reshape of a run-time shaped tensor to a computed target: onnx's -1 is a guess."""
    node = helper.make_node("Reshape", ["x", "target"], ["y"])
    shapes = {"x": (64, 4), "target": (2,)}
    dtypes = {"x": np.dtype(np.float32), "target": np.dtype(np.int64)}
    infer_node(node, shapes, dtypes, {}, {"": 17}, lambda n, axis: 64, varying=True, guess=False)
    assert "y" not in shapes
    infer_node(node, shapes, dtypes, {}, {"": 17}, lambda n, axis: 64, varying=True, guess=True)
    assert shapes["y"] == (64, 64)


def _range(values: dict, guess: bool) -> dict:
    node = helper.make_node("Range", ["start", "limit", "delta"], ["positions"])
    shapes = {n: () for n in node.input}
    dtypes = {n: np.dtype(np.int64) for n in node.input}
    infer_node(node, shapes, dtypes, values, {"": 17}, lambda n, axis: 64, varying=True, guess=guess)
    return shapes


def test_a_range_of_shapes_known_at_the_loaders_sizes_takes_its_length():
    """arange(num_classes) of a [count, 91] Shape: 91, not a count of its own."""
    known = {"start": np.array(0), "limit": np.array(91), "delta": np.array(1)}
    assert _range(known, guess=False)["positions"] == (91,)
    assert _range({**known, "start": np.array(90), "delta": np.array(-2)}, guess=False)["positions"] == (0,)


def test_a_range_of_values_not_known_yet_waits_then_is_a_count():
    assert "positions" not in _range({}, guess=False)
    assert _range({}, guess=True)["positions"] == (64,)
