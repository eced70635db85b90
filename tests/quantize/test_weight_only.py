"""--weight-only (TFLite's dynamic-range mode) and --float16, op by op: a one-op ONNX model with a
big constant weight is converted, the written file is read back (the weight's type, scales, zero
points and values, which op reads it, the op's version and `asymmetric_quantize_inputs`), and the
interpreter's output is compared with onnxruntime's float output within a bound derived from the
weight quantization step.

The bound. A hybrid kernel computes y' = sum_k x_q[k] * w_q[k] with the int8 weights w_q
(|w - w_q| <= s_w / 2, s_w the weight's step for that output channel) and the input quantized at run
time per row (|x - x_q| <= s_x / 2; s_x = (max(0, max x) - min(0, min x)) / 255 over the row with
asymmetric inputs, max|x| / 127 without). Since x w - x_q w_q = x (w - w_q) + (x - x_q) w_q,
    |y - y'| <= sum_k |x_k| s_w / 2 + s_x / 2 (|w_k| + s_w / 2),
which onnxruntime computes by running the same op on |x| with weights s_w / 2 and on s_x / 2 with
weights |w| + s_w / 2 (padding and strides come for free). An op reading its weights through
DEQUANTIZE sees exact inputs: only the first term. With --float16 the weight error is the float16
rounding, |w - fp16(w)| <= 2^-11 |w| (2^-25 below float16's normal range), biases included.
The measured error must stay within 1.05 x the bound + 1e-5 (float accumulation order), and be
nonzero: the quantized weights are really in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qconvert.tflite import schema_generated as schema
from qconvert.tflite.reader import buffer_data
from qconvert.tflite.reader import read as read_tflite
from tests.harness import convert_proto, make_model, run_onnxruntime, run_tflite

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG_SEED = 7
FP16_REL = 2.0 ** -11  # float16 round-to-nearest: half a unit in the last of 11 significant bits
FP16_SUBNORMAL = 2.0 ** -25  # half float16's smallest subnormal step
SLACK, ABS_SLACK = 1.05, 1e-5
_OPTION_TABLES = {v: k for k, v in vars(schema.BuiltinOptions).items() if not k.startswith("_")}


def channel_weights(rng, shape, axis=0) -> np.ndarray:
    """Normal weights with a different magnitude per output channel (along `axis`), so that a
    single per-tensor scale would be visibly coarser than per-channel ones."""
    gains = rng.uniform(0.2, 2.0, shape[axis]).reshape([-1 if d == axis else 1 for d in range(len(shape))])
    return (rng.standard_normal(shape) * gains * 0.2).astype(np.float32)


@dataclass
class Case:
    """One op reading one big constant weight under --weight-only.

    build(weights) -> the ONNX model with these initializers (the bound reruns it on others).
    weight: the initializer that must become int8. op: the TFLite op that must read it.
    onnx_axis: its per-channel axis in ONNX layout (None: one scale); to_file: ONNX -> file layout;
    file_axis: the quantized_dimension in the file. hybrid: the op reads the int8 tensor directly.
    rows: the axes of the input one run-time quantization row spans (hybrid ops); rows_asymmetric:
    whether the kernel quantizes them asymmetrically (FULLY_CONNECTED and BATCH_MATMUL by their
    asymmetric_quantize_inputs, the per-channel CONV_2D / DEPTHWISE_CONV_2D kernels always).
    version: the op's version by op_version.cc; asymmetric: its asymmetric_quantize_inputs (None:
    its options have no such field). readers: how many ops read the weight.
    bound: (case, feeds, weight deltas, input half-steps) -> per-output error bound; default the
    bilinear one (see module docstring).
    """

    id: str
    op: str
    build: Callable[[dict], onnx.ModelProto]
    weights: dict
    feeds: dict
    weight: str = "w"
    onnx_axis: int | None = 0
    to_file: Callable = lambda w: w
    file_axis: int = 0
    hybrid: bool = True
    rows: tuple | None = None
    rows_asymmetric: bool = True
    version: int = 1
    asymmetric: bool | None = None
    readers: int = 1
    bound: Callable | None = None


def weight_steps(w: np.ndarray, axis: int | None) -> np.ndarray:
    """The symmetric int8 step of every element of w: max|w| / 127 over its channel (or all of w)."""
    if axis is None:
        return np.full(w.shape, np.abs(w).max() / 127, np.float64)
    others = tuple(d for d in range(w.ndim) if d != axis)
    return np.broadcast_to(np.abs(w).max(axis=others, keepdims=True) / 127.0, w.shape).astype(np.float64)


def input_half_steps(x: np.ndarray, rows: tuple, asymmetric: bool) -> np.ndarray:
    """Half the run-time quantization step of every input element, per row spanning `rows`."""
    if asymmetric:
        hi = np.maximum(x.max(axis=rows, keepdims=True), 0)
        lo = np.minimum(x.min(axis=rows, keepdims=True), 0)
        step = (hi.astype(np.float64) - lo) / 255
    else:
        step = np.abs(x).max(axis=rows, keepdims=True).astype(np.float64) / 127
    return np.broadcast_to(step / 2, x.shape)


def bilinear_bound(case: Case, feeds: dict, deltas: dict, dx: np.ndarray | None) -> dict:
    """The bound of an op linear in its input and in its weights (see the module docstring)."""
    hybrid = {case.weight} if dx is not None else set()
    return linear_op_bound(case.build, case.weights, feeds, deltas, dx, hybrid)


def linear_op_bound(build, weights: dict, feeds: dict, deltas: dict, dx, hybrid: set) -> dict:
    """op(|x|, dW) + op(dx, |W| + dW) by onnxruntime on the model `build` makes from other
    initializers. deltas: the error of each stored initializer (a bias's adds as it is); dx: half
    the run-time input step per element, read by the `hybrid` weights (the others see exact x)."""
    x_name = next(iter(feeds))
    first = {name: deltas.get(name, np.zeros_like(w)).astype(np.float32) for name, w in weights.items()}
    result = run_onnxruntime(build(first), {x_name: np.abs(feeds[x_name])})
    if hybrid:
        second = {name: (np.abs(w) + deltas.get(name, 0)).astype(np.float32) if name in hybrid
                  else np.zeros_like(w) for name, w in weights.items()}
        extra = run_onnxruntime(build(second), {x_name: dx.astype(np.float32)})
        result = {k: v.astype(np.float64) + extra[k] for k, v in result.items()}
    return result


def gather_bound(case, feeds, deltas, dx):
    """Each output element is one table element: its own error."""
    return run_onnxruntime(case.build({"t": deltas["t"].astype(np.float32)}), feeds)


def add_mul_bound(case, feeds, deltas, dx):
    """x + C errs by dC, x * C by |x| dC."""
    d = deltas["c"]
    return {"sum": d, "prod": np.abs(feeds["x"]) * d}


def dense(op_type, x_shape, w_shape, bias=True):
    """Gemm or MatMul of input x by a constant w [..., K, N] (and bias b [N])."""
    rng = np.random.default_rng(RNG_SEED)
    weights = {"w": channel_weights(rng, w_shape, len(w_shape) - 1)}
    if bias:
        weights["b"] = rng.standard_normal(w_shape[-1]).astype(np.float32)

    def build(inits):
        node = helper.make_node(op_type, ["x", *inits], ["y"])
        return make_model([node], {"x": (F, x_shape)}, {"y": F}, inits)
    return build, weights, {"x": rng.standard_normal(x_shape).astype(np.float32)}


def conv(op_type, x_shape, w_shape, group=1, **attrs):
    rng = np.random.default_rng(RNG_SEED)
    out_channels = w_shape[1] * group if op_type == "ConvTranspose" else w_shape[0]
    weights = {"w": channel_weights(rng, w_shape, 1 if op_type == "ConvTranspose" else 0),
               "b": rng.standard_normal(out_channels).astype(np.float32)}

    def build(inits):
        node = helper.make_node(op_type, ["x", *inits], ["y"], group=group, **attrs)
        return make_model([node], {"x": (F, x_shape)}, {"y": F}, inits)
    return build, weights, {"x": rng.standard_normal(x_shape).astype(np.float32)}


def gather_case():
    rng = np.random.default_rng(RNG_SEED)
    weights = {"t": rng.standard_normal((300, 8)).astype(np.float32)}

    def build(inits):
        nodes = [helper.make_node("Gather", ["t", "i"], ["y"], axis=0)]
        return make_model(nodes, {"i": (I64, (3, 4))}, {"y": F}, inits)
    return build, weights, {"i": rng.integers(0, 300, (3, 4)).astype(np.int64)}


def add_mul_case():
    """x + C and x * C: two readers of one big constant, neither with a hybrid kernel."""
    rng = np.random.default_rng(RNG_SEED)
    weights = {"c": rng.standard_normal((4, 512)).astype(np.float32)}

    def build(inits):
        nodes = [helper.make_node("Add", ["x", "c"], ["sum"]), helper.make_node("Mul", ["x", "c"], ["prod"])]
        return make_model(nodes, {"x": (F, (4, 512))}, {"sum": F, "prod": F}, inits)
    return build, weights, {"x": rng.standard_normal((4, 512)).astype(np.float32)}


def _cases() -> list[Case]:
    gemm_build, gemm_w, gemm_x = dense("Gemm", (4, 96), (96, 48))
    mm_build, mm_w, mm_x = dense("MatMul", (2, 5, 64), (64, 40), bias=False)
    bmm_build, bmm_w, bmm_x = dense("MatMul", (2, 6, 32), (2, 32, 24), bias=False)
    conv_build, conv_w, conv_x = conv("Conv", (2, 8, 9, 9), (16, 8, 3, 3), pads=[1, 1, 1, 1])
    dw_build, dw_w, dw_x = conv("Conv", (2, 64, 7, 7), (128, 1, 3, 3), group=64, pads=[1, 1, 1, 1])
    ct_build, ct_w, ct_x = conv("ConvTranspose", (1, 16, 5, 5), (16, 8, 3, 3), strides=[2, 2])
    return [
        # Gemm B [K, N]: per output channel N (axis 1); the file holds [N, K].
        Case("gemm_fc", "FULLY_CONNECTED", gemm_build, gemm_w, gemm_x, onnx_axis=1, to_file=np.transpose,
             rows=(-1,), version=12, asymmetric=True),
        Case("matmul_3d_fc", "FULLY_CONNECTED", mm_build, mm_w, mm_x, onnx_axis=1, to_file=np.transpose,
             rows=(-1,), version=12, asymmetric=True),
        # A constant rhs of rank 3 is no FULLY_CONNECTED matrix: BATCH_MATMUL, one scale.
        Case("matmul_batch", "BATCH_MATMUL", bmm_build, bmm_w, bmm_x, onnx_axis=None, rows=(-1,),
             version=4, asymmetric=True),
        # OIHW -> OHWI; the per-channel hybrid kernel quantizes each batch item (asymmetrically).
        Case("conv", "CONV_2D", conv_build, conv_w, conv_x, to_file=lambda w: w.transpose(0, 2, 3, 1),
             rows=(1, 2, 3), version=5),
        # [C*M, 1, kh, kw] -> [1, kh, kw, C*M], per channel along axis 3.
        Case("depthwise", "DEPTHWISE_CONV_2D", dw_build, dw_w, dw_x,
             to_file=lambda w: w.transpose(1, 2, 3, 0), file_axis=3, rows=(1, 2, 3), version=6),
        # No hybrid kernel: DEQUANTIZE (int8 per tensor, version 2) in front, one scale.
        Case("conv_transpose", "TRANSPOSE_CONV", ct_build, ct_w, ct_x, onnx_axis=None,
             to_file=lambda w: w.transpose(1, 2, 3, 0), hybrid=False, version=3),
        Case("gather_table", "GATHER", *gather_case(), weight="t", onnx_axis=None, hybrid=False,
             bound=gather_bound),
        Case("add_mul_constant", "ADD", *add_mul_case(), weight="c", onnx_axis=None, hybrid=False,
             readers=2, bound=add_mul_bound),
    ]


CASES = {case.id: case for case in _cases()}
WEIGHT_INPUT = {"GATHER": 0, "ADD": 1, "MUL": 1}  # else input 1


def option(flatbuffer: bytes, op_index: int, field_name: str):
    """A field of the op's builtin options table as written (None if the table has no such field)."""
    op = schema.Model.GetRootAs(flatbuffer, 0).Subgraphs(0).Operators(op_index)
    table_name = _OPTION_TABLES.get(op.BuiltinOptionsType())
    getter = getattr(getattr(schema, table_name), field_name, None) if table_name else None
    if getter is None or op.BuiltinOptions() is None:
        return None
    table = getattr(schema, table_name)()
    table.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    return getter(table)


def tensor_values(flatbuffer: bytes, tensor) -> np.ndarray:
    dtype = {"INT8": np.int8, "FLOAT16": np.float16, "FLOAT32": np.float32}[tensor.dtype]
    return buffer_data(flatbuffer, tensor.buffer).view(dtype).reshape(tensor.shape)


def check_int8_weight(flatbuffer, tensor, w_file: np.ndarray, file_axis: int | None) -> None:
    """Symmetric int8 (zero points 0, narrow range), scale max|w| / 127 per channel along
    file_axis (None: one scale), and every value the nearest grid point to the float weight."""
    assert tensor.dtype == "INT8", tensor
    count = 1 if file_axis is None else w_file.shape[file_axis]
    assert len(tensor.scales) == count and tensor.zero_points == [0] * count, tensor
    if file_axis is not None and count > 1:
        assert tensor.quantized_dimension == file_axis, tensor
    steps = weight_steps(w_file, file_axis)
    others = tuple(d for d in range(w_file.ndim) if d != file_axis)
    want = np.abs(w_file).max(axis=others if file_axis is not None else None).ravel() / 127
    np.testing.assert_allclose(tensor.scales, want, rtol=1e-6)
    q = tensor_values(flatbuffer, tensor)
    assert q.min() >= -127, "narrow range"
    error = np.abs(q * steps - w_file)
    assert np.all(error <= steps / 2 * (1 + 1e-5)), float((error / steps).max())


def measure(actual: dict, expected: dict, bounds: dict) -> float:
    """Asserts each output within SLACK x bound + ABS_SLACK of the float reference and not equal to
    it everywhere; returns the largest error / (SLACK x bound + ABS_SLACK): how much of the allowed
    error is used."""
    worst = 0.0
    for name, want in expected.items():
        got = actual[name].reshape(want.shape).astype(np.float64)
        error = np.abs(got - want)
        allowed = SLACK * np.broadcast_to(bounds[name], want.shape) + ABS_SLACK
        used = error / allowed
        assert used.max() <= 1, (f"{name}: error {error.flat[used.argmax()]:.3g} > allowed "
                                 f"{allowed.flat[used.argmax()]:.3g}")
        assert error.max() > 0, f"{name}: no error at all: the weights are not quantized"
        worst = max(worst, float(used.max()))
    return worst


def is_float32_constant(tensor) -> bool:
    """A float32 tensor with its own data (not the output of a DEQUANTIZE)."""
    return tensor.dtype == "FLOAT32" and tensor.data_offset is not None


def readers_of(summary, index: int) -> list:
    return [op for op in summary.operators if index in op.inputs]


@pytest.mark.parametrize("reference_kernels", [False, True], ids=["default", "reference"])
@pytest.mark.parametrize("case_id", list(CASES))
def test_weight_only_op(case_id, reference_kernels):
    case = CASES[case_id]
    model = case.build(case.weights)
    flatbuffer, report = convert_proto(model, weights="int8")
    summary = read_tflite(flatbuffer)
    ops = [(k, op) for k, op in enumerate(summary.operators) if op.name == case.op]
    assert len(ops) == 1, summary.op_counts
    index, op = ops[0]
    weight = summary.tensors[op.inputs[WEIGHT_INPUT.get(case.op, 1)]]
    w_file = case.to_file(case.weights[case.weight])
    if case.hybrid:
        check_int8_weight(flatbuffer, weight, w_file, case.file_axis if case.onnx_axis is not None else None)
        assert summary.tensors[op.inputs[0]].dtype == "FLOAT32"
        assert summary.tensors[op.outputs[0]].dtype == "FLOAT32"
        assert "DEQUANTIZE" not in summary.op_counts, summary.op_counts
        assert option(flatbuffer, index, "AsymmetricQuantizeInputs") == case.asymmetric
    else:
        assert weight.dtype == "FLOAT32" and weight.data_offset is None, weight
        dequantize = [o for o in summary.operators if o.name == "DEQUANTIZE"]
        assert len(dequantize) == 1 and dequantize[0].outputs == [op.inputs[WEIGHT_INPUT.get(case.op, 1)]]
        assert dequantize[0].version == 2
        stored = summary.tensors[dequantize[0].inputs[0]]
        check_int8_weight(flatbuffer, stored, w_file, None)
        assert len(readers_of(summary, dequantize[0].inputs[0])) == 1
        assert len(readers_of(summary, dequantize[0].outputs[0])) == case.readers
    assert op.version == case.version, (op.name, op.version)
    # The weight is the only int8 tensor; every other float constant (the bias) stays float32.
    int8 = [t.name for t in summary.tensors if t.dtype == "INT8"]
    assert len(int8) == 1, int8
    constants = [t for t in summary.tensors if t.data_offset is not None and t.dtype != "INT32"]
    assert {t.dtype for t in constants} == ({"INT8", "FLOAT32"} if len(case.weights) > 1 else {"INT8"})
    assert report.weights.mode == "int8" and len(report.weights.tensors) == 1, report.weights

    actual = run_tflite(flatbuffer, report, case.feeds, reference_kernels=reference_kernels)
    expected = run_onnxruntime(model, case.feeds)
    deltas = {case.weight: weight_steps(case.weights[case.weight], case.onnx_axis) / 2}
    dx = None
    if case.hybrid:
        x = case.feeds["x"]
        dx = input_half_steps(x, case.rows, case.rows_asymmetric)
    bounds = (case.bound or bilinear_bound)(case, case.feeds, deltas, dx)
    ratio = measure(actual, expected, bounds)
    print(f"\n{case_id} weight-only ({'reference' if reference_kernels else 'default'}): "
          f"max error / allowed {ratio:.3f}")


# LSTM: hidden size H, input size I, T steps of NB sequences. With I = H = 32 each of the eight
# gate matrices has 1024 elements, just enough to be quantized: the op runs hybrid.
T, NB, H = 5, 2, 32
GATES = "iofc"  # ONNX's packing of W, R and B


def lstm_model(inits: dict, input_size: int) -> onnx.ModelProto:
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=H)
    return make_model([node], {"x": (F, (T, NB, input_size))}, {"y": F}, inits, opset=14)


def lstm_weights(input_size: int) -> dict:
    rng = np.random.default_rng(RNG_SEED)
    return {"W": (rng.standard_normal((1, 4 * H, input_size)) * 0.3).astype(np.float32),
            "R": (rng.standard_normal((1, 4 * H, H)) * 0.3).astype(np.float32),
            "B": (rng.standard_normal((1, 8 * H)) * 0.5).astype(np.float32)}


def gate_steps(w: np.ndarray) -> np.ndarray:
    """Per-tensor steps of the four [H, K] gate matrices packed in w [4H, K], per element."""
    return np.concatenate([weight_steps(g, None) for g in np.split(w, 4)])


def lstm_reference_and_bound(x, W, R, B, dW, dR, hybrid: bool):
    """(h sequence [T, NB, H], bound on the converted model's error per element) by the ONNX LSTM
    equations in float64, W [4H, I], R [4H, H], B [8H] packed i, o, f, c.

    The bound is propagated step by step, elementwise. A gate pre-activation z = x W^T + h R^T + b
    errs by dz <= |x| dW^T + |h| dR^T + (e_h + dh) (|R| + dR)^T [+ dx (|W| + dW)^T with hybrid
    input quantization], where e_h is the bound on the previous h and dh, dx half the run-time
    steps of the quantized h' (its row range lies within h -/+ e_h) and x. Sigmoid is 1/4-Lipschitz,
    tanh 1-Lipschitz, and the converted model's gates lie in [0, 1] ([-1, 1] for tanh), so
    |f c - f' c'| <= df |c| + e_c and |i g - i' g'| <= di |g| + dg give
    e_c(t) <= df |c(t-1)| + e_c(t-1) + di |g| + dg and e_h(t) <= do |tanh c(t)| + e_c(t).
    """
    def sigmoid(z):
        return 1 / (1 + np.exp(-z))

    W, R, dW, dR = (np.asarray(a, np.float64) for a in (W, R, dW, dR))
    bias = B[:4 * H].astype(np.float64) + B[4 * H:]
    h, c, e_h, e_c = (np.zeros((NB, H)) for _ in range(4))
    hs, bounds = [], []
    for step in range(T):
        xt = x[step].astype(np.float64)
        z = xt @ W.T + h @ R.T + bias
        dz = np.abs(xt) @ dW.T + np.abs(h) @ dR.T + e_h @ (np.abs(R) + dR).T
        if hybrid:
            dz += input_half_steps(xt, (-1,), True) @ (np.abs(W) + dW).T
            hi = np.maximum((h + e_h).max(axis=1), 0)
            lo = np.minimum((h - e_h).min(axis=1), 0)
            dz += ((hi - lo) / 255 / 2)[:, None] * (np.abs(R) + dR).sum(axis=1)[None, :]
        zi, zo, zf, zc = np.split(z, 4, axis=1)
        di, do, df, dg = (d * k for d, k in zip(np.split(dz, 4, axis=1), (0.25, 0.25, 0.25, 1.0)))
        g = np.tanh(zc)
        e_c = df * np.abs(c) + e_c + di * np.abs(g) + dg
        c = sigmoid(zf) * c + sigmoid(zi) * g
        e_h = do * np.abs(np.tanh(c)) + e_c
        h = sigmoid(zo) * np.tanh(c)
        hs.append(h)
        bounds.append(e_h)
    return np.stack(hs), np.stack(bounds)


def lstm_run(input_size: int, **options):
    """(flatbuffer, summary, the LSTM op, its index, error / bound ratio) after checking the output
    against the bound (hybrid when the op reads int8 weights)."""
    weights = lstm_weights(input_size)
    model = lstm_model(weights, input_size)
    flatbuffer, report = convert_proto(model, weights="int8", **options)
    summary = read_tflite(flatbuffer)
    index, op = next((k, o) for k, o in enumerate(summary.operators)
                     if o.name == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    hybrid = summary.tensors[op.inputs[1]].dtype == "INT8"
    W, R = weights["W"][0], weights["R"][0]
    quantized_w = W[:H].size >= options.get("weight_only_min_elements", 1024)
    dW = gate_steps(W) / 2 if quantized_w else np.zeros_like(W)
    dR = gate_steps(R) / 2
    x = np.random.default_rng(RNG_SEED + 1).standard_normal((T, NB, input_size)).astype(np.float32)
    h, bound = lstm_reference_and_bound(x, W, R, weights["B"][0], dW, dR, hybrid)
    expected = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(h, expected["y"][:, 0], atol=1e-5, err_msg="numpy LSTM != onnxruntime")
    actual = run_tflite(flatbuffer, report, {"x": x})
    ratio = measure(actual, expected, {"y": bound[:, None]})
    return flatbuffer, summary, op, index, ratio


def test_weight_only_lstm_runs_hybrid():
    """Eight int8 gate matrices (one scale each, zero point 0) read directly by a version-3 LSTM
    with asymmetric_quantize_inputs; gate biases stay float32; no DEQUANTIZE."""
    flatbuffer, summary, op, index, ratio = lstm_run(H)
    W, R = lstm_weights(H)["W"][0], lstm_weights(H)["R"][0]
    # TFLite's inputs 1-4 are input-to-{i, f, c, o}, 5-8 recurrent-to-{i, f, c, o}.
    for k, gate in enumerate("ifco"):
        row = GATES.index(gate) * H
        check_int8_weight(flatbuffer, summary.tensors[op.inputs[1 + k]], W[row:row + H], None)
        check_int8_weight(flatbuffer, summary.tensors[op.inputs[5 + k]], R[row:row + H], None)
    assert all(is_float32_constant(summary.tensors[i]) for i in op.inputs[12:16])
    assert (op.version, option(flatbuffer, index, "AsymmetricQuantizeInputs")) == (3, True)
    assert summary.tensors[op.inputs[0]].dtype == "FLOAT32" == summary.tensors[op.outputs[0]].dtype
    assert "DEQUANTIZE" not in summary.op_counts, summary.op_counts
    print(f"\nlstm hybrid: max error / allowed {ratio:.3f}")


def test_weight_only_lstm_with_small_input_weights_dequantizes():
    """Input size 8: the input-to-gate matrices (256 elements) stay float32, so the LSTM cannot
    run hybrid (its kernel wants all eight int8); the recurrent ones are read through DEQUANTIZE
    and the op stays the float version 1."""
    flatbuffer, summary, op, _, ratio = lstm_run(8)
    assert [summary.tensors[i].dtype for i in op.inputs[1:5]] == ["FLOAT32"] * 4
    producers = {o.outputs[0]: o for o in summary.operators}
    for i in op.inputs[5:9]:
        dequantize = producers[i]
        assert dequantize.name == "DEQUANTIZE" and summary.tensors[dequantize.inputs[0]].dtype == "INT8"
    assert summary.op_counts["DEQUANTIZE"] == 4 and op.version == 1
    print(f"\nlstm dequantized: max error / allowed {ratio:.3f}")


def test_weight_only_lstm_biases_stay_float_below_their_size():
    """With the threshold at the bias size the gate biases are still biases: float32."""
    _, summary, op, _, _ = lstm_run(H, weight_only_min_elements=H)
    assert all(is_float32_constant(summary.tensors[i]) for i in op.inputs[12:16])


def two_dense():
    """Two Gemms reading x: a big weight (64 x 32, 2048 elements) and a small one (64 x 8, 512)."""
    rng = np.random.default_rng(RNG_SEED)
    weights = {"w1": channel_weights(rng, (64, 32), 1), "b1": rng.standard_normal(32).astype(np.float32),
               "w2": channel_weights(rng, (64, 8), 1), "b2": rng.standard_normal(8).astype(np.float32)}

    def build(inits):
        nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["y1"]),
                 helper.make_node("Gemm", ["x", "w2", "b2"], ["y2"])]
        return make_model(nodes, {"x": (F, (4, 64))}, {"y1": F, "y2": F}, inits)
    return build, weights, {"x": rng.standard_normal((4, 64)).astype(np.float32)}


@pytest.mark.parametrize("min_elements, quantized", [
    (1024, {"w1"}),  # the default: the 512-element weight stays float32
    (512, {"w1", "w2"}),
    (8, {"w1", "w2"}),  # biases of 32 and 8 elements are at the threshold: still float32
    (4096, set()),
])
def test_weight_only_threshold(min_elements, quantized):
    build, weights, feeds = two_dense()
    model = build(weights)
    flatbuffer, report = convert_proto(model, weights="int8", weight_only_min_elements=min_elements)
    summary = read_tflite(flatbuffer)
    fcs = [op for op in summary.operators if op.name == "FULLY_CONNECTED"]
    assert len(fcs) == 2 and "DEQUANTIZE" not in summary.op_counts, summary.op_counts
    by_output = {summary.tensors[op.outputs[0]].name: op for op in fcs}
    for k in (1, 2):
        op = by_output[f"y{k}"]
        w, b = summary.tensors[op.inputs[1]], summary.tensors[op.inputs[2]]
        assert is_float32_constant(b), b
        if f"w{k}" in quantized:
            check_int8_weight(flatbuffer, w, weights[f"w{k}"].T, 0)
            assert op.version == 12
        else:
            assert w.dtype == "FLOAT32" and op.version == 1, (w, op)
    assert len(report.weights.tensors) == len(quantized), report.weights
    assert sum(t.dtype == "INT8" for t in summary.tensors) == len(quantized)
    deltas = {name: weight_steps(weights[name], 1) / 2 for name in quantized}
    dx = input_half_steps(feeds["x"], (-1,), True)
    bounds = linear_op_bound(build, weights, feeds, deltas, dx, quantized)
    actual, expected = run_tflite(flatbuffer, report, feeds), run_onnxruntime(model, feeds)
    for k in (1, 2):
        name = f"y{k}"
        if f"w{k}" in quantized:
            measure({name: actual[name]}, {name: expected[name]}, bounds)
        else:
            np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5, atol=1e-5)


FLOAT16_CASES = ["gemm_fc", "conv", "add_mul_constant", "gather_table"]


@pytest.mark.parametrize("case_id", FLOAT16_CASES)
def test_float16_op(case_id):
    """Every float32 constant (weights and biases, any size) is stored as float16 (round to
    nearest even) and read through its own DEQUANTIZE (version 3); the output errs by at most the
    weights' float16 rounding, propagated."""
    case = CASES[case_id]
    model = case.build(case.weights)
    flatbuffer, report = convert_proto(model, weights="float16")
    summary = read_tflite(flatbuffer)
    constants = [t for t in summary.tensors if t.data_offset is not None and t.dtype.startswith("FLOAT")]
    assert {t.dtype for t in constants} == {"FLOAT16"} and len(constants) == len(case.weights), constants
    dequantize = [op for op in summary.operators if op.name == "DEQUANTIZE"]
    assert len(dequantize) == len(case.weights) and {op.version for op in dequantize} == {3}
    producers = {op.outputs[0]: op for op in dequantize}
    op = next(o for o in summary.operators if o.name == case.op)
    slots = {case.weight: WEIGHT_INPUT.get(case.op, 1), "b": 2}
    for name, value in case.weights.items():
        source = producers[op.inputs[slots[name]]]
        assert len(readers_of(summary, source.inputs[0])) == 1
        assert len(readers_of(summary, source.outputs[0])) == case.readers
        stored = tensor_values(flatbuffer, summary.tensors[source.inputs[0]])
        want = case.to_file(value) if name == case.weight else value
        np.testing.assert_array_equal(stored, want.astype(np.float16), err_msg=name)
    assert report.weights.mode == "float16" and len(report.weights.tensors) == len(case.weights)

    deltas = {name: np.maximum(np.abs(w.astype(np.float64)) * FP16_REL, FP16_SUBNORMAL)
              for name, w in case.weights.items()}
    actual = run_tflite(flatbuffer, report, case.feeds)
    expected = run_onnxruntime(model, case.feeds)
    ratio = measure(actual, expected, (case.bound or bilinear_bound)(case, case.feeds, deltas, None))
    print(f"\n{case_id} float16: max error / allowed {ratio:.3f}")


def test_weight_only_lstm_with_peepholes_runs_hybrid_with_int8_peepholes():
    """The hybrid LSTM kernel wants every weight int8: the [H] peepholes, far below the size
    threshold, are quantized with the gate matrices (HybridRule.companions) rather than left
    float, which the kernel refuses."""
    weights = lstm_weights(H)
    peepholes = np.random.default_rng(RNG_SEED + 2).standard_normal((1, 3 * H)) * 0.3
    weights["P"] = peepholes.astype(np.float32)
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "", "", "P"], ["y"], hidden_size=H)
    model = make_model([node], {"x": (F, (T, NB, H))}, {"y": F}, weights, opset=14)
    flatbuffer, report = convert_proto(model, weights="int8")
    summary = read_tflite(flatbuffer)
    op = next(o for o in summary.operators if o.name == "UNIDIRECTIONAL_SEQUENCE_LSTM")
    assert [summary.tensors[i].dtype for i in op.inputs[1:12]] == ["INT8"] * 11
    x = np.random.default_rng(RNG_SEED + 1).standard_normal((T, NB, H)).astype(np.float32)
    error = np.abs(run_tflite(flatbuffer, report, {"x": x})["y"] - run_onnxruntime(model, {"x": x})["y"])
    assert 0 < error.max() < 0.05  # measured 0.024; hidden values lie in (-1, 1)
