"""ScatterND, ScatterElements and Scatter (qconvert/ops/scatter.py) against onnxruntime: every
reduction with constant and run-time indices, negative indices, slices (indices shorter than the
data's rank), int data, infinities kept exact by the select; an int8 model around it; one-line
refusals of what SCATTER_ND cannot express."""

import functools

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.tflite import reader
from tests.harness import (
    assert_refused_in_one_line,
    assert_matches_onnxruntime,
    calibration_set,
    convert_proto,
    convert_quantized,
    make_model,
    run_onnxruntime,
    run_tflite,
)

RNG = np.random.default_rng(3)
F, I32, I64, B = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
ELEM = {np.dtype(np.float32): F, np.dtype(np.int32): I32, np.dtype(np.int64): I64}
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def scatter_model(op_type, data, indices, updates, dynamic, opset=18, name="scatter", **attrs):
    """op_type(data, indices, updates) with data and updates graph inputs; indices a graph input
    when `dynamic`, else a constant."""
    inputs = {"d": (ELEM[data.dtype], data.shape), "u": (ELEM[updates.dtype], updates.shape)}
    inits = {}
    if dynamic:
        inputs["i"] = (I64, indices.shape)
    else:
        inits["i"] = indices
    node = helper.make_node(op_type, ["d", "i", "u"], ["y"], name=name, **attrs)
    return make_model([node], inputs, {"y": ELEM[data.dtype]}, inits, opset=opset)


def feeds_of(data, indices, updates, dynamic):
    return {"d": data, "u": updates, **({"i": indices} if dynamic else {})}


def check(op_type, data, indices, updates, dynamic, **attrs):
    model = scatter_model(op_type, data, indices, updates, dynamic, **attrs)
    return assert_matches_onnxruntime(model, feeds_of(data, indices, updates, dynamic), rtol=1e-6, atol=0)


def floats(shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --- ScatterND ------------------------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_slices(reduction, dynamic):
    """Indices of depth 1 into [4, 3, 5]: whole [3, 5] slices, one of them negative."""
    data, updates = floats((4, 3, 5)), floats((2, 3, 5))
    indices = np.array([[2], [-4]], np.int64)
    check("ScatterND", data, indices, updates, dynamic, reduction=reduction)


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_elements(reduction, dynamic):
    """Full coordinates into [3, 4], batched [2, 2] (indices [2, 2, 2]), one negative."""
    data, updates = floats((3, 4)), floats((2, 2))
    indices = np.array([[[0, 1], [2, -1]], [[1, 0], [-3, 2]]], np.int64)
    check("ScatterND", data, indices, updates, dynamic, reduction=reduction)


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_nd_duplicates_combine_as_onnx(reduction, dynamic):
    """A position named three times: every update combines into it, as onnxruntime does."""
    data, updates = floats((5, 2)), floats((4, 2))
    indices = np.array([[1], [3], [1], [1]], np.int64)
    check("ScatterND", data, indices, updates, dynamic, reduction=reduction)


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_nd_int_data(reduction, dynamic):
    data = RNG.integers(-50, 50, (4, 3)).astype(np.int64)
    updates = RNG.integers(-9, 9, (2, 3)).astype(np.int64)
    check("ScatterND", data, np.array([[3], [0]], np.int64), updates, dynamic, reduction=reduction)


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
def test_scatter_nd_keeps_infinities_and_nan(dynamic):
    """SELECT_V2 keeps untouched values bit for bit (a multiply by a 0/1 mask would not)."""
    data = np.array([[np.inf, -np.inf], [np.nan, 1.0], [2.0, -np.inf]], np.float32)
    updates = np.array([[5.0, 6.0]], np.float32)
    model = scatter_model("ScatterND", data, np.array([[1]], np.int64), updates, dynamic)
    feeds = feeds_of(data, np.array([[1]], np.int64), updates, dynamic)
    flatbuffer, report = convert_proto(model)
    np.testing.assert_array_equal(run_tflite(flatbuffer, report, feeds)["y"],
                                  run_onnxruntime(model, feeds)["y"])


def test_scatter_nd_written_ops():
    data, updates = floats((4, 3)), floats((1, 3))
    flatbuffer, _ = check("ScatterND", data, np.array([[2]], np.int64), updates, False)
    assert {"SCATTER_ND": 1, "SELECT_V2": 1} == {k: v for k, v in reader.read(flatbuffer).op_counts.items()
                                                 if k in ("SCATTER_ND", "SELECT_V2")}


# --- ScatterElements / Scatter ---------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_scatter_elements(axis, reduction, dynamic):
    data = floats((3, 4, 5))
    shape = [2, 3, 4]
    dim = data.shape[axis]
    shape[axis] = 2
    if reduction == "none":  # distinct positions along the axis for each line
        lines = shape[:axis % 3] + shape[axis % 3 + 1:]
        indices = np.moveaxis(np.broadcast_to(np.array([-1, 0]), lines + [2]), -1, axis % 3).astype(np.int64)
    else:
        indices = RNG.integers(-dim, dim, shape).astype(np.int64)
    updates = floats(shape)
    check("ScatterElements", data, indices, updates, dynamic, axis=axis, reduction=reduction)


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
def test_scatter_elements_rank_1(dynamic):
    data, updates = floats((6,)), floats((3,))
    check("ScatterElements", data, np.array([4, -6, 2], np.int64), updates, dynamic)


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
def test_scatter_opset_10(dynamic):
    """The deprecated Scatter is ScatterElements without a reduction."""
    data, updates = floats((3, 3)), floats((2, 3))
    indices = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    check("Scatter", data, indices, updates, dynamic, opset=10, axis=0)


def test_int8_model_keeps_scatter_float(tmp_path):
    """SCATTER_ND has no QuantRule: under --quantize the scatter runs float between int8 ops."""
    w = RNG.standard_normal((6, 5)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                        helper.make_node("ScatterND", ["h", "i", "u"], ["y"])],
                       {"x": (F, (4, 6)), "u": (F, (1, 5))}, {"y": F},
                       {"w": w, "i": np.array([[2]], np.int64)}, opset=16)
    calibration = calibration_set(model)
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    assert "SCATTER_ND" in [f.op for f in report.quantization.float_ops]
    feeds = {name: values[0] for name, values in calibration.items()}
    got, want = run_tflite(flatbuffer, report, feeds)["y"], run_onnxruntime(model, feeds)["y"]
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())


# --- refusals ---------------------------------------------------------------------------------
refused = functools.partial(assert_refused_in_one_line, node='scatter')


def test_duplicate_constant_indices_without_reduction_are_refused():
    model = scatter_model("ScatterND", floats((4, 2)), np.array([[1], [1]], np.int64), floats((2, 2)), False)
    refused(model, "name a position twice, which ONNX leaves undefined")


@pytest.mark.parametrize("op_type,indices", [("ScatterND", np.array([[4]], np.int64)),
                                             ("ScatterND", np.array([[-5]], np.int64)),
                                             ("ScatterElements", np.array([[0, 7]], np.int64))])
def test_constant_indices_out_of_range_are_refused(op_type, indices):
    data = floats((4, 5))
    updates = floats((1, 5)) if op_type == "ScatterND" else floats((1, 2))
    refused(scatter_model(op_type, data, indices, updates, False, axis=1) if op_type != "ScatterND"
            else scatter_model(op_type, data, indices, updates, False), "out of range for dimensions")


def test_bool_data_is_refused():
    model = make_model([helper.make_node("ScatterND", ["d", "i", "u"], ["y"], name="scatter")],
                       {"d": (B, (3, 2)), "u": (B, (1, 2))}, {"y": B}, {"i": np.array([[0]], np.int64)},
                       opset=16)
    refused(model, "SCATTER_ND writes float32 and int32 only")


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
@pytest.mark.parametrize("op_type,data_shape,indices,updates_shape,attrs,match", [
    ("ScatterND", (4, 5), [[1]], (1, 4), {}, r"updates have shape \[1, 4\], not \[1, 5\]"),
    ("ScatterND", (4, 5), [[1, 2, 3]], (1,), {}, "must end in a dimension between 1 and the data's rank 2"),
    ("ScatterND", (4, 5), [[1]], (1, 5), {"reduction": "foo"}, "reduction 'foo' is not one of"),
    ("ScatterElements", (4, 5), [[1, 2]] * 5, (5, 2), {"axis": 1}, "reach beyond data of shape"),
    ("ScatterElements", (4, 5), [1, 2], (2,), {}, "must have one shape, of the data's rank 2"),
], ids=["updates-shape", "indices-depth", "reduction", "beyond-data", "rank"])
def test_inconsistent_shapes_are_refused(op_type, data_shape, indices, updates_shape, attrs, match, dynamic):
    model = scatter_model(op_type, floats(data_shape), np.array(indices, np.int64), floats(updates_shape),
                          dynamic, **attrs)
    refused(model, match)


@pytest.mark.parametrize("dynamic", [False, True], ids=["constant", "dynamic"])
def test_scatter_nd_into_a_conv_output(dynamic):
    """Data a 4-D activation (NHWC inside the graph): channel 1 of batch 0 replaced."""
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    indices = np.array([[0, 1]], np.int64)
    inputs = {"x": (F, (1, 2, 4, 4)), "u": (F, (1, 4, 4))}
    inits = {"w": w}
    if dynamic:
        inputs["i"] = (I64, indices.shape)
    else:
        inits["i"] = indices
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                        helper.make_node("ScatterND", ["c", "i", "u"], ["y"])],
                       inputs, {"y": F}, inits, opset=16)
    feeds = {"x": floats((1, 2, 4, 4)), "u": floats((1, 4, 4)), **({"i": indices} if dynamic else {})}
    assert_matches_onnxruntime(model, feeds, rtol=1e-4, atol=1e-4)
