"""Compress (qconvert/ops/compress.py) against onnxruntime: a constant condition along an axis,
a negative axis, a condition shorter than the axis, no axis (the flattened input); and in the
middle of a graph, where the output's shape comes from the loader's per-node types (onnx infers
none for Compress)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

F = TensorProto.FLOAT


def _model(x_shape, condition, axis, y_shape, extra_nodes=(), output="y"):
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("Compress", ["x", "c"], ["y"], **attrs)
    model = make_model([node, *extra_nodes], {"x": (F, x_shape)}, {output: F},
                       {"c": np.array(condition, np.bool_)}, opset=13)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info(output, F, y_shape))
    return model


@pytest.mark.parametrize("x_shape,condition,axis,y_shape", [
    ((3, 5, 2), [1, 0, 1, 1, 0], 1, (3, 3, 2)), ((3, 5, 2), [0, 1, 1], 0, (2, 5, 2)),
    ((3, 5, 2), [1, 0], -1, (3, 5, 1)), ((3, 5, 2), [1, 0, 0, 1], 1, (3, 2, 2)),
    ((2, 3), [0, 1, 1, 0, 0, 1], None, (3,)), ((2, 3), [1, 0, 1], None, (2,))])
def test_compress_with_a_constant_condition(x_shape, condition, axis, y_shape):
    _, report = assert_matches_onnxruntime(_model(x_shape, condition, axis, y_shape), io_layout="onnx")
    assert report.op_counts.get("GATHER") == 1


def test_selecting_nothing_is_refused():
    assert_refused_in_one_line(_model((3, 4), [0, 0, 0], 0, (0, 4)), "selects nothing")


def test_computed_condition_is_refused():
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=0)
    model = make_model([node], {"x": (F, (3, 4)), "c": (TensorProto.BOOL, (3,))}, {"y": F}, opset=13)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", F, (2, 4)))
    assert_refused_in_one_line(model, "condition .*a graph input")


def test_compress_in_the_middle_of_a_graph():
    """No declared shape to lean on: the loader's per-node types count the constant condition's
    selected positions, and the Relu behind the Compress gets its shape from them."""
    nodes = [helper.make_node("Compress", ["x", "c"], ["t"], axis=1), helper.make_node("Relu", ["t"], ["y"])]
    model = make_model(nodes, {"x": (F, (3, 5, 2))}, {"y": F},
                       {"c": np.array([1, 0, 1, 1, 0], np.bool_)}, opset=13)
    assert_matches_onnxruntime(model, io_layout="onnx")


# --- NonZero: WHERE, its count resized when the model runs ------------------------------------
def _non_zero(x_type, shape, after=()):
    """y = NonZero(x), then `after` reading y."""
    outputs = {"y": TensorProto.INT64, **{n.output[0]: t for n, t in after}}
    return make_model([helper.make_node("NonZero", ["x"], ["y"]), *(n for n, _ in after)],
                      {"x": (x_type, shape)}, outputs, opset=13)


def _feeds(x_type, shape, seed):
    """Inputs with some zeros, none, and all: the count moves from run to run."""
    rng = np.random.default_rng(seed)
    values = [rng.integers(-1, 2, shape), np.zeros(shape), np.ones(shape)]
    dtype = {TensorProto.FLOAT: np.float32, TensorProto.INT32: np.int32, TensorProto.BOOL: np.bool_}[x_type]
    return [{"x": v.astype(dtype)} for v in values]


@pytest.mark.parametrize("x_type", [TensorProto.FLOAT, TensorProto.INT32, TensorProto.BOOL])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (1, 2, 3, 2)])
def test_non_zero_matches_at_every_count(x_type, shape):
    """One file for every input: the count of its nonzero values (some, none, all) decides the
    output's length when the model runs."""
    model = _non_zero(x_type, shape)
    flatbuffer, report = None, None
    for feeds in _feeds(x_type, shape, seed=len(shape)):
        flatbuffer, report = assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


def test_non_zero_feeds_a_gather_and_a_count():
    """NonZero's coordinates gather the values they point at (GatherND of the transpose) and
    are counted (Shape, Gather, Cast): the ops after it resize with the count."""
    after = [(helper.make_node("Transpose", ["y"], ["coordinates"]), TensorProto.INT64),
             (helper.make_node("GatherND", ["x", "coordinates"], ["picked"]), F),
             (helper.make_node("Shape", ["y"], ["shape"]), TensorProto.INT64)]
    model = _non_zero(F, (4, 6), after)
    for feeds in _feeds(F, (4, 6), seed=3):
        assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


def test_a_non_zero_count_the_graph_cannot_follow_is_refused():
    """The count added to a 64-long constant: it would hold for one count only."""
    after = [(helper.make_node("Cast", ["y"], ["yf"], to=F), F),
             (helper.make_node("Add", ["yf", "c"], ["z"]), F)]
    model = _non_zero(F, (3, 5), after)
    model.graph.initializer.append(helper.make_tensor("c", F, [64], np.ones(64).tolist()))
    assert_refused_in_one_line(model, "its size is known only when the model runs")


def test_a_constant_as_long_as_the_count_is_filled_when_the_model_runs():
    """A label for every selected value (torchvision's full_like(scores, label)): ConstantOfShape
    of the selection's Shape, which the model computes when it runs (SHAPE, then FILL), so it
    follows the count."""
    value = helper.make_tensor("v", F, [1], [3.0])
    after = [(helper.make_node("Transpose", ["y"], ["coordinates"]), TensorProto.INT64),
             (helper.make_node("GatherND", ["x", "coordinates"], ["picked"]), F),
             (helper.make_node("Shape", ["picked"], ["count"]), TensorProto.INT64),
             (helper.make_node("ConstantOfShape", ["count"], ["labels"], value=value), F),
             (helper.make_node("Add", ["picked", "labels"], ["labelled"]), F)]
    model = _non_zero(F, (4, 6), after)
    for feeds in _feeds(F, (4, 6), seed=5):
        assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)
