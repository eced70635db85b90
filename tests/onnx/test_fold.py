"""Load-time constant folding, per op: a graph whose inputs are all initializers folds to
constants (numpy where onnx's reference evaluator is wrong: qconvert/onnx/fold.py, else the
evaluator), and the .tflite's constant outputs, run in LiteRT, equal onnxruntime's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.harness import convert_proto, run_onnxruntime, run_tflite

rng = np.random.default_rng(0)


def f(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def pos(*shape):
    return rng.uniform(0.5, 3, shape).astype(np.float32)


def unit(*shape):
    return rng.uniform(-0.9, 0.9, shape).astype(np.float32)


def ints(*shape, lo=-7, hi=8):
    return rng.integers(lo, hi, shape).astype(np.int64)


def i64(*values):
    return np.array(values, dtype=np.int64)


def b(*shape):
    return rng.random(shape) > 0.5


# (id, op, inputs, attributes, opset, number of outputs)
CASES = []


def c(id, op, inputs, opset=17, outputs=1, **attrs):
    CASES.append(pytest.param(op, inputs, attrs, opset, outputs, id=id))


for op in ["Abs", "Neg", "Exp", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Sigmoid", "Relu", "Erf", "Sign", "Softplus", "Softsign", "HardSigmoid", "HardSwish", "Elu", "Selu", "LeakyRelu", "Celu", "IsNaN", "IsInf", "Identity"]:
    c(op, op, [f(2, 3)])
c("Round_half", "Round", [np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4], np.float32)])
for op in ["Log", "Sqrt", "Reciprocal", "Acosh"]:
    c(op, op, [pos(2, 3) + (1 if op=="Acosh" else 0)])
for op in ["Asin", "Acos", "Atanh"]:
    c(op, op, [unit(2, 3)])
c("Gelu", "Gelu", [f(2, 3)], opset=20)
c("Gelu_tanh", "Gelu", [f(2, 3)], opset=20, approximate="tanh")
c("Not", "Not", [b(2, 3)])
for op in ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
    c(op, op, [f(2, 3), f(3)])
    c(op+"_int", op, [ints(2, 3), ints(3, lo=1, hi=5)])
c("Div_int_neg", "Div", [i64(-7, 7, -1, 5), i64(2, -2, 2, -3)])
c("Pow", "Pow", [pos(2, 3), f(3)])
c("Pow_int", "Pow", [ints(2, 3, lo=0, hi=5), i64(2)])
c("Mod", "Mod", [ints(2, 3), ints(3, lo=1, hi=4)*np.array([1, -1, 1])])
c("Mod_fmod", "Mod", [f(2, 3), pos(3)], fmod=1)
c("Mod_fmod_int", "Mod", [ints(2, 3), ints(3, lo=1, hi=4)*np.array([1, -1, 1])], fmod=1)
for op in ["And", "Or", "Xor"]: c(op, op, [b(2, 3), b(3)])
c("Sum", "Sum", [f(2, 3), f(3), f(1, 3)])
c("Mean", "Mean", [f(2, 3), f(3)])
c("Max3", "Max", [f(2, 3), f(3), f(2, 1)])
c("Reshape", "Reshape", [f(2, 3, 4), i64(0, -1)])
c("Transpose", "Transpose", [f(2, 3, 4)], perm=[2, 0, 1])
c("Squeeze", "Squeeze", [f(2, 1, 4), i64(1)])
c("Unsqueeze", "Unsqueeze", [f(2, 4), i64(0, -1)])
c("Concat", "Concat", [f(2, 3), f(2, 1)], axis=1)
c("Split", "Split", [f(2, 6), i64(2, 4)], outputs=2, axis=1)
c("Slice", "Slice", [f(4, 6), i64(1, -1), i64(100, 0), i64(0, 1), i64(1, -2)])
c("Gather", "Gather", [f(5, 3), i64(0, -1, 2)], axis=0)
c("Gather_neg_axis", "Gather", [f(5, 3), i64([1, 0], [2, 2])], axis=-1)
c("GatherElements", "GatherElements", [ints(1, 40), np.arange(5, dtype=np.int64).reshape(1, 5)], axis=1)
c("GatherElements_ax0", "GatherElements", [f(4, 3), ints(2, 3, lo=-4, hi=4)], axis=0)
c("GatherND", "GatherND", [f(3, 4, 2), np.array([[0, 1], [2, -1]], np.int64)])
c("GatherND_batch", "GatherND", [f(2, 3, 4), np.array([[1], [2]], np.int64)], batch_dims=1)
c("ScatterElements", "ScatterElements", [f(3, 4), np.array([[0, 2], [1, 0]], np.int64), f(2, 2)], axis=1)
c("ScatterND", "ScatterND", [f(4, 3), np.array([[1], [3]], np.int64), f(2, 3)])
c("Expand", "Expand", [f(3, 1), i64(2, 3, 4)])
c("Tile", "Tile", [f(2, 3), i64(2, 1)])
c("Pad", "Pad", [f(2, 3), i64(1, 0, 0, 2)])
c("Pad_reflect", "Pad", [f(3, 4), i64(1, 2, 1, 1)], mode="reflect")
c("Pad_edge", "Pad", [f(3, 4), i64(1, 2, 1, 1)], mode="edge")
c("Flatten", "Flatten", [f(2, 3, 4)], axis=2)
c("Range", "Range", [np.array(1, np.int64), np.array(10, np.int64), np.array(3, np.int64)])
c("Range_float", "Range", [np.array(0.5, np.float32), np.array(2, np.float32), np.array(0.25, np.float32)])
c("ConstantOfShape", "ConstantOfShape", [i64(2, 3)], value=helper.make_tensor("v", 7, [1], [5]))
c("Where", "Where", [b(2, 3), f(2, 3), f(3)])
c("Cast", "Cast", [f(2, 3)*5], to=6)
c("Cast_bool", "Cast", [f(2, 3)], to=9)
c("CumSum", "CumSum", [f(2, 4), np.array(1, np.int64)])
c("CumSum_rev_excl", "CumSum", [ints(2, 4), np.array(1, np.int64)], exclusive=1, reverse=1)
c("Trilu", "Trilu", [f(4, 5), np.array(1, np.int64)])
c("Trilu_lower", "Trilu", [f(4, 5), np.array(-1, np.int64)], upper=0)
c("OneHot", "OneHot", [i64(0, 2, -1), np.array(3, np.int64), np.array([0, 1], np.float32)], axis=-1)
c("NonZero", "NonZero", [np.array([[1, 0, 2], [0, 3, 0]], np.float32)])
c("TopK", "TopK", [f(2, 6), i64(3)], outputs=2, axis=1)
c("TopK_small", "TopK", [f(2, 6), i64(2)], outputs=2, axis=1, largest=0)
c("ArgMax", "ArgMax", [f(3, 4)], axis=1)
c("ArgMin_keep0", "ArgMin", [f(3, 4)], axis=0, keepdims=0)
c("ArgMax_last", "ArgMax", [np.array([[1, 3, 3], [2, 2, 1]], np.float32)], axis=1, select_last_index=1)
for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum"]:
    x = pos(2, 3, 4)
    if op == "ReduceSum": c(op, op, [x, i64(1)], opset=13)
    else: c(op, op, [x], axes=[1])
c("ReduceSum18", "ReduceSum", [f(2, 3), i64(-1)], opset=18, keepdims=0)
c("ReduceMax18_noaxes", "ReduceMax", [f(2, 3)], opset=18)
c("Softmax", "Softmax", [f(2, 5)], axis=-1)
c("LogSoftmax", "LogSoftmax", [f(2, 5)])
c("MatMul", "MatMul", [f(2, 3, 4), f(4, 5)])
c("MatMul_int", "MatMul", [ints(2, 3), ints(3, 2)])
c("Gemm", "Gemm", [f(2, 3), f(4, 3), f(4)], transB=1, alpha=0.5, beta=2.0)
c("Einsum", "Einsum", [f(2,3), f(3,4)], equation="ij,jk->ik")
c("Clip", "Clip", [f(2, 3), np.array(-0.5, np.float32), np.array(0.5, np.float32)])
c("Clip_int", "Clip", [ints(2, 3), np.array(-2, np.int64), np.array(3, np.int64)])
c("DepthToSpace", "DepthToSpace", [f(1, 8, 2, 2)], blocksize=2)
c("DepthToSpace_crd", "DepthToSpace", [f(1, 8, 2, 2)], blocksize=2, mode="CRD")
c("SpaceToDepth", "SpaceToDepth", [f(1, 2, 4, 4)], blocksize=2)
c("Size", "Size", [f(2, 3)])
c("Shape", "Shape", [f(2, 3, 4)], start=1)
c("EyeLike", "EyeLike", [f(3, 4)], k=1)
c("Compress", "Compress", [f(3, 2), np.array([True, False, True])], axis=0)
c("ReverseSequence", "ReverseSequence", [f(4, 2, 3), i64(4, 2)], batch_axis=1, time_axis=0)
c("BitShift", "BitShift", [np.array([1, 8, 255], np.uint8), np.array([1, 2, 3], np.uint8)], direction="LEFT")
c("Hardmax", "Hardmax", [f(2, 5)])
c("LpNormalization", "LpNormalization", [f(2, 5)], axis=1, p=2)
c("Unique", "Unique", [np.array([2, 1, 1, 3, 4, 3], np.float32)], sorted=1)
c("Det", "Det", [f(2, 3, 3)])
c("Shrink", "Shrink", [f(2, 3)], lambd=0.5, bias=0.1)
c("ThresholdedRelu", "ThresholdedRelu", [f(2, 3)], alpha=0.3)
c("PRelu", "PRelu", [f(2, 3), f(3)])
c("InstanceNormalization", "InstanceNormalization", [f(1, 2, 3, 3), f(2), f(2)])
c("LayerNormalization", "LayerNormalization", [f(2, 4), f(4), f(4)])
c("BatchNormalization", "BatchNormalization", [f(1, 2, 3), f(2), f(2), f(2), pos(2)])
c("Conv", "Conv", [f(1, 2, 5, 5), f(3, 2, 3, 3)], pads=[1, 1, 1, 1])
c("MaxPool", "MaxPool", [f(1, 2, 4, 4)], kernel_shape=[2, 2], strides=[2, 2])
c("AveragePool", "AveragePool", [f(1, 2, 5, 5)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
c("GlobalAveragePool", "GlobalAveragePool", [f(1, 2, 3, 3)])
c("Resize_nearest", "Resize", [f(1, 1, 2, 3), np.array([], np.float32), np.array([1, 1, 2, 2], np.float32)])
c("Resize_linear", "Resize", [f(1, 1, 2, 3), np.array([], np.float32), np.array([1, 1, 2, 2], np.float32)], mode="linear")
c("Dropout", "Dropout", [f(2, 3)])
c("ScatterElements_add", "ScatterElements", [f(3, 4), np.array([[0, 0], [1, 0]], np.int64), f(2, 2)], axis=1, reduction="add")
c("Max_int", "Max", [ints(3), ints(3)])
c("Cast_int64", "Cast", [np.array([-1.5, 2.7, 3e5], np.float32)], to=7)
c("GatherElements_smaller", "GatherElements", [f(4, 3), ints(2, 2, lo=-4, hi=4)], axis=0)
c("GatherElements_long_ax0", "GatherElements", [f(100, 2), ints(3, 2, lo=-100, hi=100)], axis=0)

# float16 constants fold in float16 and come out float16.
h = lambda *shape: f(*shape).astype(np.float16)  # noqa: E731
c("Add_f16", "Add", [h(2, 3), h(3)])
c("Sqrt_f16", "Sqrt", [pos(2, 3).astype(np.float16)])
c("MatMul_f16", "MatMul", [h(2, 3), h(3, 2)])
c("Softmax_f16", "Softmax", [h(2, 5)])
c("Cast_f16_f32", "Cast", [h(2, 3)], to=1)
c("Cast_f32_f16", "Cast", [f(2, 3)], to=10)
c("GatherElements_f16", "GatherElements", [h(1, 40), np.arange(5, dtype=np.int64).reshape(1, 5)], axis=1)
c("Where_u8", "Where", [b(2, 3), np.full((2, 3), 7, np.uint8), np.full(3, 250, np.uint8)])
c("BatchNormalization", "BatchNormalization", [f(2, 3, 4), pos(3), f(3), f(3), pos(3)], opset=15)


@pytest.mark.parametrize("op, inputs, attrs, opset, outputs", CASES)
def test_folded_constant_equals_onnxruntime(op, inputs, attrs, opset, outputs):
    names = [f"in{k}" for k in range(len(inputs))]
    results = [f"out{k}" for k in range(outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, results, **attrs)], "fold", [],
        [helper.make_tensor_value_info(o, 0, None) for o in results],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in zip(names, inputs)])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8))
    flatbuffer, report = convert_proto(model)
    actual = run_tflite(flatbuffer, report, {})
    for name, want in run_onnxruntime(model, {}).items():
        got = actual[name]
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)


def test_gather_elements_along_a_long_axis_folds():
    """BERT's position ids: GatherElements of [1, 512] by [1, 32], which onnx 1.23's evaluator
    cannot compute (np.choose takes at most 32 choices)."""
    data, indices = np.arange(512, dtype=np.int64).reshape(1, 512), ints(1, 32, lo=-512, hi=512)
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["d", "i"], ["g"], axis=1),
         helper.make_node("Add", ["x", "g"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.INT64, [1, 32])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, None)],
        [numpy_helper.from_array(data, "d"), numpy_helper.from_array(indices, "i")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    flatbuffer, report = convert_proto(model)
    feeds = {"x": ints(1, 32)}
    np.testing.assert_array_equal(run_tflite(flatbuffer, report, feeds)["y"],
                                  run_onnxruntime(model, feeds)["y"])


def test_batch_normalization_with_training_outputs_folds():
    """timm's weight standardization (NF-ResNet) exported at opset 13: a BatchNormalization of a
    constant weight with its four training outputs (unused), which onnx's evaluator does not give;
    output 0 normalises by the weight's own statistics, as onnxruntime computes it."""
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((1, 4, 9)).astype(np.float32)
    stats = [weight.mean(axis=(0, 2)), weight.var(axis=(0, 2))]
    bn = helper.make_node("BatchNormalization", ["w", "g", "b", "m", "v"],
                          ["wn", "rm", "rv", "sm", "sv"], epsilon=1e-5, momentum=1.0)
    graph = helper.make_graph(
        [bn, helper.make_node("Reshape", ["wn", "shape"], ["w2"]),
         helper.make_node("MatMul", ["x", "w2"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in [
            ("w", weight), ("g", np.ones(4, np.float32)), ("b", np.zeros(4, np.float32)),
            ("m", stats[0]), ("v", stats[1]), ("shape", np.array([4, 9], np.int64))]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"x": rng.standard_normal((2, 4)).astype(np.float32)}
    flatbuffer, report = convert_proto(model)
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"],
                               run_onnxruntime(model, feeds)["y"], rtol=1e-5, atol=1e-5)
