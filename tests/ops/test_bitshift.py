"""BitShift (qconvert/ops/elementwise.py) against onnxruntime and onnx's reference (signed
types, which onnxruntime does not run): uint8 and uint16, int8 to int64 (all computed as int32
inside the graph), both directions, run-time and constant shift amounts up to and beyond the
width and negative ones, overflow, broadcasting, a left shift read by another shift (its wrap must
happen inside the graph, not only at the output's CAST), a Cast to the type in front, and the
refusals."""

import numpy as np
import pytest
from onnx import TensorProto as T, helper

from tests.harness import (assert_matches_onnxruntime, assert_refused_in_one_line, convert_proto,
                           make_model, run_tflite)

RNG = np.random.default_rng(4)
TYPES = {T.UINT8: np.uint8, T.UINT16: np.uint16}
SHIFTS = np.array([0, 1, 3, 7, 8, 9, 15, 16, 17, 31], np.int64)


def values(dtype, shape):
    return RNG.integers(0, np.iinfo(dtype).max + 1, shape).astype(dtype)


@pytest.mark.parametrize("elem_type", TYPES)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_runtime_shift(elem_type, direction):
    dtype = TYPES[elem_type]
    model = make_model([helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)],
                       {"x": (elem_type, (4, 10)), "s": (elem_type, (10,))}, {"y": elem_type}, opset=11)
    assert_matches_onnxruntime(model, {"x": values(dtype, (4, 10)), "s": SHIFTS.astype(dtype)},
                               rtol=0, atol=0)


@pytest.mark.parametrize("elem_type", TYPES)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_constant_shift_read_by_another_shift(elem_type, direction):
    """x << s >> 1 (or x >> s << 1): the inner result wraps at the width before the outer reads it."""
    dtype = TYPES[elem_type]
    other = "RIGHT" if direction == "LEFT" else "LEFT"
    model = make_model([helper.make_node("BitShift", ["x", "s"], ["t"], direction=direction),
                        helper.make_node("BitShift", ["t", "one"], ["y"], direction=other)],
                       {"x": (elem_type, (3, 10))}, {"y": elem_type},
                       {"s": SHIFTS.astype(dtype), "one": np.array(1, dtype)}, opset=11)
    assert_matches_onnxruntime(model, {"x": values(dtype, (3, 10))}, rtol=0, atol=0)


def test_shift_of_a_cast():
    """int32 data Cast to uint8 (wrapping) and shifted left by a run-time amount."""
    model = make_model([helper.make_node("Cast", ["x"], ["u"], to=T.UINT8),
                        helper.make_node("Cast", ["k"], ["s"], to=T.UINT8),
                        helper.make_node("BitShift", ["u", "s"], ["y"], direction="LEFT")],
                       {"x": (T.INT32, (2, 10)), "k": (T.INT32, (2, 10))}, {"y": T.UINT8}, opset=13)
    feeds = {"x": RNG.integers(-1000, 1000, (2, 10)).astype(np.int32),
             "k": RNG.integers(0, 9, (2, 10)).astype(np.int32)}
    assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


def test_left_shift_of_unknown_width_is_refused():
    """Two run-time shifts of a left shift's result: its width shows nowhere inside the graph."""
    model = make_model([helper.make_node("BitShift", ["x", "s"], ["t"], direction="RIGHT"),
                        helper.make_node("BitShift", ["t", "t"], ["y"], direction="LEFT", name="twice")],
                       {"x": (T.UINT8, (4,)), "s": (T.UINT8, (4,))}, {"y": T.UINT8}, opset=11)
    assert_refused_in_one_line(model, "integer type of 't'", node="twice")


def test_uint32_is_refused():
    model = make_model([helper.make_node("BitShift", ["x", "s"], ["y"], direction="LEFT")],
                       {"x": (T.UINT32, (4,)), "s": (T.UINT32, (4,))}, {"y": T.UINT32}, opset=11)
    assert_refused_in_one_line(model, "uint32")


SIGNED = {T.INT8: np.int8, T.INT16: np.int16, T.INT32: np.int32, T.INT64: np.int64}


def reference_shift(x, s, direction):
    """onnx's reference BitShift (the opset-26 semantics for signed types and out-of-range amounts)."""
    from onnx.reference import ReferenceEvaluator

    et = helper.np_dtype_to_tensor_dtype(x.dtype)
    model = make_model([helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)],
                       {"x": (et, x.shape), "s": (et, s.shape)}, {"y": et}, opset=28)
    return ReferenceEvaluator(model).run(None, {"x": x, "s": s})[0]


@pytest.mark.parametrize("elem_type", SIGNED)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("constant", [False, True])
def test_signed(elem_type, direction, constant):
    """Opset 28's BitShift against onnx's reference (onnxruntime runs opset 28 models not yet)."""
    dtype = SIGNED[elem_type]
    info = np.iinfo(dtype if dtype != np.int64 else np.int32)  # int64 values must fit int32 inside
    x = RNG.integers(info.min, info.max, (3, 12), endpoint=True).astype(dtype)
    x[0, :4] = [info.min, info.max, -1, 0]
    s = np.array([-40, -1, 0, 1, 2, 5, 7, 8, 15, 16, 31, 33], dtype)
    inputs = {"x": (elem_type, x.shape)} if constant else {"x": (elem_type, x.shape), "s": (elem_type, s.shape)}
    model = make_model([helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)], inputs,
                       {"y": elem_type}, {"s": s} if constant else {}, opset=28)
    model.ir_version = 14  # opset 28: signed types, out-of-range amounts defined
    flatbuffer, report = convert_proto(model)
    got = run_tflite(flatbuffer, report, {"x": x} if constant else {"x": x, "s": s})["y"]
    want = reference_shift(x, s, direction)
    if dtype == np.int64:  # the result as int32 computes it
        want = reference_shift(x.astype(np.int32), s.astype(np.int32), direction).astype(np.int64)
    np.testing.assert_array_equal(got, want)
