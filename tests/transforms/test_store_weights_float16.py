"""store_weights_float16 (--float16): every float32 constant an op reads is stored as float16
(round to nearest even) and read through one DEQUANTIZE to float32, shared by its readers; one
with values beyond float16's range stays float32, except float32's own extremes (max-pool's
lowest-float padding), which become float16's infinities.

Shown here, with the step alone on IR: a constant read by two ops (one DEQUANTIZE, the stored
float16 values equal to the float32 ones, which are exact in float16), a constant of 1e5 left
float32, a lowest-float sentinel stored as -inf, an int32 constant left alone, ties rounded to
even. End to end (tests/quantize/test_weight_only.py covers op by op), a Conv -> padded MaxPool -> Add of 1e5
converts with --float16 to float16 conv weights and bias and a float16 -inf pad value, each
through a DEQUANTIZE, while the 1e5 stays float32 and is read directly; with weights exact in
float16 the file computes what onnxruntime computes to float32 rounding."""

import numpy as np
from onnx import TensorProto, helper

from qconvert.tflite.reader import buffer_data, read
from qconvert.transforms.engine import run_once
from qconvert.transforms.store_weights_float16 import store_weights_float16
from tests.harness import assert_matches_onnxruntime, grid_weights, make_model
from tests.transforms.builders import Builder, op_types

F = TensorProto.FLOAT
S = (2, 3)
LOWEST = np.finfo(np.float32).min


def run(model):
    run_once(model, [("store_weights_float16", store_weights_float16)])


def test_a_shared_constant_is_float16_behind_one_dequantize():
    c = np.array([[0.5, -1.25, 3.0], [1024.0, -0.125, 65504.0]], np.float32)  # exact in float16
    b = Builder().input("x", S).const("c", c)
    b.op("ADD", ["x", "c"], "a", S).op("MUL", ["a", "c"], "y", S).output("y")
    run(b.model)
    assert op_types(b.model) == ["DEQUANTIZE", "ADD", "MUL"]
    dequantized = b.model.operators[0].outputs[0]
    assert b.model.operators[0].inputs == ["c"] and b.model.operators[2].inputs == ["a", dequantized]
    assert b.model.arrays["c"].dtype == np.float16 and b.model.arrays["c"].data.tolist() == c.tolist()


def test_values_beyond_float16_stay_float32_but_float32_extremes_become_infinities():
    b = Builder().input("x", S).const("big", np.float32(1e5)).const("pad", np.array([LOWEST, 0.5], np.float32))
    b.const("shape", np.array([3, 2], np.int32))
    b.op("ADD", ["x", "big"], "a", S).op("RESHAPE", ["a", "shape"], "r", (3, 2))
    b.op("MAXIMUM", ["r", "pad"], "y", (3, 2)).output("y")
    run(b.model)
    assert op_types(b.model) == ["ADD", "RESHAPE", "DEQUANTIZE", "MAXIMUM"]
    assert b.model.arrays["big"].dtype == np.float32 and b.model.arrays["shape"].dtype == np.int32
    assert b.model.arrays["pad"].dtype == np.float16 and b.model.arrays["pad"].data.tolist() == [-np.inf, 0.5]


def test_values_round_to_the_nearest_even_float16():
    b = Builder().input("x", (2,)).const("c", np.array([2049.0, 2051.0], np.float32))
    b.op("ADD", ["x", "c"], "y", (2,)).output("y")
    run(b.model)
    assert b.model.arrays["c"].data.tolist() == [2048.0, 2052.0]  # float16 steps of 2 there: ties to even


def conv_pool_add():
    weights = grid_weights((4, 3, 3, 3)).astype(np.float16).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["p", "big"], ["y"])]
    return make_model(nodes, {"x": (F, (1, 3, 6, 6))}, {"y": F},
                      {"w": weights, "big": np.full((1, 4, 1, 1), 1e5, np.float32)})


def test_onnx_conv_pool_add_in_float16():
    flatbuffer, report = assert_matches_onnxruntime(conv_pool_add(), weights="float16", rtol=1e-6, atol=1e-5)
    summary = read(flatbuffer)
    assert summary.op_counts == {"DEQUANTIZE": 3, "CONV_2D": 1, "PADV2": 1, "MAX_POOL_2D": 1, "ADD": 1}
    dequantized = {op.outputs[0]: summary.tensors[op.inputs[0]] for op in summary.operators
                   if op.name == "DEQUANTIZE"}
    conv, pad, add = (next(op for op in summary.operators if op.name == n) for n in ("CONV_2D", "PADV2", "ADD"))
    assert [dequantized[i].dtype for i in conv.inputs[1:]] == ["FLOAT16", "FLOAT16"]
    pad_value = dequantized[pad.inputs[2]]
    assert pad_value.dtype == "FLOAT16"
    assert np.frombuffer(bytes(buffer_data(flatbuffer, pad_value.buffer)), np.float16).tolist() == [-np.inf]
    big = summary.tensors[add.inputs[1]]
    assert big.dtype == "FLOAT32" and add.inputs[1] not in dequantized and big.data_offset is not None


def test_a_constant_float16_would_flush_stays_float32():
    """An epsilon of 1e-12 is 0 in float16 (a LayerNorm would divide by zero): float32 stays; a
    tiny weight beside large ones only loses what float16's rounding loses, so its tensor goes."""
    b = Builder().input("x", S).const("eps", np.float32(1e-12))
    b.const("w", np.array([[0.5, 1e-9, 3.0], [1.0, -2.0, 0.25]], np.float32))
    b.op("ADD", ["x", "eps"], "a", S).op("MUL", ["a", "w"], "y", S).output("y")
    run(b.model)
    assert b.model.arrays["eps"].dtype == np.float32 and b.model.arrays["w"].dtype == np.float16


def test_layer_norm_of_a_constant_row_in_float16():
    """A row of equal values has variance 0: the epsilon must survive --float16 (no NaN)."""
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-12)]
    model = make_model(nodes, {"x": (F, (2, 8))}, {"y": F},
                       {"g": np.linspace(0.5, 2, 8).astype(np.float16).astype(np.float32),
                        "b": np.linspace(-1, 1, 8).astype(np.float16).astype(np.float32)}, opset=17)
    x = np.stack([np.full(8, 0.75), np.linspace(-2, 2, 8)]).astype(np.float32)
    assert_matches_onnxruntime(model, {"x": x}, weights="float16")
