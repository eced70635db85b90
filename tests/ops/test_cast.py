"""Cast and CastLike (qconvert/ops/cast.py) against onnxruntime: float/int/bool in every direction on
2-D and 4-D inputs, float -> int truncation toward zero, int64 narrowing (a Cast between int32 and
int64 is no op at all inside the graph), and CAST's numpy twin used by constant folding."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qconvert.ir import Operator
from qconvert.ops.registry import TFLITE_OPS
from tests.harness import assert_int8_matches_onnxruntime, assert_matches_onnxruntime

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


# The dtypes a float model may have at its edges and computes in int32 or float32 inside.
EDGE = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8, TensorProto.INT16: np.int16,
        TensorProto.UINT16: np.uint16, TensorProto.FLOAT16: np.float16, BOOL: np.bool_}


def edge_values(dtype, shape):
    """Values spanning the type's range (both ends included)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.random(shape) > 0.5
    if dtype.kind == "f":
        return RNG.uniform(-60000, 60000, shape).astype(dtype)
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, int(info.max) + 1, shape).astype(dtype)
    x.flat[:2] = [info.min, info.max]
    return x


@pytest.mark.parametrize("elem_type", list(EDGE), ids=lambda t: TensorProto.DataType.Name(t))
def test_graph_input_of_every_dtype(elem_type):
    """An input of a small type read by a Cast to float: one CAST from the input's own type."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["f"], to=FLOAT), helper.make_node("Mul", ["f", "two"], ["y"])],
        "g", [helper.make_tensor_value_info("x", elem_type, [3, 5])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [helper.make_tensor("two", FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    _, report = assert_matches_onnxruntime(model, {"x": edge_values(EDGE[elem_type], (3, 5))},
                                           rtol=0, atol=0)
    assert report.op_counts == {"CAST": 1, "MUL": 1} and report.inputs[0].dtype == np.dtype(EDGE[elem_type]).name


@pytest.mark.parametrize("elem_type", list(EDGE), ids=lambda t: TensorProto.DataType.Name(t))
def test_graph_output_of_every_dtype(elem_type):
    """A float model's output Cast to a small type: values in the type's range compare exactly."""
    dtype = np.dtype(EDGE[elem_type])
    model = cast_model(FLOAT, elem_type, (4, 6))
    if dtype.kind == "i" or dtype.kind == "u":
        info = np.iinfo(dtype)
        x = RNG.uniform(float(info.min), float(info.max), (4, 6)).astype(np.float32)
    else:
        x = values(FLOAT, (4, 6)) * 1000
    _, report = assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)
    assert report.outputs[0].dtype == dtype.name


@pytest.mark.parametrize("elem_type", list(EDGE), ids=lambda t: TensorProto.DataType.Name(t))
def test_edge_dtype_through_an_integer_or_float_graph(elem_type):
    """An input of a small type used directly (no Cast): computed in int32 or float32 inside,
    returned in its own type."""
    dtype = np.dtype(EDGE[elem_type])
    op = "Not" if dtype.kind == "b" else "Neg" if dtype.kind in "fi" else "Identity"
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", elem_type, [2, 7])],
                              [helper.make_tensor_value_info("y", elem_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    x = edge_values(dtype, (2, 7))
    if dtype.kind == "i":
        x.flat[0] = 0  # Neg of the type's minimum overflows
    assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)


def test_cast_to_a_small_integer_wraps_like_onnx():
    """int32 -> uint8 -> int32: 300 is 44 and -1 is 255, as in onnxruntime (C's conversion)."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.UINT8),
         helper.make_node("Cast", ["b"], ["y"], to=INT32)], "g",
        [helper.make_tensor_value_info("x", INT32, [6])], [helper.make_tensor_value_info("y", INT32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    assert_matches_onnxruntime(model, {"x": np.array([300, -1, 0, 255, 256, 1000], np.int32)},
                               rtol=0, atol=0)


def uint8_image_model() -> onnx.ModelProto:
    """The common image model: uint8 NHWC, Transpose, Cast to float, scale, Conv."""
    rng = np.random.default_rng(2)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["image"], ["t"], perm=[0, 3, 1, 2]),
         helper.make_node("Cast", ["t"], ["f"], to=FLOAT),
         helper.make_node("Mul", ["f", "scale"], ["s"]),
         helper.make_node("Conv", ["s", "w"], ["y"], pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("image", TensorProto.UINT8, [1, 8, 8, 3])],
        [helper.make_tensor_value_info("y", FLOAT, None)],
        [helper.make_tensor("scale", FLOAT, [], [1 / 255]),
         helper.make_tensor("w", FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def test_uint8_nhwc_image_through_cast_to_a_convolution():
    assert_matches_onnxruntime(uint8_image_model(), {"image": edge_values(np.uint8, (1, 8, 8, 3))},
                               rtol=1e-5, atol=1e-5)


def test_uint8_image_model_quantizes(tmp_path):
    """--quantize: the uint8 input is a plain integer (no quantization params), read by the
    CASTs that stay float; the convolution runs int8."""
    model = uint8_image_model()
    rng = np.random.default_rng(4)
    calibration = {"image": rng.integers(0, 256, (8, 1, 8, 8, 3)).astype(np.uint8)}
    assert_int8_matches_onnxruntime(model, tmp_path, calibration, allow_float=("CAST",))
