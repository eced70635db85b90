"""Index ops against onnxruntime: Gather (qconvert/ops/gather.py) with constant, negative, scalar
and dynamic int64 indices, an embedding lookup and a Gather in NHWC after a Conv; GatherND and
GatherElements; ArgMax/ArgMin (argmax.py) with keepdims and select_last_index; and the importers of
load-time-folded ops (folded.py), which run only when the loader could not fold them."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.errors import ConversionError
from qconvert.ir import Model
from qconvert.onnx.import_context import ImportContext, OnnxNode
from qconvert.ops.registry import ONNX_IMPORTERS
from tests.harness import assert_matches_onnxruntime, make_model

RNG = np.random.default_rng(11)
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def floats(shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --- Gather ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,axis,indices", [
    ((5, 7), 0, [4, 0, 2, 2]),
    ((5, 7), 1, [[6, 0], [3, -1]]),
    ((5, 7), -1, -2),
    ((2, 3, 4, 5), 1, [2, -3]),
    ((2, 3, 4, 5), 3, [[0, 4, -1]]),
    ((2, 3, 4, 5), 2, 3),
], ids=str)
def test_gather_constant_indices(shape, axis, indices):
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
                       {"x": (FLOAT, shape)}, {"y": FLOAT}, {"i": np.array(indices, np.int64)})
    assert_matches_onnxruntime(model, {"x": floats(shape)})


@pytest.mark.parametrize("shape,axis,indices", [
    ((5, 7), 1, [[6, 0, -7], [3, -1, 2]]),
    ((2, 3, 4, 5), 2, [-4, 3, 0, -1]),
    ((2, 3, 4, 5), 0, -1),
], ids=str)
def test_gather_dynamic_int64_indices(shape, axis, indices):
    """Indices are an int64 graph input (narrowed), negatives fixed up by ops."""
    indices = np.array(indices, np.int64)
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
                       {"x": (FLOAT, shape), "i": (INT64, indices.shape)}, {"y": FLOAT})
    assert_matches_onnxruntime(model, {"x": floats(shape), "i": indices})


def test_embedding_lookup():
    """A constant table read with int64 token ids from the graph input."""
    table = floats((50, 8))
    ids = np.array([[3, 49, 0, 7, 7], [1, 2, 48, 10, 0]], np.int64)
    model = make_model([helper.make_node("Gather", ["table", "ids"], ["y"])],
                       {"ids": (INT64, ids.shape)}, {"y": FLOAT}, {"table": table})
    _, report = assert_matches_onnxruntime(model, {"ids": ids})
    assert report.op_counts.get("GATHER") == 1


def test_gather_of_int64_data():
    data = RNG.integers(-100, 100, (4, 6)).astype(np.int64)
    model = make_model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
                       {"x": (INT64, data.shape)}, {"y": INT64}, {"i": np.array([5, -6, 2], np.int64)})
    assert_matches_onnxruntime(model, {"x": data})


@pytest.mark.parametrize("indices", [[3, 0, 1], 2], ids=str)
def test_gather_channels_after_conv_runs_in_nhwc(indices):
    """Channel selection between two convs: the layout pass remaps the axis, no transposes stay."""
    w1, w2 = floats((4, 3, 3, 3)), floats((2, 3, 1, 1))
    scalar = np.ndim(indices) == 0
    nodes = [helper.make_node("Conv", ["x", "w1"], ["t"], pads=[1, 1, 1, 1]),
             helper.make_node("Gather", ["t", "i"], ["g"], axis=1)]
    if scalar:  # [N, H, W]: add the channel back for the second conv
        nodes.append(helper.make_node("Unsqueeze", ["g", "ax"], ["u"]))
        w2 = floats((2, 1, 1, 1))
    nodes.append(helper.make_node("Conv", ["u" if scalar else "g", "w2"], ["y"]))
    inits = {"w1": w1, "w2": w2, "i": np.array(indices, np.int64), "ax": np.array([1], np.int64)}
    model = make_model(nodes, {"x": (FLOAT, (2, 3, 5, 6))}, {"y": FLOAT}, inits)
    _, report = assert_matches_onnxruntime(model, {"x": floats((2, 3, 5, 6))})
    if not scalar:
        assert report.transposes == 0


@pytest.mark.parametrize("dynamic", [False, True])
def test_gather_nd(dynamic):
    x = floats((3, 4, 5))
    indices = np.array([[[0, -1], [2, 3]], [[1, 0], [-3, 2]]], np.int64)
    inputs, inits = {"x": (FLOAT, x.shape)}, {}
    if dynamic:
        inputs["i"] = (INT64, indices.shape)
    else:
        inits["i"] = indices
    model = make_model([helper.make_node("GatherND", ["x", "i"], ["y"])], inputs, {"y": FLOAT}, inits)
    assert_matches_onnxruntime(model, {"x": x, **({"i": indices} if dynamic else {})})


def test_gather_nd_batch_dims():
    x = floats((2, 4, 5))
    indices = np.array([[[1], [-1]], [[3], [0]]], np.int64)
    model = make_model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1)],
                       {"x": (FLOAT, x.shape), "i": (INT64, indices.shape)}, {"y": FLOAT})
    assert_matches_onnxruntime(model, {"x": x, "i": indices})


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis, dynamic):
    x = floats((3, 4, 5))
    shape = list(x.shape)
    shape[axis] = 2
    dim = x.shape[axis]
    indices = RNG.integers(-dim, dim, shape).astype(np.int64)
    inputs, inits = {"x": (FLOAT, x.shape)}, {}
    if dynamic:
        inputs["i"] = (INT64, indices.shape)
    else:
        inits["i"] = indices
    model = make_model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
                       inputs, {"y": FLOAT}, inits)
    assert_matches_onnxruntime(model, {"x": x, **({"i": indices} if dynamic else {})})


# --- ArgMax / ArgMin ---------------------------------------------------------------------------
def ties(shape):
    """Small integers as floats: many ties, so first vs last index matters."""
    return RNG.integers(0, 3, shape).astype(np.float32)


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("shape,axis", [((5, 7), 0), ((5, 7), -1), ((2, 3, 4, 5), 1), ((2, 3, 4, 5), 3)],
                         ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("last", [0, 1])
def test_argmax(op_type, shape, axis, keepdims, last):
    model = make_model([helper.make_node(op_type, ["x"], ["y"], axis=axis, keepdims=keepdims,
                                         select_last_index=last)],
                       {"x": (FLOAT, shape)}, {"y": INT64})
    assert_matches_onnxruntime(model, {"x": ties(shape)})


def test_argmax_of_int64():
    x = RNG.integers(-5, 5, (4, 6)).astype(np.int64)
    model = make_model([helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0)],
                       {"x": (INT64, x.shape)}, {"y": INT64})
    assert_matches_onnxruntime(model, {"x": x})


def test_argmax_over_channels_after_conv_runs_in_nhwc():
    """Per-pixel class (segmentation head): ARG_MAX works on the NHWC conv output directly."""
    model = make_model([helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]),
                        helper.make_node("ArgMax", ["t"], ["y"], axis=1, keepdims=0)],
                       {"x": (FLOAT, (2, 3, 5, 6))}, {"y": INT64}, {"w": floats((4, 3, 3, 3))})
    _, report = assert_matches_onnxruntime(model, {"x": floats((2, 3, 5, 6))}, io_layout="onnx")
    assert report.transposes == 1  # only the input's NCHW -> NHWC


# --- load-time-folded ops ------------------------------------------------------------------------
class BareContext(ImportContext):
    """An ImportContext over a hand-made IR, without a loaded ONNX graph behind it."""

    def __init__(self, model):
        self.model, self.opset, self.node = model, 13, None


def run_importer(op_type, inputs, outputs, attrs=None):
    """Runs one importer on a hand-made IR (inputs/outputs: {name: (shape, dtype)})."""
    model = Model()
    for name, (shape, dtype) in {**inputs, **outputs}.items():
        model.add_array(name, shape, dtype)
    ctx = BareContext(model)
    ctx.node = OnnxNode("n", op_type, list(inputs), list(outputs), attrs or {})
    ONNX_IMPORTERS[op_type](ctx.node, ctx)
    return model


def test_shape_size_eye_like_of_an_activation_become_constants():
    x = {"x": ((2, 3, 4), np.float32)}
    model = run_importer("Shape", x, {"s": ((2,), np.int32)}, {"start": 1})
    np.testing.assert_array_equal(model.arrays["s"].data, [3, 4])
    model = run_importer("Size", x, {"n": ((), np.int32)})
    assert int(model.arrays["n"].data) == 24
    model = run_importer("EyeLike", {"x": ((3, 4), np.float32)}, {"e": ((3, 4), np.float32)}, {"k": 1})
    np.testing.assert_array_equal(model.arrays["e"].data, np.eye(3, 4, k=1))
    assert not model.operators


def test_a_constant_of_a_computed_shape_is_refused():
    """(A Range of computed operands converts: tests/ops/test_folded.py.)"""
    with pytest.raises(ConversionError, match="computed at run time, so its output.s shape follows"):
        run_importer("ConstantOfShape", {"a": ((2,), np.int32)}, {"y": ((4,), np.int32)})
