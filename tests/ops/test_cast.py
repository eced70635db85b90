"""Cast and CastLike (qconvert/ops/cast.py) against onnxruntime: float/int/bool in every direction on
2-D and 4-D inputs, float -> int truncation toward zero, int64 narrowing (a Cast between int32 and
int64 is no op at all inside the graph), and CAST's numpy twin used by constant folding."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.ir import Operator
from qconvert.ops.registry import TFLITE_OPS
from tests.harness import assert_matches_onnxruntime

RNG = np.random.default_rng(5)
FLOAT, INT32, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
NP = {FLOAT: np.float32, INT32: np.int32, INT64: np.int64, BOOL: np.bool_}


def cast_model(from_type, to_type, shape, like=False):
    inputs = [helper.make_tensor_value_info("x", from_type, list(shape))]
    if like:
        inputs.append(helper.make_tensor_value_info("like", to_type, [1]))
        node = helper.make_node("CastLike", ["x", "like"], ["y"])
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=to_type)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", to_type, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def values(elem_type, shape):
    """Floats with fractions of both signs and exact zeros; ints spanning zero."""
    if elem_type == FLOAT:
        x = RNG.uniform(-6, 6, shape).astype(np.float32)
        x.flat[::5] = 0.0
        return x
    if elem_type == BOOL:
        return RNG.random(shape) > 0.5
    return RNG.integers(-9, 10, shape).astype(NP[elem_type])


TYPES = [FLOAT, INT32, INT64, BOOL]


@pytest.mark.parametrize("from_type", TYPES, ids=lambda t: TensorProto.DataType.Name(t))
@pytest.mark.parametrize("to_type", TYPES, ids=lambda t: TensorProto.DataType.Name(t))
@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 4, 5)], ids=str)
def test_cast(from_type, to_type, shape):
    model = cast_model(from_type, to_type, shape)
    assert_matches_onnxruntime(model, {"x": values(from_type, shape)}, rtol=0, atol=0)


@pytest.mark.parametrize("to_type", [FLOAT, INT64, BOOL], ids=lambda t: TensorProto.DataType.Name(t))
def test_cast_like(to_type):
    model = cast_model(FLOAT, to_type, (3, 5), like=True)
    feeds = {"x": values(FLOAT, (3, 5)), "like": np.zeros(1, NP[to_type])}
    assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


def test_float_to_int_truncates_toward_zero():
    x = np.array([[-2.9, -2.5, -1.5, -0.5, -0.0, 0.4, 0.5, 1.5, 2.5, 2.99, 1e6 + 0.5]], np.float32)
    _, report = assert_matches_onnxruntime(cast_model(FLOAT, INT32, x.shape), {"x": x}, rtol=0, atol=0)
    assert report.op_counts == {"CAST": 1}


def test_int32_to_int64_is_no_op_inside_the_graph():
    """int64 is int32 inside: the only CASTs left are the graph output's int32 -> int64."""
    _, report = assert_matches_onnxruntime(cast_model(INT32, INT64, (3, 4)),
                                           {"x": values(INT32, (3, 4))}, rtol=0, atol=0)
    assert report.op_counts == {"CAST": 1}


def test_evaluate_matches_the_kernel():
    """CAST's numpy twin truncates toward zero and saturates at the int32 range."""
    x = np.array([-2.7, -0.5, 0.5, 2.7, 3e9, -3e9, np.nan], np.float32)
    op = Operator("CAST", ["x"], ["y"], {"in_data_type": np.dtype(np.float32),
                                         "out_data_type": np.dtype(np.int32)})
    (y,) = TFLITE_OPS["CAST"].evaluate([x], op)
    assert y.dtype == np.int32
    limits = np.iinfo(np.int32)
    np.testing.assert_array_equal(y, [-2, 0, 0, 2, limits.max, limits.min, limits.max])
