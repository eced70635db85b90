"""Comparisons, logic and Where (qconvert/ops/compare.py) against onnxruntime: 2-D and 4-D inputs,
int64 inputs (narrowed to int32 inside the graph), broadcasting, a comparison after a Conv (it must
run in NHWC with no transposes left) and rank-6 broadcasting."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_matches_onnxruntime, make_model

RNG = np.random.default_rng(3)
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NP = {FLOAT: np.float32, INT64: np.int64, BOOL: np.bool_}


def values(elem_type, shape):
    """Random values with many ties between two draws (so Equal/LessOrEqual see both answers)."""
    if elem_type == BOOL:
        return RNG.random(shape) > 0.5
    return RNG.integers(-3, 4, shape).astype(NP[elem_type])


COMPARISONS = ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]
SHAPES = [((4, 7), (4, 7)), ((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (3, 1, 5)), ((4, 1), (7,))]


@pytest.mark.parametrize("op_type", COMPARISONS)
@pytest.mark.parametrize("elem_type", [FLOAT, INT64])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_comparison(op_type, elem_type, shapes):
    a_shape, b_shape = shapes
    model = make_model([helper.make_node(op_type, ["a", "b"], ["y"])],
                       {"a": (elem_type, a_shape), "b": (elem_type, b_shape)}, {"y": BOOL},
                       opset=16)
    assert_matches_onnxruntime(model, {"a": values(elem_type, a_shape), "b": values(elem_type, b_shape)})


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor", "Equal"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_logic(op_type, shapes):
    a_shape, b_shape = shapes
    model = make_model([helper.make_node(op_type, ["a", "b"], ["y"])],
                       {"a": (BOOL, a_shape), "b": (BOOL, b_shape)}, {"y": BOOL})
    assert_matches_onnxruntime(model, {"a": values(BOOL, a_shape), "b": values(BOOL, b_shape)})


@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 4, 5)])
def test_not(shape):
    model = make_model([helper.make_node("Not", ["a"], ["y"])], {"a": (BOOL, shape)}, {"y": BOOL})
    assert_matches_onnxruntime(model, {"a": values(BOOL, shape)})


@pytest.mark.parametrize("elem_type", [FLOAT, INT64])
@pytest.mark.parametrize("shapes", [((4, 7), (4, 7), (4, 7)), ((2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 5)),
                                    ((3, 1, 5), (2, 1, 4, 1), (4, 5)), ((1, 7), (4, 1), ())], ids=str)
def test_where_broadcasts(elem_type, shapes):
    c_shape, x_shape, y_shape = shapes
    model = make_model([helper.make_node("Where", ["c", "x", "y"], ["out"])],
                       {"c": (BOOL, c_shape), "x": (elem_type, x_shape), "y": (elem_type, y_shape)},
                       {"out": elem_type})
    feeds = {"c": values(BOOL, c_shape), "x": values(elem_type, x_shape),
             "y": values(elem_type, y_shape)}
    assert_matches_onnxruntime(model, feeds)


def test_where_of_comparison_after_conv_runs_in_nhwc():
    """x -> Conv -> Where(t > c, t, -t) with a per-channel constant c: no transposes remain."""
    weights = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    threshold = RNG.standard_normal((4, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]),
             helper.make_node("Greater", ["t", "c"], ["mask"]),
             helper.make_node("Neg", ["t"], ["neg"]),
             helper.make_node("Where", ["mask", "t", "neg"], ["y"])]
    model = make_model(nodes, {"x": (FLOAT, (2, 3, 5, 6))}, {"y": FLOAT}, {"w": weights, "c": threshold})
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    _, report = assert_matches_onnxruntime(model, {"x": x})
    assert report.transposes == 0
    assert report.op_counts["GREATER"] == 1 and report.op_counts["SELECT_V2"] == 1


@pytest.mark.parametrize("op_type", ["Less", "Equal", "Where"])
def test_rank6_broadcast_between_activations(op_type):
    a_shape, b_shape = (2, 1, 3, 1, 2, 3), (1, 2, 1, 3, 2, 1)
    if op_type == "Where":
        node = helper.make_node("Where", ["c", "a", "b"], ["y"])
        inputs = {"c": (BOOL, (2, 1, 1, 3, 1, 1)), "a": (FLOAT, a_shape), "b": (FLOAT, b_shape)}
        outputs = {"y": FLOAT}
    else:
        node = helper.make_node(op_type, ["a", "b"], ["y"])
        inputs, outputs = {"a": (FLOAT, a_shape), "b": (FLOAT, b_shape)}, {"y": BOOL}
    model = make_model([node], inputs, outputs)
    assert_matches_onnxruntime(model, {n: values(t, s) for n, (t, s) in inputs.items()})


SPECIAL = np.array([[0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 3e38, -3e38, 1e-45]], np.float32)


@pytest.mark.parametrize("elem_type", [FLOAT, TensorProto.DOUBLE])
def test_isnan(elem_type):
    model = make_model([helper.make_node("IsNaN", ["x"], ["y"])], {"x": (elem_type, SPECIAL.shape)},
                       {"y": BOOL}, opset=20)
    x = SPECIAL.astype(helper.tensor_dtype_to_np_dtype(elem_type))
    _, report = assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)
    assert report.op_counts.get("NOT_EQUAL") == 1


@pytest.mark.parametrize("positive", [0, 1])
@pytest.mark.parametrize("negative", [0, 1])
def test_isinf(positive, negative):
    model = make_model([helper.make_node("IsInf", ["x"], ["y"], detect_positive=positive,
                                         detect_negative=negative)],
                       {"x": (FLOAT, SPECIAL.shape)}, {"y": BOOL}, opset=20)
    assert_matches_onnxruntime(model, {"x": SPECIAL}, rtol=0, atol=0)


def test_isnan_of_int_is_refused():
    from tests.harness import assert_refused_in_one_line

    model = make_model([helper.make_node("IsNaN", ["x"], ["y"], name="nan_check")],
                       {"x": (INT64, (3,))}, {"y": BOOL}, opset=20)
    assert_refused_in_one_line(model, "int64", node="nan_check")
