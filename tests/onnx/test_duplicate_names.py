"""Names defined twice (issue 32): what ONNX (onnx.checker, onnxruntime) refuses is refused in one
line naming the name; what it accepts converts and matches onnxruntime.

- a graph input listed twice (it was "internal error: array 'image' exists already"), alone or
  also an initializer; an initializer listed twice; the same in an If branch and a Loop body;
- a weight listed both as a graph input and as an initializer (old exporters): valid, converts;
- a body initializer named like the main graph's input "x" while the main input is read in the
  same op's other body (the issue: "--input-shape names 'x', which is not a model input" with no
  --input-shape given), in an If and a Loop body, at depth 1 and 2 (If in Loop, Loop in If).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, convert_proto

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
SHAPE = [1, 4]


def _info(name, elem=F, shape=SHAPE):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, value=2.0):
    return numpy_helper.from_array(np.full(SHAPE, value, np.float32), name)


def _model(nodes, inputs, inits=(), outputs=("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [_info(o) for o in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _onnxruntime_refuses(model: onnx.ModelProto) -> bool:
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime's own exception types
        return True
    return False


def _checker_refuses(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:  # onnx raises ValidationError or InferenceError
        return True
    return False


# --- refused: what ONNX names once is listed twice -----------------------------------------------
def _add(*inputs):
    return helper.make_node("Add", list(inputs), ["y"], name="add")


_TWICE = {
    "input": (_model([_add("image", "image")], [_info("image"), _info("image")]),
              "graph input 'image' is listed twice"),
    "input and initializer": (_model([_add("x", "w")], [_info("x"), _info("w"), _info("w")], [_init("w")]),
                              "graph input 'w' is listed twice"),
    "initializer": (_model([_add("x", "w")], [_info("x")], [_init("w"), _init("w", 3.0)]),
                    "graph initializer 'w' is listed twice"),
}


def _branch(name, nodes, inputs=(), inits=(), outputs=("t",)):
    return helper.make_graph(nodes, name, list(inputs), [_info(o) for o in outputs], list(inits))


def _if_model(then_branch, else_branch, inits=()) -> onnx.ModelProto:
    """y = If(sum(x) > 0, then, else)."""
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_branch,
                              else_branch=else_branch)]
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    return _model(nodes, [_info("x")], [zero, *inits])


def _loop_model(body, trip: int = 3) -> onnx.ModelProto:
    """y = Loop(trip, carried x)."""
    trips = numpy_helper.from_array(np.array(trip, np.int64), "trips")
    return _model([helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)],
                  [_info("x")], [trips])


def _loop_body(nodes, inits=(), carried="v", out="v2"):
    """A Loop body: (i, c, carried) -> (c, out); `nodes` compute `out` from `carried`."""
    nodes = [*nodes, helper.make_node("Identity", ["c"], ["c2"])]
    return helper.make_graph(nodes, "body", [_info("i", I64, []), _info("c", B, []), _info(carried)],
                             [_info("c2", B, []), _info(out)], list(inits))


_ELSE = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], outputs=("e",))
_TWICE_IN_BODIES = {
    "If branch initializer": (
        _if_model(_branch("then", [helper.make_node("Add", ["x", "w"], ["t"])], inits=[_init("w"), _init("w")]),
                  _ELSE), "graph initializer 'w' of the subgraph 'then' is listed twice"),
    "Loop body input": (
        _loop_model(helper.make_graph([helper.make_node("Add", ["v", "v"], ["v2"]),
                                       helper.make_node("Identity", ["c"], ["c2"])], "body",
                                      [_info("i", I64, []), _info("c", B, []), _info("v"), _info("v")],
                                      [_info("c2", B, []), _info("v2")])),
        "graph input 'v' of the subgraph 'body' is listed twice"),
    "Loop body input that is also an initializer": (
        _loop_model(_loop_body([helper.make_node("Add", ["v", "v"], ["v2"])], inits=[_init("v", 100.0)])),
        "'v' is both an input and an initializer of the subgraph 'body'"),
}


@pytest.mark.parametrize("case", list(_TWICE) + list(_TWICE_IN_BODIES))
def test_a_name_defined_twice_is_refused_in_one_line_as_onnx_refuses_it(case):
    model, message = {**_TWICE, **_TWICE_IN_BODIES}[case]
    assert _checker_refuses(model)
    assert_refused_in_one_line(model, message)


def test_onnxruntime_refuses_a_repeated_graph_input_too():
    assert _onnxruntime_refuses(_TWICE["input"][0])


# --- accepted ------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [9, 13])
def test_a_weight_listed_as_input_and_initializer_converts(opset):
    """Old exporters list every weight among the graph inputs too: valid ONNX (the initializer is
    the input's default), onnx.checker and onnxruntime accept it; it converts as a constant."""
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]),
                               helper.make_node("Add", ["m", "b"], ["y"])], "g",
                              [_info("x"), _info("w", F, [4, 3]), _info("b", F, [3])],
                              [_info("y", F, [1, 3])],
                              [numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 7, "w"),
                               numpy_helper.from_array(np.array([1, -2, 3], np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=4)
    assert not _checker_refuses(model)
    feeds = {"x": np.array([[1, -2, 3, 0.5]], np.float32)}
    flatbuffer, report = assert_matches_onnxruntime(model, feeds)
    assert [i.name for i in report.inputs] == ["x"]


def _shadowing_if() -> onnx.ModelProto:
    """then: x (its own initializer) * 3; else: the main input x negated."""
    then = _branch("then", [helper.make_node("Mul", ["x", "three"], ["t"])],
                   inits=[_init("x", 5.0), numpy_helper.from_array(np.array(3, np.float32), "three")])
    return _if_model(then, _ELSE)


def _shadowing_loop() -> onnx.ModelProto:
    """A Loop body carrying v, adding its own initializer x (not the main input x)."""
    return _loop_model(_loop_body([helper.make_node("Add", ["v", "x"], ["v2"])], inits=[_init("x", 0.5)]))


def _if_in_loop() -> onnx.ModelProto:
    """Depth 2: a Loop body holding _shadowing_if's If on its carried value named x."""
    then = _branch("then", [helper.make_node("Mul", ["x", "three"], ["t"])],
                   inits=[_init("x", 5.0), numpy_helper.from_array(np.array(3, np.float32), "three")])
    inner_else = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], outputs=("e",))
    body = _loop_body([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                       helper.make_node("Greater", ["s", "zero"], ["g"]),
                       helper.make_node("If", ["g"], ["r"], then_branch=then, else_branch=inner_else),
                       helper.make_node("Add", ["r", "x"], ["v2"])], carried="x")
    trips = numpy_helper.from_array(np.array(3, np.int64), "trips")
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    return _model([helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)],
                  [_info("x")], [trips, zero])


def _loop_in_if() -> onnx.ModelProto:
    """Depth 2: an If whose then branch runs _shadowing_loop's Loop on the main input x."""
    trips = numpy_helper.from_array(np.array(2, np.int64), "trips")
    loop = helper.make_node("Loop", ["trips", "", "x"], ["t"],
                            body=_loop_body([helper.make_node("Add", ["v", "x"], ["v2"])],
                                            inits=[_init("x", 0.5)]))
    return _if_model(_branch("then", [loop], inits=[trips]), _ELSE)


_SHADOWING = {"If": _shadowing_if, "Loop": _shadowing_loop, "If in Loop": _if_in_loop,
              "Loop in If": _loop_in_if}


@pytest.mark.parametrize("case", list(_SHADOWING))
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_body_initializer_named_like_the_main_input_converts(case, sign):
    """No '--input-shape names x' without --input-shape: the body's x shadows the main input
    there only; `sign` takes each If branch."""
    model = _SHADOWING[case]()
    assert not _checker_refuses(model)
    feeds = {"x": sign * np.array([[1, 2, 3, 4]], np.float32)}
    assert_matches_onnxruntime(model, feeds)


def test_input_shape_naming_an_initializer_still_says_it_is_not_a_model_input():
    from qconvert.errors import ConversionError

    model = _model([_add("x", "w")], [_info("x"), _info("w")], [_init("w")])
    with pytest.raises(ConversionError, match="--input-shape names 'w', which is not a model input"):
        convert_proto(model, input_shapes={"w": (1, 4)})
