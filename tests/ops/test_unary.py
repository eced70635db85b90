"""Unary math ops (qconvert/ops/unary.py) and Pow's exponent dtype (elementwise.py), against
onnxruntime: each op after a Conv (so it runs in NHWC after the layout pass) and on a plain input."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.ops.registry import TFLITE_OPS
from qconvert.ops.unary import erf_reference
from tests.harness import assert_matches_onnxruntime, convert_proto, run_onnxruntime, run_tflite

NCHW = (2, 3, 5, 6)
RNG = np.random.default_rng(7)


def make_model(nodes, x_shape, inits=None, opset=13, x_type=TensorProto.FLOAT):
    """A graph x -> nodes -> y; `inits` maps initializer names to arrays."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", x_type, list(x_shape))],
        [helper.make_tensor_value_info("y", x_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def after_conv(op_type, attrs=None, extra_inputs=(), inits=None, opset=13, positive=False):
    """x[2,3,5,6] -> Conv(4 channels, 3x3, pad 1) -> op -> y; `positive` keeps the conv output > 0."""
    weights = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    if positive:
        weights = np.abs(weights) + 0.01
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1, 1, 1, 1]),
             helper.make_node(op_type, ["t", *extra_inputs], ["y"], **(attrs or {}))]
    bias = RNG.standard_normal(4).astype(np.float32) * 0.1
    all_inits = {"w": weights, "b": np.abs(bias) if positive else bias, **(inits or {})}
    return make_model(nodes, NCHW, all_inits, opset)


def plain(op_type, shape, attrs=None, extra_inputs=(), inits=None, opset=13):
    nodes = [helper.make_node(op_type, ["x", *extra_inputs], ["y"], **(attrs or {}))]
    return make_model(nodes, shape, inits, opset)


def feed(shape, low=-3.0, high=3.0):
    return {"x": RNG.uniform(low, high, shape).astype(np.float32)}


POSITIVE = {"Sqrt", "Log", "Reciprocal"}
UNARY = ["Sqrt", "Exp", "Log", "Abs", "Neg", "Reciprocal", "Floor", "Ceil", "Round", "Sin", "Cos",
         "Erf", "Softsign"]


@pytest.mark.parametrize("op_type", UNARY)
def test_after_conv(op_type):
    positive = op_type in POSITIVE
    model = after_conv(op_type, positive=positive)
    _, report = assert_matches_onnxruntime(model, feed(NCHW, 0.1 if positive else -3.0))
    assert report.transposes == 0  # the op ran in NHWC: no transposes left


@pytest.mark.parametrize("op_type", UNARY)
@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 5)])
def test_plain(op_type, shape):
    low = 0.1 if op_type in POSITIVE else -4.0
    assert_matches_onnxruntime(plain(op_type, shape), feed(shape, low, 4.0))


def test_round_is_half_to_even():
    x = np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997]], np.float32)
    assert_matches_onnxruntime(plain("Round", x.shape), {"x": x}, rtol=0, atol=0)


def test_abs_and_neg_of_int():
    for op_type in ("Abs", "Neg"):
        model = make_model([helper.make_node(op_type, ["x"], ["y"])], (3, 4),
                           x_type=TensorProto.INT32)
        x = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
        assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)


def test_erf_accuracy_over_its_range():
    """The rational approximation: < 1e-6 absolute from the tails to tiny arguments."""
    x = np.concatenate([np.linspace(-7, 7, 1001), np.geomspace(1e-7, 1e-2, 40)]).astype(np.float32)
    flatbuffer, report = convert_proto(plain("Erf", x.shape))
    got = run_tflite(flatbuffer, report, {"x": x})["y"]
    np.testing.assert_allclose(got, erf_reference(x), rtol=1e-6, atol=5e-7)
    assert np.all(np.abs(got) <= 1)


def test_erf_ops_are_tagged():
    from qconvert.onnx.loader import load
    from qconvert.ops.unary import ERF_MARK

    model = load(plain("Erf", (3, 4)))
    assert model.operators and all(op.source.endswith(ERF_MARK) for op in model.operators)


@pytest.mark.parametrize("exponent", [np.array(3, np.int64), np.array([2, 3, 1, 0], np.int32),
                                      np.array(-1.5, np.float32)])
def test_pow_constant_exponent_dtype(exponent):
    model = plain("Pow", (3, 4), extra_inputs=["e"], inits={"e": exponent})
    assert_matches_onnxruntime(model, feed((3, 4), 0.5, 2.0))


def test_pow_activation_int_exponent_is_cast():
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("e", TensorProto.INT64, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    feeds = {"x": RNG.uniform(0.5, 2, (3, 4)).astype(np.float32),
             "e": RNG.integers(-2, 4, (3, 4)).astype(np.int64)}
    _, report = assert_matches_onnxruntime(model, feeds)
    assert report.op_counts.get("POW") == 1


def test_pow_after_conv():
    model = after_conv("Pow", extra_inputs=["e"], inits={"e": np.array(3, np.int32)})
    _, report = assert_matches_onnxruntime(model, feed(NCHW))
    assert report.transposes == 0


def test_versions():
    """op_version.cc: ABS int32 is 5, float 1; RSQRT int8 2, int16 3; EXP/LOG int8 2."""
    from qconvert.ir import Model, Operator

    model = Model()
    for dtype in (np.float32, np.int32, np.int8, np.int16):
        model.add_array(np.dtype(dtype).name, (2,), dtype)

    def version(op_type, dtype):
        return TFLITE_OPS[op_type].version(Operator(op_type, [np.dtype(dtype).name], []), model)

    assert [version("ABS", t) for t in (np.float32, np.int32, np.int8, np.int16)] == [1, 5, 2, 4]
    assert [version("RSQRT", t) for t in (np.float32, np.int8, np.int16)] == [1, 2, 3]
    assert [version("EXP", t) for t in (np.float32, np.int8)] == [1, 2]
    assert version("SQRT", np.float32) == version("FLOOR", np.float32) == 1


def test_erf_rejects_integer_input():
    from qconvert.errors import ConversionError

    model = make_model([helper.make_node("Erf", ["x"], ["y"])], (3,), x_type=TensorProto.INT32)
    # The schema's type check (qconvert/onnx/validate.py) refuses it before the importer would.
    with pytest.raises(ConversionError, match=r"'x' is tensor\(int32\), which input does not take"):
        convert_proto(model)


# The trigonometric and hyperbolic functions: (domain low, high) for random inputs, numpy's twin.
TRIGONOMETRIC = {"Tan": ((-1.5, 1.5), np.tan), "Atan": ((-20, 20), np.arctan),
                 "Asin": ((-1, 1), np.arcsin), "Acos": ((-1, 1), np.arccos),
                 "Sinh": ((-10, 10), np.sinh), "Cosh": ((-10, 10), np.cosh),
                 "Asinh": ((-50, 50), np.arcsinh), "Acosh": ((1, 50), np.arccosh),
                 "Atanh": ((-1, 1), np.arctanh)}


def in_domain_after_conv(op_type):
    """after_conv's model with the conv output brought into op_type's domain: Tanh for the
    functions of [-1, 1], 1 + |t| for Acosh."""
    model = after_conv(op_type)
    (low, _), _ = TRIGONOMETRIC[op_type]
    if low == -1 or op_type == "Acosh":
        model.graph.node[1].input[0] = "t_in"
        fix = ([helper.make_node("Tanh", ["t"], ["t_in"])] if low == -1 else
               [helper.make_node("Abs", ["t"], ["t_abs"]), helper.make_node("Add", ["t_abs", "one"], ["t_in"])])
        for node in reversed(fix):
            model.graph.node.insert(1, node)
        model.graph.initializer.append(numpy_helper.from_array(np.array(1, np.float32), "one"))
    return model


@pytest.mark.parametrize("op_type", sorted(TRIGONOMETRIC))
def test_trigonometric(op_type):
    (low, high), _ = TRIGONOMETRIC[op_type]
    assert_matches_onnxruntime(plain(op_type, (4, 50)), feed((4, 50), low, high), rtol=2e-5)
    # Small inputs keep the conv output away from the ill-conditioned ends (tan near pi/2, asin
    # near 1), where the conv's own rounding would be amplified.
    _, report = assert_matches_onnxruntime(in_domain_after_conv(op_type), feed(NCHW, -0.3, 0.3), rtol=2e-5)
    assert report.transposes == 0


def accuracy_inputs(low, high):
    """Values across the domain, tiny magnitudes, its edges and special values."""
    dense = np.linspace(max(low, -100), min(high, 100), 4001)
    tiny = np.geomspace(1e-8, 1, 300)
    edges = [low, high, np.nextafter(np.float32(high), 0), np.nextafter(np.float32(low), 0)]
    x = np.concatenate([dense, tiny, -tiny, 1 + tiny, edges]).astype(np.float32)
    return x[(x >= low) & (x <= high)]


@pytest.mark.parametrize("op_type", sorted(TRIGONOMETRIC))
def test_trigonometric_accuracy(op_type):
    """With TFLite's builtin kernels the compositions are within 5 float32 ulps of the exact
    value (numpy in float64) across their domains, tiny arguments included; the domain's
    edges, infinities and NaN as ONNX has them (onnxruntime)."""
    (low, high), exact = TRIGONOMETRIC[op_type]
    low, high = {"Sinh": (-89, 89), "Cosh": (-89, 89), "Asinh": (-1e30, 1e30), "Acosh": (1, 1e30),
                 "Atan": (-1e30, 1e30)}.get(op_type, (low, high))
    x = accuracy_inputs(low, high)
    flatbuffer, report = convert_proto(plain(op_type, x.shape))
    got = run_tflite(flatbuffer, report, {"x": x}, reference_kernels=True)["y"]
    with np.errstate(divide="ignore"):  # atanh(+-1)
        want = exact(x.astype(np.float64))
    finite = np.isfinite(want)
    ulps = np.abs(got[finite] - want[finite]) / np.spacing(np.abs(want[finite]).astype(np.float32))
    assert ulps.max() <= 5, (op_type, x[finite][np.argmax(ulps)], ulps.max())
    special = np.array([np.nan, np.inf, -np.inf, 2.0, -2.0, 0.5, 0.0, -0.0, 1.0, -1.0], np.float32)
    model = plain(op_type, special.shape)
    flatbuffer, report = convert_proto(model)
    got = run_tflite(flatbuffer, report, {"x": special}, reference_kernels=True)["y"]
    want = run_onnxruntime(model, {"x": special})["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    kept = np.abs(want) < np.inf  # the reference kernels clamp infinities to the float32 max
    np.testing.assert_allclose(got[kept], want[kept], rtol=3e-7)


@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32])
def test_sign(elem_type):
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    x = np.array([[-3, -1, 0, 0, 2, 7]], dtype)
    if elem_type == TensorProto.FLOAT:
        x = np.array([[-3.5, -1e-30, -0.0, 0.0, 2e-45, np.inf, -np.inf, np.nan]], np.float32)
    model = make_model([helper.make_node("Sign", ["x"], ["y"])], x.shape, x_type=elem_type)
    flatbuffer, _ = assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)
    if elem_type != TensorProto.FLOAT:  # SIGN's int32 kernel is version 2
        from qconvert.tflite.reader import read

        assert [op for op in read(flatbuffer).ops if op[0] == "SIGN"] == [("SIGN", 2)]


def test_sign_of_negative_zero_is_zero():
    """Sign(-0.0) is 0 (onnxruntime's 0): a -0.0 fed and one computed (Neg of 0), on the optimized
    and the reference kernels."""
    model = make_model([helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Sign", ["n"], ["y"])],
                       (2, 64))
    x = np.zeros((2, 64), np.float32)
    x[0] = -0.0
    assert np.all(run_onnxruntime(model, {"x": x})["y"] == 0)
    flatbuffer, report = convert_proto(model)
    for reference in (False, True):
        assert np.all(run_tflite(flatbuffer, report, {"x": x}, reference_kernels=reference)["y"] == 0)


def test_sign_after_conv():
    _, report = assert_matches_onnxruntime(after_conv("Sign"), feed(NCHW), rtol=0, atol=0)
    assert report.transposes == 0


def test_atan2_as_tf2onnx_writes_it():
    """tf2onnx's Atan2(y, x): atan(y / x) plus pi * sign(y) where x < 0 (Where on Less), with
    x = 0 taken apart (sign(y) * pi / 2), built from Atan, Div, Sign, Less, Where, Mul, Add."""
    from onnx import TensorProto as T

    nodes = [
        helper.make_node("Div", ["y", "x"], ["ratio"]),
        helper.make_node("Atan", ["ratio"], ["atan"]),
        helper.make_node("Sign", ["y"], ["sign_y"]),
        helper.make_node("Less", ["x", "zero"], ["x_negative"]),
        helper.make_node("Mul", ["sign_y", "pi"], ["turn"]),
        helper.make_node("Where", ["x_negative", "turn", "zero"], ["correction"]),
        helper.make_node("Add", ["atan", "correction"], ["quadrant"]),
        helper.make_node("Equal", ["x", "zero"], ["x_zero"]),
        helper.make_node("Mul", ["sign_y", "half_pi"], ["axis"]),
        helper.make_node("Where", ["x_zero", "axis", "quadrant"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes, "atan2", [helper.make_tensor_value_info(n, T.FLOAT, [6, 40]) for n in ("y", "x")],
        [helper.make_tensor_value_info("out", T.FLOAT, None)],
        [numpy_helper.from_array(np.array(v, np.float32), n)
         for n, v in (("zero", 0.0), ("pi", np.pi), ("half_pi", np.pi / 2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    y, x = RNG.standard_normal((2, 6, 40)).astype(np.float32) * 3
    x[0, :5] = 0.0
    y[1, :5] = 0.0
    feeds = {"y": y, "x": x}
    flatbuffer, report = assert_matches_onnxruntime(model, feeds, rtol=1e-6, atol=1e-6)
    off_axis = y != 0  # there the composition is atan2 (on it, 0 where atan2 has +-pi)
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["out"][off_axis],
                               np.arctan2(y, x)[off_axis], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op_type, attrs", [
    ("Mish", {}), ("Shrink", {}), ("Shrink", {"bias": 1.5, "lambd": 1.0}), ("Shrink", {"lambd": -0.5}),
    ("ThresholdedRelu", {}), ("ThresholdedRelu", {"alpha": -0.5})], ids=str)
def test_activations_without_builtin(op_type, attrs):
    x = np.concatenate([np.linspace(-30, 30, 601), [-1.5, -1.0, 1.0, 1.5, -0.5, 0.5, 19.99, 20.01, -100, 100,
                                                   np.inf, -np.inf, np.nan]]).astype(np.float32)
    model = make_model([helper.make_node(op_type, ["x"], ["y"], **attrs)], x.shape, opset=18)
    assert_matches_onnxruntime(model, {"x": x}, rtol=2e-6, atol=1e-7)
    _, report = assert_matches_onnxruntime(after_conv(op_type, attrs, opset=18), feed(NCHW))
    assert report.transposes == 0
