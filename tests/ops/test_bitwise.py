"""BitwiseAnd, BitwiseOr, BitwiseXor and BitwiseNot (qconvert/ops/elementwise.py) against
onnxruntime: every integer type qconvert computes (int8 to int64, uint8 and uint16, all int32
inside the graph) over its whole range, the extremes included, run-time and constant operands,
broadcasting, and the refusal of a complement whose type does not show."""

import numpy as np
import pytest
from onnx import TensorProto as T, helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line, make_model

RNG = np.random.default_rng(8)
TYPES = {T.INT8: np.int8, T.UINT8: np.uint8, T.INT16: np.int16, T.UINT16: np.uint16,
         T.INT32: np.int32, T.INT64: np.int64}


def values(dtype, shape):
    info = np.iinfo(dtype if dtype != np.int64 else np.int32)  # int64 values must fit int32 inside
    x = RNG.integers(info.min, info.max, shape, endpoint=True)
    x.reshape(-1)[:4] = [info.min, info.max, 0, -1 if info.min < 0 else 1]
    return x.astype(dtype)


@pytest.mark.parametrize("elem_type", TYPES)
@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("constant", [False, True])
def test_binary(op_type, elem_type, constant):
    dtype = TYPES[elem_type]
    a, b = values(dtype, (4, 16)), values(dtype, (16,))
    b[:3] = a[0, :3][::-1]
    inputs = {"a": (elem_type, a.shape)}
    if not constant:
        inputs["b"] = (elem_type, b.shape)
    model = make_model([helper.make_node(op_type, ["a", "b"], ["y"])], inputs, {"y": elem_type},
                       {"b": b} if constant else {}, opset=18)
    assert_matches_onnxruntime(model, {"a": a} if constant else {"a": a, "b": b}, rtol=0, atol=0)


@pytest.mark.parametrize("elem_type", TYPES)
def test_not(elem_type):
    dtype = TYPES[elem_type]
    model = make_model([helper.make_node("BitwiseNot", ["a"], ["y"])], {"a": (elem_type, (3, 16))},
                       {"y": elem_type}, opset=18)
    assert_matches_onnxruntime(model, {"a": values(dtype, (3, 16))}, rtol=0, atol=0)


def test_not_of_an_unknown_type_is_refused():
    model = make_model([helper.make_node("BitwiseXor", ["a", "b"], ["t"]),
                        helper.make_node("BitwiseNot", ["t"], ["y"], name="complement")],
                       {"a": (T.UINT8, (4,)), "b": (T.UINT8, (4,))}, {"y": T.UINT8}, opset=18)
    assert_refused_in_one_line(model, "integer type of 't'", node="complement")
