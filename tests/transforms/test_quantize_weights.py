"""quantize_weights (quantize phase): the constant weights of a quantized CONV_2D,
DEPTHWISE_CONV_2D, TRANSPOSE_CONV or FULLY_CONNECTED become symmetric int8 (zero point 0, narrow
range [-127, 127]) with one scale per output channel (along the op's weight axis: 3 for a
depthwise), or one scale for a FULLY_CONNECTED with --per-tensor-fc; weights shared by two ops
are copied so that each owns its params; NaN or Inf weights are refused.

Shown here, with the step alone on hand-quantized IR: the int8 values and scales of a
FULLY_CONNECTED's weights, per channel and per tensor, worked out by hand; a depthwise's scales
along axis 3; shared weights copied; NaN refused. End to end, a depthwise Conv (group = channels)
on weights built on a per-channel int8 grid is written with exactly those integers (in the
file's [1, kh, kw, C] layout), quantized dimension 3 and the grid's steps as scales, and the file
matches onnxruntime within 2 output steps."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.errors import ConversionError
from qconvert.ir import QuantParams
from qconvert.tflite.reader import buffer_data, read
from qconvert.transforms.engine import run_once
from qconvert.transforms.quantize_weights import quantize_weights
from tests.harness import assert_int8_matches_onnxruntime, conv_in_front, grid_weights, make_model
from tests.transforms.builders import Builder

F = TensorProto.FLOAT
W = np.array([[0.5, -1.27, 0.0], [2.54, 1.0, -0.02]], np.float32)


def quantized_op(op_type, weights, x_shape, y_shape, readers=1):
    b = Builder().input("x", x_shape, np.int8).const("w", weights)
    b.model.arrays["x"].quant = QuantParams(np.array([0.01], np.float32), np.array([0], np.int64))
    for k in range(readers):
        b.op(op_type, ["x", "w", ""], f"y{k}", y_shape, np.int8).output(f"y{k}")
        b.model.operators[k].quantized = "int8"
    return b.model


def run(model, per_tensor_fc=False):
    run_once(model, [("quantize_weights", lambda m: quantize_weights(m, per_tensor_fc=per_tensor_fc))])


def weights_of(model, k=0):
    return model.arrays[model.operators[k].inputs[1]]


def test_fully_connected_weights_per_channel():
    model = quantized_op("FULLY_CONNECTED", W, (1, 3), (1, 2))
    run(model)
    w = weights_of(model)
    assert w.dtype == np.int8 and w.narrow_range
    assert w.data.tolist() == [[50, -127, 0], [127, 50, -1]]  # steps 1.27 / 127 and 2.54 / 127
    np.testing.assert_allclose(w.quant.scale, [0.01, 0.02], rtol=1e-6)
    assert w.quant.zero_point.tolist() == [0, 0] and w.quant.axis == 0


def test_fully_connected_weights_per_tensor():
    weights = W.copy()
    weights[0, 1] = -1.2
    model = quantized_op("FULLY_CONNECTED", weights, (1, 3), (1, 2))
    run(model, per_tensor_fc=True)
    w = weights_of(model)
    assert w.data.tolist() == [[25, -60, 0], [127, 50, -1]]  # one step, 2.54 / 127
    np.testing.assert_allclose(w.quant.scale, [0.02], rtol=1e-6)
    assert w.quant.axis is None


def test_depthwise_weights_have_one_scale_per_channel_along_axis_3():
    weights = np.stack([W[0], W[1]], axis=-1).reshape(1, 1, 3, 2)  # [1, kh, kw, C]
    model = quantized_op("DEPTHWISE_CONV_2D", weights, (1, 1, 3, 2), (1, 1, 1, 2))
    run(model)
    w = weights_of(model)
    assert w.quant.axis == 3 and w.data[0, 0, :, 0].tolist() == [50, -127, 0]
    np.testing.assert_allclose(w.quant.scale, [0.01, 0.02], rtol=1e-6)


def test_shared_weights_are_copied_for_each_op():
    model = quantized_op("FULLY_CONNECTED", W, (1, 3), (1, 2), readers=2)
    run(model)
    first, second = weights_of(model, 0), weights_of(model, 1)
    assert first is not second and first.name != second.name and "w" not in model.arrays
    assert first.dtype == second.dtype == np.int8
    np.testing.assert_array_equal(first.data, second.data)


def test_nan_weights_are_refused():
    weights = W.copy()
    weights[1, 2] = np.nan
    with pytest.raises(ConversionError, match="weights 'w' of FULLY_CONNECTED.*hold NaN"):
        run(quantized_op("FULLY_CONNECTED", weights, (1, 3), (1, 2)))


def test_onnx_depthwise_weights_are_the_grid_integers_per_channel(tmp_path):
    weights = grid_weights((4, 1, 3, 3), seed=5)
    steps = np.abs(weights).reshape(4, -1).max(axis=1) / 127  # every channel of the grid reaches 127
    node, w = conv_in_front((1, 3, 6, 6), 4)
    model = make_model([node, helper.make_node("Conv", ["fm", "dw"], ["y"], group=4, pads=[1, 1, 1, 1])],
                       {"x": (F, (1, 3, 6, 6))}, {"y": F}, {"dw": weights})
    model.graph.initializer.append(w)
    # TOCO's arithmetic: round to nearest, the channels as they are (equalization would rescale them).
    flatbuffer, _ = assert_int8_matches_onnxruntime(model, tmp_path, round_for_output=False, equalize=False)
    summary = read(flatbuffer)
    conv = next(op for op in summary.operators if op.name == "DEPTHWISE_CONV_2D")
    stored = summary.tensors[conv.inputs[1]]
    assert stored.dtype == "INT8" and stored.quantized_dimension == 3 and stored.zero_points == [0] * 4
    np.testing.assert_allclose(stored.scales, steps, rtol=1e-6)
    integers = np.round(weights / steps.reshape(4, 1, 1, 1)).transpose(1, 2, 3, 0)  # [1, 3, 3, 4]
    values = np.frombuffer(bytes(buffer_data(flatbuffer, stored.buffer)), np.int8).reshape(1, 3, 3, 4)
    np.testing.assert_array_equal(values, integers)
