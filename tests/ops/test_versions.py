"""Op versions in the written file equal what TensorFlow Lite's
tensorflow/lite/tools/versioning/op_version.cc computes for the op as written (never above, never
below), and every file loads and runs in ai-edge-litert's interpreter (a version beyond the
runtime's registrations fails at load) with onnxruntime's results.

Each case lists the expected version of every op type it cares about, derived by hand from
op_version.cc and op_signature.cc (the reason is in the comment); an op type missing from the
file fails the case too.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import convert
from qconvert.ir import Model, Operator, QuantParams
from qconvert.ops.registry import TFLITE_OPS
from qconvert.tflite import reader
from qconvert.tflite import schema_generated as S
from tests.harness import make_model, random_feeds, run_onnxruntime, run_tflite

F, I32, I64, B, F64 = (TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL,
                       TensorProto.DOUBLE)
RNG = np.random.default_rng(11)


def _model(nodes, inputs, outputs, inits=(), opset=13):
    """inputs: (name, elem type, shape); outputs: (name, elem type); inits: name -> array."""
    return make_model(nodes, {n: (t, s) for n, t, s in inputs}, dict(outputs), dict(inits), opset)


def _weights(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _unary(op_type, shape, dtype=F, out_dtype=None, opset=13, **attrs):
    return _model([helper.make_node(op_type, ["x"], ["y"], **attrs)], [("x", dtype, shape)],
                  [("y", out_dtype or dtype)], opset=opset)


def _binary(op_type, a_shape, b_shape, dtype=F):
    return _model([helper.make_node(op_type, ["a", "b"], ["y"])],
                  [("a", dtype, a_shape), ("b", dtype, b_shape)], [("y", dtype)])


def _conv(x_shape, w_shape, group=1, bias=False, relu=False, op_type="Conv", **attrs):
    inits = {"w": _weights(*w_shape)}
    names = ["x", "w"]
    if bias:
        channels = w_shape[0] if op_type == "Conv" else w_shape[1] * group
        inits["b"] = _weights(channels)
        names.append("b")
    nodes = [helper.make_node(op_type, names, ["t" if relu else "y"], group=group, **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    return _model(nodes, [("x", F, x_shape)], [("y", F)], inits)


def _resize(mode, coordinate_mode, sizes=None, **attrs):
    """Resize of [1, 3, 5, 7] by 2 (or to `sizes`)."""
    if sizes is None:
        names, inits = ["x", "", "scales"], {"scales": np.array([1, 1, 2, 2], np.float32)}
    else:
        names, inits = ["x", "", "", "sizes"], {"sizes": np.array(sizes, np.int64)}
    nodes = [helper.make_node("Resize", names, ["y"], mode=mode,
                              coordinate_transformation_mode=coordinate_mode, **attrs)]
    return _model(nodes, [("x", F, [1, 3, 5, 7])], [("y", F)], inits)


def _slice(shape, steps=None):
    rank = len(shape)
    inits = {"starts": np.zeros(rank, np.int64), "ends": np.array(shape, np.int64),
             "axes": np.arange(rank, dtype=np.int64)}
    names = ["x", "starts", "ends", "axes"]
    if steps is not None:
        inits["steps"] = np.array(steps, np.int64)
        names.append("steps")
    inits["ends"][-1] -= 1  # a real cut, so the slice is not removed
    return _model([helper.make_node("Slice", names, ["y"])], [("x", F, shape)], [("y", F)], inits)


def _channel_shuffle(groups=2, channels=6):
    """ShuffleNet's channel shuffle: Reshape [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4), back."""
    inits = {"s5": np.array([1, groups, channels // groups, 4, 4], np.int64),
             "s4": np.array([1, channels, 4, 4], np.int64)}
    nodes = [helper.make_node("Reshape", ["x", "s5"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s4"], ["y"])]
    return _model(nodes, [("x", F, [1, channels, 4, 4])], [("y", F)], inits)


def _split(dtype, shape=(4, 6)):
    nodes = [helper.make_node("Split", ["x"], ["y0", "y1"], axis=1)]
    return _model(nodes, [("x", dtype, list(shape))], [("y0", dtype), ("y1", dtype)])


def _concat(dtype):
    nodes = [helper.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    return _model(nodes, [("a", dtype, [2, 3]), ("b", dtype, [2, 4])], [("y", dtype)])


def _gather(data_dtype, indices_dtype, constant_indices=False):
    inputs = [("x", data_dtype, [5, 4])]
    inits = {}
    if constant_indices:
        inits["i"] = np.array([4, 0, 2], np.int64)
    else:
        inputs.append(("i", indices_dtype, [3]))
    return _model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], inputs,
                  [("y", data_dtype)], inits)


def _where(shape):
    nodes = [helper.make_node("Where", ["c", "a", "b"], ["y"])]
    return _model(nodes, [("c", B, shape), ("a", F, shape), ("b", F, [shape[-1]])], [("y", F)])


def _fully_connected(x_shape, bias=False):
    k = x_shape[-1]
    if bias:
        nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1)]
        inits = {"w": _weights(4, k), "c": _weights(4)}
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
        inits = {"w": _weights(k, 4)}
    return _model(nodes, [("x", F, x_shape)], [("y", F)], inits)


R5A, R5B = [1, 2, 3, 4, 5], [1, 1, 3, 1, 5]
CASES = {
    # FULLY_CONNECTED: qconvert writes a -1 bias, which counts in inputs.size() (3, not the "no
    # bias" v6); keep_num_dims is v5.
    "fc_without_bias": (_fully_connected([2, 8]), {"FULLY_CONNECTED": 1}),
    "fc_with_bias": (_fully_connected([2, 8], bias=True), {"FULLY_CONNECTED": 1}),
    "fc_keep_num_dims": (_fully_connected([2, 3, 8]), {"FULLY_CONNECTED": 5}),
    # CONV_2D float 1 (grouped convs are split, so never v6); DEPTHWISE_CONV_2D dilation 2.
    "conv": (_conv([1, 3, 6, 6], [4, 3, 3, 3], pads=[1, 1, 1, 1]), {"CONV_2D": 1}),
    "conv_grouped": (_conv([1, 4, 6, 6], [4, 2, 3, 3], group=2, pads=[1, 1, 1, 1]),
                     {"CONV_2D": 1, "SPLIT": 1, "CONCATENATION": 1}),
    "depthwise": (_conv([1, 3, 6, 6], [3, 1, 3, 3], group=3, pads=[1, 1, 1, 1]),
                  {"DEPTHWISE_CONV_2D": 1}),
    "depthwise_dilated": (_conv([1, 3, 8, 8], [3, 1, 3, 3], group=3, dilations=[2, 2],
                                pads=[2, 2, 2, 2]), {"DEPTHWISE_CONV_2D": 2}),
    # TRANSPOSE_CONV: 4 inputs with a real bias 3, a fused activation 4, otherwise 1.
    "transpose_conv": (_conv([1, 4, 5, 5], [4, 2, 4, 4], op_type="ConvTranspose", strides=[2, 2],
                             pads=[1, 1, 1, 1]), {"TRANSPOSE_CONV": 1}),
    "transpose_conv_bias": (_conv([1, 4, 5, 5], [4, 2, 4, 4], op_type="ConvTranspose", bias=True,
                                  strides=[2, 2], pads=[1, 1, 1, 1]), {"TRANSPOSE_CONV": 3}),
    "transpose_conv_relu": (_conv([1, 4, 5, 5], [4, 2, 4, 4], op_type="ConvTranspose", bias=True,
                                  relu=True, strides=[2, 2], pads=[1, 1, 1, 1]),
                            {"TRANSPOSE_CONV": 4}),
    # RESIZE_BILINEAR: half_pixel_centers 3, align_corners is not in its rule (1);
    # RESIZE_NEAREST_NEIGHBOR: either flag 3.
    "bilinear_half_pixel": (_resize("linear", "half_pixel"), {"RESIZE_BILINEAR": 3}),
    "bilinear_align_corners": (_resize("linear", "align_corners"), {"RESIZE_BILINEAR": 1}),
    "nearest_asymmetric": (_resize("nearest", "asymmetric", nearest_mode="floor"),
                           {"RESIZE_NEAREST_NEIGHBOR": 1}),
    "nearest_half_pixel": (_resize("nearest", "half_pixel", [1, 3, 8, 12]),
                           {"RESIZE_NEAREST_NEIGHBOR": 3}),
    # BROADCAST_TO: version 1 was withdrawn, so float and int32 are 2.
    "broadcast_to_float": (_model([helper.make_node("Expand", ["x", "s"], ["y"])],
                                  [("x", F, [2, 1, 3])], [("y", F)],
                                  {"s": np.array([2, 4, 3], np.int64)}), {"BROADCAST_TO": 2}),
    "broadcast_to_int32": (_model([helper.make_node("Expand", ["x", "s"], ["y"])],
                                  [("x", I32, [2, 1, 3])], [("y", I32)],
                                  {"s": np.array([2, 4, 3], np.int64)}), {"BROADCAST_TO": 2}),
    # CAST: int64 <-> int32 and float <-> int32 are 1; float64 <-> float32 is 5.
    "cast_int64_to_float": (_unary("Cast", [2, 3], I64, F, to=F), {"CAST": 1}),
    "cast_float_to_int64": (_unary("Cast", [2, 3], F, I64, to=I64), {"CAST": 1}),
    "cast_float64_io": (_unary("Relu", [2, 3], F64), {"CAST": 5, "RELU": 1}),
    # GATHER: int32 or int64 (narrowed) indices are 1, bool data 3; the negative-index fix-up is
    # LESS/ADD/SELECT_V2 on int32, all 1.
    "gather_int32_indices": (_gather(F, I32), {"GATHER": 1, "LESS": 1, "ADD": 1, "SELECT_V2": 1}),
    "gather_int64_indices": (_gather(F, I64), {"GATHER": 1, "CAST": 1, "SELECT_V2": 1}),
    "gather_bool": (_gather(B, None, constant_indices=True), {"GATHER": 3}),
    # SELECT_V2 has no rank rule (only uint32 is 2), unlike SELECT.
    "select_v2": (_where([2, 3]), {"SELECT_V2": 1}),
    "select_v2_rank5": (_where(R5A), {"SELECT_V2": 1}),
    # STRIDED_SLICE: rank > 4 is 4; SLICE: rank > 4 is 5.
    "strided_slice": (_slice([2, 3, 4, 6], steps=[1, 1, 1, 2]), {"STRIDED_SLICE": 1}),
    "strided_slice_rank5": (_slice(R5A, steps=[1, 1, 1, 1, 2]), {"STRIDED_SLICE": 4}),
    "slice_rank5": (_slice(R5A), {"SLICE": 5}),
    # TRANSPOSE: rank 5 is 4, rank 6 is 6, bool 3.
    "transpose_channel_shuffle": (_channel_shuffle(), {"TRANSPOSE": 4, "RESHAPE": 1}),
    "transpose_rank6": (_unary("Transpose", [1, 2, 3, 2, 2, 3], perm=[0, 5, 1, 4, 2, 3]),
                        {"TRANSPOSE": 6}),
    "transpose_bool": (_unary("Transpose", [2, 3, 4], B, perm=[2, 0, 1]), {"TRANSPOSE": 3}),
    # SPLIT reads input 1 (the data): int32 is 3 (int64 is narrowed to int32), float 1.
    "split_float": (_split(F), {"SPLIT": 1}),
    "split_int32": (_split(I32), {"SPLIT": 3}),
    "split_int64": (_split(I64), {"SPLIT": 3, "CAST": 1}),
    "split_v_int32": (_model([helper.make_node("Split", ["x", "sizes"], ["y0", "y1"], axis=1)],
                             [("x", I32, [4, 6])], [("y0", I32), ("y1", I32)],
                             {"sizes": np.array([2, 4], np.int64)}), {"SPLIT_V": 1}),
    # CONCATENATION: float and int32 are 1.
    "concat_float": (_concat(F), {"CONCATENATION": 1}),
    "concat_int32": (_concat(I32), {"CONCATENATION": 1}),
    # Binary ops: "broadcast" is dims(0) != dims(1), with a rank > 4 among the inputs.
    "sub_rank5_broadcast": (_binary("Sub", R5A, R5B), {"SUB": 3}),
    "sub_rank5_same_shape": (_binary("Sub", R5A, R5A), {"SUB": 1}),
    "sub_rank4_broadcast": (_binary("Sub", [2, 3, 4, 5], [5]), {"SUB": 1}),
    "sub_int32": (_binary("Sub", [2, 3], [3], I32), {"SUB": 1}),
    "max_rank5_broadcast": (_binary("Max", R5A, R5B), {"MAXIMUM": 3}),
    "min_rank5_broadcast": (_binary("Min", R5A, [5]), {"MINIMUM": 3}),
    "max_rank4_broadcast": (_binary("Max", [2, 3, 4, 5], [5]), {"MAXIMUM": 1}),
    "div_rank5_broadcast": (_binary("Div", R5A, R5B), {"DIV": 2}),
    "add_rank5_broadcast": (_binary("Add", R5A, R5B), {"ADD": 1}),  # ADD has no rank rule
    "mul_rank5_broadcast": (_binary("Mul", R5A, R5B), {"MUL": 1}),  # nor MUL
    "mul_int32": (_binary("Mul", [2, 3], [2, 3], I32), {"MUL": 1}),
    # ARG_MAX reads only the input type: float with ONNX's int64 output (int32 inside) is 1.
    "argmax_int64_output": (_unary("ArgMax", [3, 4], F, I64, axis=1, keepdims=0),
                            {"ARG_MAX": 1, "CAST": 1}),
    "argmin_int32_input": (_unary("ArgMin", [3, 4], I32, I64, axis=0, keepdims=1),
                           {"ARG_MIN": 1, "RESHAPE": 1}),
    # ABS on int32 is 5.
    "abs_int32": (_unary("Abs", [2, 3], I32), {"ABS": 5}),
    "abs_float": (_unary("Abs", [2, 3]), {"ABS": 1}),
    # PAD rank > 4 is 4.
    "pad_rank5": (_model([helper.make_node("Pad", ["x", "p"], ["y"])], [("x", F, [1, 2, 3, 2, 2])],
                         [("y", F)], {"p": np.array([0, 1, 0, 0, 1, 0, 1, 0, 1, 1], np.int64)}),
                  {"PAD": 4}),
    # Float activations, pools, softmax and reductions are 1.
    "float_unaries": (_model([helper.make_node("Sigmoid", ["x"], ["s"]),
                              helper.make_node("Tanh", ["s"], ["t"]),
                              helper.make_node("Softmax", ["t"], ["y"], axis=-1)],
                             [("x", F, [2, 3, 4, 5])], [("y", F)]),
                      {"LOGISTIC": 1, "TANH": 1, "SOFTMAX": 1}),
    "pools": (_model([helper.make_node("MaxPool", ["x"], ["m"], kernel_shape=[2, 2]),
                      helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 2])],
                     [("x", F, [1, 3, 6, 6])], [("y", F)]),
              {"MAX_POOL_2D": 1, "AVERAGE_POOL_2D": 1}),
    "reduce_mean_sum_max": (_model([helper.make_node("ReduceMean", ["x"], ["m"], axes=[1]),
                                    helper.make_node("ReduceSum", ["m", "ax"], ["s"]),
                                    helper.make_node("ReduceMax", ["s"], ["y"], axes=[0])],
                                   [("x", F, [2, 3, 4])], [("y", F)],
                                   {"ax": np.array([1], np.int64)}),
                            {"MEAN": 1, "SUM": 1, "REDUCE_MAX": 1}),
}


def _convert(model) -> bytes:
    flatbuffer, report = convert("<test>", data=model.SerializeToString())
    return bytes(flatbuffer), report


def _versions(flatbuffer: bytes) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for name, version in reader.read(flatbuffer).ops:
        found.setdefault(name, set()).add(version)
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_written_versions_follow_op_version_cc_and_load(case):
    model, expected = CASES[case]
    flatbuffer, report = _convert(model)
    found = _versions(flatbuffer)
    assert {op: found.get(op) for op in expected} == {op: {v} for op, v in expected.items()}, found
    # Loads (a version above the runtime's registrations fails here) and computes what ORT does.
    feeds = random_feeds(model, seed=5)
    want = run_onnxruntime(model, feeds)
    got = run_tflite(flatbuffer, report, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_fully_connected_bias_slot_is_written_as_minus_one():
    """The premise of fc_without_bias: the file's FULLY_CONNECTED has 3 inputs, the last -1."""
    flatbuffer, _ = _convert(CASES["fc_without_bias"][0])
    model = S.Model.GetRootAs(flatbuffer, 0)
    graph = model.Subgraphs(0)
    (op,) = [graph.Operators(i) for i in range(graph.OperatorsLength())]
    assert list(op.InputsAsNumpy())[2:] == [-1]
    assert _versions(flatbuffer) == {"FULLY_CONNECTED": {1}}


# --- branches float conversion does not reach: the version functions on hand-built IR ops -------
def _ir_op(op_type, inputs, outputs, options=None, fused="NONE", quant=()):
    """An IR op over fresh arrays; inputs/outputs are (dtype, shape) or "" (omitted); `quant`
    names the input indices whose arrays get a QuantParams (scale count = the shape's dim 0)."""
    model = Model()

    def array(spec, k):
        return "" if spec == "" else model.add_array(f"t{k}", spec[1], spec[0])

    names = [array(spec, k) for k, spec in enumerate(inputs)]
    for index, count in dict(quant).items():
        model.arrays[names[index]].quant = QuantParams(np.ones(count, np.float32),
                                                       np.zeros(count, np.int64), 0)
    outs = [array(spec, 100 + k) for k, spec in enumerate(outputs)]
    return Operator(op_type, names, outs, dict(options or {}), fused), model


f32, i8, i16, i32, i64, u8 = np.float32, np.int8, np.int16, np.int32, np.int64, np.uint8
X4 = (1, 4, 4, 8)
IR_CASES = [
    # (op, inputs, outputs, options, fused, quant, op_version.cc's answer)
    # CONCATENATION reads input 0, and uint8 has no rule.
    ("CONCATENATION", [(u8, (2,)), (u8, (2,))], [(u8, (4,))], {}, "NONE", (), 1),
    ("CONCATENATION", [(i16, (2,)), (i16, (2,))], [(i16, (4,))], {}, "NONE", (), 3),
    ("SPLIT", [(i32, ()), (i16, (4,))], [(i16, (2,)), (i16, (2,))], {}, "NONE", (), 4),
    ("MEAN", [(u8, (2, 3)), (i32, (1,))], [(u8, (2,))], {}, "NONE", (), 1),
    ("MEAN", [(i16, (2, 3)), (i32, (1,))], [(i16, (2,))], {}, "NONE", (), 3),
    ("SUM", [(i16, (2, 3)), (i32, (1,))], [(i16, (2,))], {}, "NONE", (), 1),
    ("REDUCE_PROD", [(i16, (2, 3)), (i32, (1,))], [(i16, (2,))], {}, "NONE", (), 2),
    ("TRANSPOSE", [(i16, (2, 3)), (i32, (2,))], [(i16, (3, 2))], {}, "NONE", (), 5),
    ("TRANSPOSE", [(i8, (2, 3)), (i32, (2,))], [(i8, (3, 2))], {}, "NONE", (), 2),
    ("RELU", [(i8, X4)], [(i8, X4)], {}, "NONE", (), 2),
    ("LOGISTIC", [(i16, X4)], [(i16, X4)], {}, "NONE", (), 3),
    ("MAX_POOL_2D", [(i8, X4)], [(i8, X4)], {}, "NONE", (), 2),
    ("SOFTMAX", [(i16, X4)], [(i16, X4)], {}, "NONE", (), 3),
    ("ADD", [(i8, X4), (i8, X4)], [(i8, X4)], {}, "NONE", (), 2),
    ("ADD", [(i16, X4), (i16, X4)], [(i16, X4)], {}, "NONE", (), 5),  # int16 without quantization
    ("SUB", [(i64, (2,)), (i64, (2,))], [(i64, (2,))], {}, "NONE", (), 4),
    ("SUB", [(i8, (1, 2, 3, 4, 5)), (i8, (5,))], [(i8, (1, 2, 3, 4, 5))], {}, "NONE", (), 3),
    ("MUL", [(i64, (2,)), (i64, (2,))], [(i64, (2,))], {}, "NONE", (), 5),
    ("MUL", [(i8, (2,)), (i8, (2,))], [(i8, (2,))], {}, "NONE", (), 2),
    ("MAXIMUM", [(i8, (2,)), (i8, (2,))], [(i8, (2,))], {}, "NONE", (), 2),
    ("SQUARED_DIFFERENCE", [(i8, (2,)), (i8, (2,))], [(i8, (2,))], {}, "NONE", (), 2),
    # CONV_2D: grouped comes before the int8 check; hybrid per-channel = scales == filters.
    ("CONV_2D", [(i8, X4), (i8, (6, 3, 3, 4)), (i32, (6,))], [(i8, (1, 4, 4, 6))], {}, "NONE",
     (), 6),
    ("CONV_2D", [(f32, X4), (i8, (6, 3, 3, 8)), (f32, (6,))], [(f32, (1, 4, 4, 6))], {}, "NONE",
     {1: 6}, 5),
    ("CONV_2D", [(f32, X4), (i8, (6, 3, 3, 8)), (f32, (6,))], [(f32, (1, 4, 4, 6))], {}, "NONE",
     {1: 1}, 2),
    ("DEPTHWISE_CONV_2D", [(i8, X4), (i8, (1, 3, 3, 8)), (i32, (8,))], [(i8, X4)],
     {"dilation_w_factor": 2}, "NONE", (), 3),  # int8 before dilation
    # FULLY_CONNECTED: hybrid per-tensor comes after keep_num_dims and the 2-input case.
    ("FULLY_CONNECTED", [(f32, (2, 3, 8)), (i8, (4, 8)), ""], [(f32, (2, 3, 4))],
     {"keep_num_dims": True}, "NONE", {1: 1}, 5),
    ("FULLY_CONNECTED", [(f32, (2, 8)), (i8, (4, 8))], [(f32, (2, 4))], {}, "NONE", {1: 1}, 6),
    ("FULLY_CONNECTED", [(f32, (2, 8)), (i8, (4, 8)), ""], [(f32, (2, 4))], {}, "NONE", {1: 4}, 12),
    ("FULLY_CONNECTED", [(f32, (2, 8)), (i8, (4, 8)), ""], [(f32, (2, 4))], {}, "NONE", {1: 1}, 3),
    ("FULLY_CONNECTED", [(f32, (2, 8)), (f32, (4, 8)), ""], [(f32, (2, 4))], {}, "NONE", (), 1),
    ("TRANSPOSE_CONV", [(i32, (4,)), (f32, (2, 3, 3, 4)), (f32, X4), ""], [(f32, (1, 8, 8, 2))],
     {}, "NONE", (), 1),  # a -1 bias is kTfLiteNoType
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", [(i16, (2, 3, 4)), "", (i8, (5, 4))], [(i16, (2, 3, 5))],
     {"diagonal_recurrent_tensors": True}, "NONE", (), 5),  # int16x8 before diagonal
    ("ABS", [(i16, (2,))], [(i16, (2,))], {}, "NONE", (), 4),
    ("ABS", [(i16, (2,))], [(i16, (2,))], {}, "NONE", {0: 1}, 3),
]


@pytest.mark.parametrize("op_type, inputs, outputs, options, fused, quant, expected", IR_CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(IR_CASES)])
def test_version_functions_on_branches_conversion_does_not_reach(op_type, inputs, outputs,
                                                                 options, fused, quant, expected):
    op, model = _ir_op(op_type, inputs, outputs, options, fused, quant)
    assert TFLITE_OPS[op_type].version(op, model) == expected
