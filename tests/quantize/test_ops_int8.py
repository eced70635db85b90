"""Every TFLite op with an int8 rule (OpDef.quant), quantized alone: a one-op ONNX model whose
conversion yields the op, calibrated on samples drawn for that op, run int8 in the interpreter and
compared with onnxruntime's float output (within 2 output quantization steps), and read back from
the written file to show the op really runs int8 (activations INT8, weights INT8 per channel with
zero point 0, bias INT32).

Samples come from `draw(rng, shape)` per case: standard normal by default, positive for Log,
a few well-separated values where the op compares or ranks its inputs (a comparison of two values
less than one step apart is not defined by the quantized model). The harness snaps the compared
sample to the input's int8 grid, so the error measured is the op's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from onnx import TensorProto, helper

from qconvert.ops.registry import TFLITE_OPS
from qconvert.calibration.data import model_input_specs
from qconvert.tflite import schema_generated as schema
from qconvert.tflite.reader import read as read_tflite
from tests.harness import (
    assert_int8_matches_onnxruntime,
    convert_quantized,
    make_model,
    output_steps,
    run_onnxruntime,
    run_tflite,
    snap_to_input_grid,
    without_quantize_step,
)

F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
SAMPLES = 16
NCHW = (1, 3, 6, 6)


def normal(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def positive(rng, shape):
    """In [0.5, 4], inside Log's domain. Not nearer 0: the smallest calibration value, rounded down
    to the input's int8 grid (by up to half a step, 4 / 510), has a log below the calibrated output
    minimum, where the int8 output saturates; near 0 that costs several steps (samples from 0.05:
    log(0.0470) = -3.057 against an output range ending at -2.974, 4.9 steps)."""
    return rng.uniform(0.5, 4.0, shape).astype(np.float32)


def levels(rng, shape):
    """Integers in [-4, 4]: equal values occur, unequal ones are many steps apart."""
    return rng.integers(-4, 5, shape).astype(np.float32)


def distinct(rng, shape):
    """Each row along the last axis a permutation of 0.5 * arange: no ties to break."""
    n = shape[-1]
    rows = rng.permuted(np.broadcast_to(np.arange(n, dtype=np.float32) * 0.5, shape), axis=-1)
    return np.ascontiguousarray(rows)


def wide(rng, shape):
    """Normal x 3: reaches the saturating tails of Sigmoid, Softmax, Relu6 and HardSwish."""
    return (rng.standard_normal(shape) * 3).astype(np.float32)


@dataclass
class Case:
    """One op variant: the ONNX model, the TFLite op it must become, and how inputs are drawn."""

    id: str
    op: str
    model: Callable[[], object]
    draw: Callable = normal
    options: dict = field(default_factory=dict)  # for assert_int8_matches_onnxruntime
    # Quantize steps that would rewrite the op into others XNNPACK delegates (tested in
    # tests/transforms/): off, so that the case tests the op's own kernel.
    without: tuple[str, ...] = ()

    def convert_with_the_op(self, monkeypatch) -> None:
        for step in self.without:
            without_quantize_step(monkeypatch, step)


def unary(op_type, shape=(2, 3, 8), opset=13, out=F, **attrs):
    return lambda: make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)],
                              {"x": (F, shape)}, {"y": out}, opset=opset)


def binary(op_type, a_shape=(2, 3, 8), b_shape=(2, 3, 8), out=F):
    return lambda: make_model([helper.make_node(op_type, ["a", "b"], ["y"])],
                              {"a": (F, a_shape), "b": (F, b_shape)}, {"y": out})


def with_const(op_type, value, shape=(2, 3, 8), inputs=("x", "c"), opset=13, out=F, **attrs):
    """op_type(x, c) with c a constant initializer (or several, for a dict `value`)."""
    inits = value if isinstance(value, dict) else {"c": value}
    return lambda: make_model([helper.make_node(op_type, list(inputs), ["y"], **attrs)],
                              {"x": (F, shape)}, {"y": out}, inits, opset=opset)


def conv(out_channels, group=1, kernel=3, bias=True, transpose=False, **attrs):
    """Conv (or ConvTranspose) from a 3-channel NCHW input, random weights and bias."""
    def build():
        rng = np.random.default_rng(5)
        shape = (3, out_channels // group) if transpose else (out_channels, 3 // group)
        inits = {"w": rng.standard_normal(shape + (kernel, kernel)).astype(np.float32) * 0.5}
        if bias:
            inits["b"] = rng.standard_normal(out_channels).astype(np.float32)
        node = helper.make_node("ConvTranspose" if transpose else "Conv", ["x", *inits], ["y"],
                                group=group, **attrs)
        return make_model([node], {"x": (F, NCHW)}, {"y": F}, inits)
    return build


def dense(op_type, bias=True, shape=(2, 12)):
    def build():
        rng = np.random.default_rng(6)
        w = rng.standard_normal((12, 5)).astype(np.float32) * 0.4
        inits = {"w": w if op_type == "MatMul" else w.T.copy()}
        if bias:
            inits["b"] = rng.standard_normal(5).astype(np.float32)
        attrs = {"transB": 1} if op_type == "Gemm" else {}
        return make_model([helper.make_node(op_type, ["x", *inits], ["y"], **attrs)],
                          {"x": (F, shape)}, {"y": F}, inits)
    return build


def resize(mode, **attrs):
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}
    return with_const("Resize", inits, NCHW, ("x", "roi", "scales"), mode=mode, **attrs)


def split(sizes):
    def build():
        outputs = [f"y{k}" for k in range(len(sizes))]
        node = helper.make_node("Split", ["x", "s"], outputs, axis=1)
        return make_model([node], {"x": (F, (2, 6, 4))}, dict.fromkeys(outputs, F),
                          {"s": np.array(sizes, np.int64)})
    return build


def concat(sigmoid=False):
    """Two inputs of different ranges: the output range is their union. With `sigmoid`, input b
    comes from a LOGISTIC, whose fixed output params must be requantized to the union's."""
    nodes = [helper.make_node("Concat", ["a", "s" if sigmoid else "b"], ["y"], axis=1)]
    if sigmoid:
        nodes.insert(0, helper.make_node("Sigmoid", ["b"], ["s"]))
    return lambda: make_model(nodes, {"a": (F, (2, 3, 4)), "b": (F, (2, 5, 4))}, {"y": F})


def embedding():
    """Gather from a constant table by int64 indices: the table itself is quantized."""
    table = np.random.default_rng(9).standard_normal((10, 4)).astype(np.float32)
    return lambda: make_model([helper.make_node("Gather", ["t", "i"], ["y"], axis=0)],
                              {"i": (I64, (2, 3))}, {"y": F}, {"t": table})


def where(constant=None):
    """Where(c, a, b) with a boolean input c; b a constant when given."""
    inputs = {"c": (B, (2, 3, 8)), "a": (F, (2, 3, 8)), "b": (F, (2, 3, 8))}
    inits = {}
    if constant is not None:
        del inputs["b"]
        inits["b"] = constant
    return lambda: make_model([helper.make_node("Where", ["c", "a", "b"], ["y"])], inputs, {"y": F}, inits)


def conv_relu():
    """Conv then Relu: CONV_2D with the RELU fused (and dropped as trivial in int8)."""
    def build():
        model = conv(4, pads=[1, 1, 1, 1])()
        model.graph.node[0].output[0] = "z"
        model.graph.node.append(helper.make_node("Relu", ["z"], ["y"]))
        return model
    return build


def lstm_reverse():
    """A reverse LSTM: REVERSE_V2 of the input, the (float) fused LSTM, REVERSE_V2 of its output."""
    def build():
        rng = np.random.default_rng(8)
        inits = {"W": rng.standard_normal((1, 16, 3)).astype(np.float32) * 0.5,
                 "R": rng.standard_normal((1, 16, 4)).astype(np.float32) * 0.5}
        node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], direction="reverse", hidden_size=4)
        return make_model([node], {"x": (F, (5, 2, 3))}, {"y": F}, inits, opset=14)
    return build


def followed(op_type, then="Mul", constant=2.0):
    """then(op(x), constant): a fixed-output op (LOGISTIC, TANH, SOFTMAX, LOG_SOFTMAX) whose output
    is a model output stays float by design (quantize_activations), so here an int8 MUL (or ADD)
    reads it. Its output step must not be finer than the fixed one, or the fixed op's own rounding
    would count for several output steps."""
    nodes = [helper.make_node(op_type, ["x"], ["s"]), helper.make_node(then, ["s", "c"], ["y"])]
    return lambda: make_model(nodes, {"x": (F, (2, 3, 8))}, {"y": F}, {"c": np.float32(constant)})


def layer_norm():
    """LayerNormalization is MEAN, SUB, MUL, MEAN, ADD, RSQRT, MUL (+ scale and bias)."""
    inits = {"g": np.linspace(0.5, 1.5, 8, dtype=np.float32), "beta": np.linspace(-1, 1, 8, dtype=np.float32)}
    return with_const("LayerNormalization", inits, (2, 3, 8), ("x", "g", "beta"), opset=17, axis=-1)


def clip(low, high):
    return with_const("Clip", {"lo": np.float32(low), "hi": np.float32(high)}, inputs=("x", "lo", "hi"))


def topk():
    """TopK of the last axis, both outputs read: int8 values (the input's params), int32 indices."""
    return lambda: make_model([helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=-1)],
                              {"x": (F, (2, 3, 8))}, {"y": F, "i": I64}, {"k": np.array([3], np.int64)},
                              opset=11)


def ints(*values):
    return np.array(values, np.int64)


CASES = [
    # Weighted ops: int8 weights per output channel, int32 bias.
    Case("conv", "CONV_2D", conv(4, pads=[1, 1, 1, 1])),
    Case("conv-stride2-nobias", "CONV_2D", conv(5, bias=False, strides=[2, 2])),
    Case("conv-relu", "CONV_2D", conv_relu()),
    Case("depthwise", "DEPTHWISE_CONV_2D", conv(3, group=3, pads=[1, 1, 1, 1])),
    Case("depthwise-multiplier2", "DEPTHWISE_CONV_2D", conv(6, group=3)),
    Case("conv-transpose", "TRANSPOSE_CONV", conv(4, transpose=True, strides=[2, 2])),
    Case("gemm", "FULLY_CONNECTED", dense("Gemm")),
    Case("matmul", "FULLY_CONNECTED", dense("MatMul", bias=False)),
    Case("matmul-3d", "FULLY_CONNECTED", dense("MatMul", bias=False, shape=(2, 3, 12))),
    Case("gemm-per-tensor", "FULLY_CONNECTED", dense("Gemm"), options={"per_tensor_fc": True}),
    # Two activations (attention's Q K^T, probabilities times V): int8 on both sides.
    Case("batch-matmul", "BATCH_MATMUL", binary("MatMul", (2, 3, 8), (2, 8, 5))),
    Case("batch-matmul-broadcast", "BATCH_MATMUL", binary("MatMul", (2, 4, 3, 8), (1, 4, 8, 6))),
    # Pooling and reductions.
    Case("maxpool", "MAX_POOL_2D", unary("MaxPool", NCHW, kernel_shape=[2, 2], strides=[2, 2])),
    Case("avgpool", "AVERAGE_POOL_2D", unary("AveragePool", NCHW, kernel_shape=[3, 3]),
         without=("average_pool_to_depthwise",)),
    Case("global-avgpool", "MEAN", unary("GlobalAveragePool", NCHW)),
    Case("reduce-mean", "MEAN", unary("ReduceMean", axes=[2])),
    Case("reduce-sum", "SUM", with_const("ReduceSum", {"c": ints(1)})),
    Case("reduce-max", "REDUCE_MAX", unary("ReduceMax", axes=[2], keepdims=0)),
    Case("reduce-min", "REDUCE_MIN", unary("ReduceMin", axes=[1])),
    Case("argmax", "ARG_MAX", unary("ArgMax", out=I64, axis=-1, keepdims=0), distinct),
    Case("argmin", "ARG_MIN", unary("ArgMin", out=I64, axis=1), distinct),
    Case("topk", "TOPK_V2", topk(), distinct),
    # Data movement: output params equal the input's.
    Case("concat", "CONCATENATION", concat()),
    # Standard normal a: its range within 16x of the sigmoid's (a wider one stays float: the
    # mixed-range rule of keep_mixed_concatenation_float).
    Case("concat-after-sigmoid", "CONCATENATION", concat(sigmoid=True)),
    Case("concat-const", "CONCATENATION", with_const("Concat", np.full((2, 1, 8), 5, np.float32),
                                                     axis=1)),
    Case("split", "SPLIT", split([3, 3])),
    Case("split-v", "SPLIT_V", split([2, 4])),
    Case("reshape", "RESHAPE", with_const("Reshape", ints(6, 8), inputs=("x", "c"))),
    Case("transpose", "TRANSPOSE", unary("Transpose", perm=[2, 0, 1])),
    Case("pad", "PAD", with_const("Pad", ints(0, 1, 2, 0, 0, 2))),
    Case("pad-value", "PADV2", with_const("Pad", {"p": ints(0, 1, 2, 0, 0, 2), "v": np.float32(0.5)},
                                          inputs=("x", "p", "v"))),
    Case("pad-reflect", "MIRROR_PAD", with_const("Pad", ints(0, 1, 2, 0, 1, 2), mode="reflect")),
    Case("slice", "SLICE", with_const("Slice", {"s": ints(1, 2), "e": ints(3, 7), "a": ints(1, 2)},
                                      inputs=("x", "s", "e", "a"))),
    Case("slice-step", "STRIDED_SLICE",
         with_const("Slice", {"s": ints(0), "e": ints(8), "a": ints(2), "t": ints(2)},
                    inputs=("x", "s", "e", "a", "t"))),
    Case("gather", "GATHER", with_const("Gather", ints(2, 0, 5, 5), axis=2)),
    Case("gather-table", "GATHER", embedding()),
    Case("gather-nd", "GATHER_ND", with_const("GatherND", ints([[0, 1], [1, 2], [0, 0]]))),
    Case("resize-bilinear", "RESIZE_BILINEAR", resize("linear")),
    Case("resize-bilinear-align-corners", "RESIZE_BILINEAR",
         resize("linear", coordinate_transformation_mode="align_corners")),
    Case("resize-nearest", "RESIZE_NEAREST_NEIGHBOR",
         resize("nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
         without=("resize_nearest_to_depth_to_space",)),
    Case("depth-to-space", "DEPTH_TO_SPACE", unary("DepthToSpace", (1, 8, 3, 3), blocksize=2)),
    Case("space-to-depth", "SPACE_TO_DEPTH", unary("SpaceToDepth", NCHW, blocksize=2)),
    Case("lstm-reverse", "REVERSE_V2", lstm_reverse(),
         options={"allow_float": ("FILL", "UNIDIRECTIONAL_SEQUENCE_LSTM")}),
    Case("tile", "TILE", with_const("Tile", ints(1, 2, 3))),
    Case("expand", "BROADCAST_TO", with_const("Expand", ints(2, 4, 3, 8), (2, 1, 1, 8))),
    # Elementwise binary ops: two activations, and an activation with a constant.
    Case("add", "ADD", binary("Add")),
    Case("add-broadcast", "ADD", binary("Add", b_shape=(3, 1))),
    Case("add-const", "ADD", with_const("Add", np.linspace(-2, 3, 8, dtype=np.float32))),
    Case("sub", "SUB", binary("Sub")),
    Case("sub-const", "SUB", with_const("Sub", np.float32(1.5))),
    Case("mul", "MUL", binary("Mul")),
    Case("pow2", "MUL", with_const("Pow", np.float32(2))),
    Case("mul-const", "MUL", with_const("Mul", np.linspace(-1, 2, 8, dtype=np.float32))),
    Case("max", "MAXIMUM", binary("Max")),
    Case("min-const", "MINIMUM", with_const("Min", np.float32(0.3))),
    Case("equal", "EQUAL", binary("Equal", out=B), levels),
    Case("less", "LESS", binary("Less", out=B), levels),
    Case("less-equal", "LESS_EQUAL", binary("LessOrEqual", out=B), levels),
    Case("greater", "GREATER", binary("Greater", out=B), levels),
    Case("greater-const", "GREATER", with_const("Greater", np.float32(1.5), out=B), levels),
    Case("greater-equal", "GREATER_EQUAL", binary("GreaterOrEqual", out=B), levels),
    Case("where", "SELECT_V2", where()),
    Case("where-const", "SELECT_V2", where(np.float32(-3.5))),
    # Activations and unary math.
    Case("relu", "RELU", unary("Relu")),
    Case("relu6", "RELU6", clip(0, 6), wide),
    Case("relu-n1-to-1", "RELU_N1_TO_1", clip(-1, 1)),
    Case("leaky-relu", "LEAKY_RELU", unary("LeakyRelu", alpha=0.2)),
    Case("prelu", "PRELU", with_const("PRelu", np.array([[0.1], [0.3], [-0.5]], np.float32))),
    Case("prelu-input-slope", "PRELU", binary("PRelu", b_shape=(3, 1))),
    Case("hard-swish", "HARD_SWISH", unary("HardSwish", opset=14), wide, without=("decompose_hard_swish",)),
    Case("gelu", "GELU", unary("Gelu", opset=20)),
    Case("gelu-tanh", "GELU", unary("Gelu", opset=20, approximate="tanh")),
    Case("sigmoid", "LOGISTIC", followed("Sigmoid"), wide),
    Case("tanh", "TANH", followed("Tanh")),
    Case("softmax", "SOFTMAX", followed("Softmax"), wide),
    # LOG_SOFTMAX's fixed output params (16/256, 127) end at -15.94: a log-probability below that
    # saturates (normal x 3 inputs reach -16.86, 14.7 steps off), so the inputs here are normal.
    # Its step of 1/16 is coarse: the ADD of -16 widens the output range to keep its step coarser.
    Case("log-softmax", "LOG_SOFTMAX", followed("LogSoftmax", "Add", -16.0)),
    Case("abs", "ABS", unary("Abs")),
    Case("exp", "EXP", unary("Exp")),
    Case("log", "LOG", unary("Log"), positive),
]


def calibration(model, draw, count=SAMPLES, seed=0):
    """{input: [count, *shape]} drawn with `draw` for float inputs; random booleans, and
    integers in [0, 4) (valid indices for the tables here) for the others."""
    rng = np.random.default_rng(seed)
    samples = {}
    for name, (dims, dtype) in model_input_specs(model).items():
        shape, kind = [count, *dims], np.dtype(dtype).kind
        if kind == "f":
            samples[name] = draw(rng, shape)
        elif kind == "b":
            samples[name] = rng.random(shape) > 0.5
        else:
            samples[name] = rng.integers(0, 4, shape).astype(dtype)
    return samples


def check_int8_op(flatbuffer: bytes, op_name: str, per_tensor_weights: bool = False,
                  activation_type: str = "INT8") -> None:
    """The written file runs `op_name` int8: its activation inputs (and outputs, unless the rule
    says they are not quantized) INT8 per tensor, weights INT8 with zero point 0 (one scale per
    output channel unless per-tensor), bias INT32 with scale = input scale x weight scale. With
    activation_type "INT16", its 16x8 kernel: activations INT16 with zero point 0, bias INT64."""
    summary = read_tflite(flatbuffer)
    rule = TFLITE_OPS[op_name].quant
    ops = [op for op in summary.operators if op.name == op_name]
    assert ops, f"no {op_name} in {summary.op_counts}"
    for op in ops:
        tensors = [summary.tensors[i] if i >= 0 else None for i in op.inputs]
        activations = range(len(tensors)) if rule.activations is None else rule.activations
        quantized = [tensors[i] for i in activations if i < len(tensors) and tensors[i] is not None]
        if rule.output != "none":  # (an int32 output beside the values is not quantized)
            quantized += [summary.tensors[i] for i in op.outputs if summary.tensors[i].dtype != "INT32"]
        else:
            assert all(summary.tensors[i].dtype in ("BOOL", "INT32") for i in op.outputs), op
        for tensor in quantized:
            assert tensor.dtype == activation_type and len(tensor.scales) == 1, (op_name, tensor)
            assert activation_type == "INT8" or tensor.zero_points == [0], (op_name, tensor)
        if rule.weight is not None:
            weights = tensors[rule.weight]
            assert weights.dtype == "INT8" and set(weights.zero_points) == {0}, weights
            if per_tensor_weights:
                assert len(weights.scales) == 1, weights
            else:
                axis = rule.weight_axis % len(weights.shape)
                assert weights.quantized_dimension == axis, weights
                assert len(weights.scales) == weights.shape[axis], weights
            bias = tensors[rule.bias] if rule.bias is not None and rule.bias < len(tensors) else None
            if bias is not None:
                wanted = "INT64" if activation_type == "INT16" else "INT32"
                assert bias.dtype == wanted and set(bias.zero_points) == {0}, bias
                expected = np.float32(quantized[0].scales[0]) * np.float32(weights.scales)
                np.testing.assert_allclose(bias.scales, expected, rtol=1e-6)


def run_reference_kernels(flatbuffer: bytes, report, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return run_tflite(flatbuffer, report, feeds, reference_kernels=True)


def assert_every_sample_matches(model, flatbuffer, report, samples, steps, run=run_tflite):
    """assert_int8_matches_onnxruntime's comparison (inputs snapped to the int8 grid, float
    outputs within `steps` output steps, others equal) on every calibration sample, not only the
    first: the samples holding the calibrated extremes are where saturation shows."""
    scales = output_steps(flatbuffer)
    for k in range(len(next(iter(samples.values())))):
        feeds = snap_to_input_grid(flatbuffer, {name: values[k] for name, values in samples.items()})
        actual = run(flatbuffer, report, feeds)
        for name, want in run_onnxruntime(model, feeds).items():
            if name in scales:
                np.testing.assert_allclose(actual[name], want, rtol=0, atol=steps * scales[name] * (1 + 1e-6),
                                           err_msg=f"sample {k}, {name}: more than {steps} steps")
            else:
                np.testing.assert_array_equal(actual[name], want, err_msg=f"sample {k}, {name}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_int8(case, tmp_path, monkeypatch):
    case.convert_with_the_op(monkeypatch)
    model = case.model()
    samples = calibration(model, case.draw)
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, samples, steps=2, **case.options)
    assert_every_sample_matches(model, flatbuffer, report, samples, steps=2)
    check_int8_op(flatbuffer, case.op, case.options.get("per_tensor_fc", False))


# Where TFLite's reference kernels cannot run a case that its default kernels run correctly.
REFERENCE_KERNEL_FAILURES = {
    "reduce-sum": "TFLite's reference int8 SUM (reference_ops::QuantizedMeanOrSum with compute_sum) is "
                  "~100 steps off; the optimized SUM and XNNPACK are within 0.7 (ai-edge-litert 2.3.0)",
    "depth-to-space": "the reference op resolver registers DEPTH_TO_SPACE version 1 only; int8 is version 2",
    "tile": "the reference op resolver registers TILE versions 1-2 only; int8 is version 3",
}


def _reference_param(case):
    reason = REFERENCE_KERNEL_FAILURES.get(case.id)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_reference_param(case) for case in CASES])
def test_op_int8_reference_kernels(case, tmp_path, monkeypatch):
    """The same within 2 steps with TFLite's reference kernels, which check their params
    themselves (SOFTMAX's output zero point, LOGISTIC's output scale, CONCATENATION's input scales)
    where XNNPACK accepts any."""
    case.convert_with_the_op(monkeypatch)
    model = case.model()
    samples = calibration(model, case.draw)
    options = {k: v for k, v in case.options.items() if k != "allow_float"}
    flatbuffer, report = convert_quantized(model, samples, tmp_path, **options)
    assert_every_sample_matches(model, flatbuffer, report, samples, steps=2, run=run_reference_kernels)


def run_micro(flatbuffer: bytes, report, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """harness.run_tflite in TFLite Micro's interpreter, which takes inputs and gives outputs by
    position in the subgraph's input and output lists."""
    from tflite_micro.python.tflite_micro import runtime

    graph = schema.Model.GetRootAs(flatbuffer, 0).Subgraphs(0)
    tensors = read_tflite(flatbuffer).tensors
    interpreter = runtime.Interpreter.from_bytes(flatbuffer)
    inputs = {info.name: info for info in report.inputs}
    for position, index in enumerate(graph.InputsAsNumpy()):
        info = inputs[tensors[index].name]
        value = np.asarray(feeds[info.name])
        if info.layout_permutation:
            value = np.transpose(value, info.layout_permutation)
        interpreter.set_input(np.ascontiguousarray(value.astype(info.dtype)), position)
    interpreter.invoke()
    outputs = {info.name: info for info in report.outputs}
    results = {}
    for position, index in enumerate(graph.OutputsAsNumpy()):
        info = outputs[tensors[index].name]
        value = interpreter.get_output(position)
        if info.layout_permutation:
            value = np.transpose(value, np.argsort(info.layout_permutation))
        results[info.name] = value
    return results


# Cases TFLite Micro cannot run because it has no kernel for them (not numerical failures).
MICRO_UNSUPPORTED = {
    "argmax": "TFLite Micro's CAST cannot write INT64 (ArgMax's indices)",
    "argmin": "TFLite Micro's CAST cannot write INT64 (ArgMin's indices)",
    "gather-table": "TFLite Micro's CAST cannot read INT64 (the Gather indices)",
    "lstm-reverse": "TFLite Micro's UNIDIRECTIONAL_SEQUENCE_LSTM fails to prepare (float model too)",
    "tile": "TFLite Micro has no TILE kernel",
    "topk": "TFLite Micro has no TOPK_V2 kernel",
    "relu-n1-to-1": "TFLite Micro has no RELU_N1_TO_1 kernel",
    "gelu": "TFLite Micro has no GELU kernel",
    "gelu-tanh": "TFLite Micro has no GELU kernel",
    "exp": "TFLite Micro's EXP is float only",
    "log": "TFLite Micro's LOG is float only",
}


def _micro_param(case):
    reason = MICRO_UNSUPPORTED.get(case.id)
    return pytest.param(case, id=case.id, marks=[pytest.mark.skip(reason=reason)] if reason else [])


@pytest.mark.parametrize("case", [_micro_param(case) for case in CASES])
def test_op_int8_micro(case, tmp_path, monkeypatch):
    """The same within 2 steps in TFLite Micro (the tflite-micro package), whose int8 kernels are
    separate code from LiteRT's and assume some constraints silently (RELU6 never rescales)."""
    case.convert_with_the_op(monkeypatch)
    model = case.model()
    samples = calibration(model, case.draw)
    options = {k: v for k, v in case.options.items() if k != "allow_float"}
    flatbuffer, report = convert_quantized(model, samples, tmp_path, **options)
    assert_every_sample_matches(model, flatbuffer, report, samples, steps=2, run=run_micro)


@pytest.mark.filterwarnings("ignore:Warning. Enabling `experimental_preserve_all_tensors`")
def test_rsqrt_in_layer_norm(tmp_path, monkeypatch):
    """RSQRT has no one-op ONNX source: qconvert emits it only inside a normalization
    (MEAN, SUB, MUL, MEAN, ADD, RSQRT, MUL, MUL, ADD here, each requantized), whose statistics
    keep_normalization_statistics_float keeps float by default: the kernel is tested with that
    step off (RSQRT stays int8 where the rule finds no variance). End to end the chain
    is allowed 3 output steps: the variance is rounded to its own int8 grid and 1/sqrt amplifies
    that at small variances (measured 2.5 steps at most over 16 samples). RSQRT alone is then held
    to the 2 steps of every other op: its int8 output, read from the interpreter, against 1/sqrt of
    its own int8 input, clamped to the output's representable range (the rounded variance can fall
    just below the calibrated minimum, putting 1/sqrt above the calibrated maximum)."""
    without_quantize_step(monkeypatch, "keep_normalization_statistics_float")
    model = layer_norm()()
    samples = calibration(model, normal)
    flatbuffer, report = assert_int8_matches_onnxruntime(model, tmp_path, samples, steps=3)
    assert_every_sample_matches(model, flatbuffer, report, samples, steps=3)
    check_int8_op(flatbuffer, "RSQRT")
    summary = read_tflite(flatbuffer)
    rsqrt = next(op for op in summary.operators if op.name == "RSQRT")
    source, target = summary.tensors[rsqrt.inputs[0]], summary.tensors[rsqrt.outputs[0]]
    interpreter = Interpreter(model_content=flatbuffer, experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    step, zero = target.scales[0], target.zero_points[0]
    lowest, highest = (-128 - zero) * step, (127 - zero) * step
    for sample in samples["x"]:
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], sample)
        interpreter.invoke()
        x = (interpreter.get_tensor(rsqrt.inputs[0]) - np.float64(source.zero_points[0])) * source.scales[0]
        y = (interpreter.get_tensor(rsqrt.outputs[0]) - np.float64(zero)) * step
        np.testing.assert_allclose(y, np.clip(1 / np.sqrt(x), lowest, highest), rtol=0, atol=2 * step)


# Ops with an int8 rule that no ONNX model reaches as a float-input op today (nothing to test):
UNREACHABLE = {
    "NOT_EQUAL": "only ONNX Xor becomes NOT_EQUAL, and Xor reads booleans",
    "SQUARED_DIFFERENCE": "no importer or transformation emits it",
}


def test_every_int8_rule_has_a_case():
    """A new quant rule needs a case here (or a reason in UNREACHABLE)."""
    covered = {case.op for case in CASES} | {"RSQRT"} | set(UNREACHABLE)
    assert covered == {name for name, op in TFLITE_OPS.items() if op.quant}
