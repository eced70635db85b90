"""Activations (qconvert/ops/activations.py) and the Gelu pattern (transforms/identify_gelu.py),
against onnxruntime: each op after a Conv (NHWC after the layout pass) and on a plain input."""

import math

import numpy as np
import pytest
from onnx import helper

from onnx import numpy_helper

from tests.harness import (
    assert_int8_matches_onnxruntime,
    assert_matches_onnxruntime,
    calibration_set,
    conv_in_front,
)
from tests.ops.test_unary import NCHW, after_conv, feed, make_model, plain

# (ONNX op, attributes, opset)
CASES = [
    ("Relu", {}, 13), ("Sigmoid", {}, 13), ("Tanh", {}, 13),
    ("LeakyRelu", {}, 13), ("LeakyRelu", {"alpha": 0.3}, 13), ("LeakyRelu", {"alpha": 1.7}, 13),
    ("Elu", {}, 13), ("Elu", {"alpha": 0.4}, 13),
    ("Selu", {}, 13), ("Selu", {"alpha": 2.0, "gamma": 0.5}, 13),
    ("Celu", {}, 13), ("Celu", {"alpha": 2.5}, 13),
    ("HardSigmoid", {}, 13), ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, 13),
    ("HardSwish", {}, 14), ("Softplus", {}, 13),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
    ("Swish", {}, 24), ("Swish", {"alpha": 1.702}, 24),
]
IDS = [f"{op}-{'-'.join(f'{k}{v}' for k, v in attrs.items())}" for op, attrs, _ in CASES]
EXPECTED_OPS = {"Sigmoid": "LOGISTIC", "Tanh": "TANH", "LeakyRelu": "LEAKY_RELU",
                "HardSwish": "HARD_SWISH", "Gelu": "GELU", "Swish": "LOGISTIC", "Elu": "ELU", "Selu": "ELU", "Celu": "ELU"}


@pytest.mark.parametrize("op_type,attrs,opset", CASES, ids=IDS)
def test_after_conv(op_type, attrs, opset):
    model = after_conv(op_type, attrs, opset=opset)
    _, report = assert_matches_onnxruntime(model, feed(NCHW))
    assert report.transposes == 0
    if op_type in EXPECTED_OPS:
        assert EXPECTED_OPS[op_type] in report.op_counts


@pytest.mark.parametrize("op_type,attrs,opset", CASES, ids=IDS)
@pytest.mark.parametrize("shape", [(4, 7), (2, 3, 5)])
def test_plain(op_type, attrs, opset, shape):
    assert_matches_onnxruntime(plain(op_type, shape, attrs, opset=opset), feed(shape, -5.0, 5.0))


def test_softplus_is_stable_for_large_inputs():
    x = np.array([[-200, -90, -30, -1e-3, 0, 1e-3, 30, 90, 200, 1e30]], np.float32)
    assert_matches_onnxruntime(plain("Softplus", x.shape), {"x": x}, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("slope_shape", [(4, 1, 1), (1,), (4, 5, 1)])
def test_prelu_after_conv(slope_shape):
    slope = np.random.default_rng(3).uniform(0.05, 0.5, slope_shape).astype(np.float32)
    model = after_conv("PRelu", extra_inputs=["slope"], inits={"slope": slope})
    _, report = assert_matches_onnxruntime(model, feed(NCHW))
    assert report.transposes == 0 and report.op_counts.get("PRELU") == 1


@pytest.mark.parametrize("shape,slope_shape", [((4, 7), (7,)), ((2, 3, 5), (3, 1)), ((2, 3, 5), ())])
def test_prelu_plain(shape, slope_shape):
    slope = np.random.default_rng(4).uniform(-0.5, 0.5, slope_shape).astype(np.float32)
    model = plain("PRelu", shape, extra_inputs=["slope"], inits={"slope": slope})
    assert_matches_onnxruntime(model, feed(shape))


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-1.0, 1.0), (0.0, None), (-0.5, 2.5), (None, 0.7)])
@pytest.mark.parametrize("conv", [True, False])
def test_clip(bounds, conv):
    names = [f"b{i}" if b is not None else "" for i, b in enumerate(bounds)]
    inits = {n: np.array(b, np.float32) for n, b in zip(names, bounds) if n}
    if conv:
        model, shape = after_conv("Clip", extra_inputs=names, inits=inits), NCHW
    else:
        model, shape = plain("Clip", (3, 4, 5), extra_inputs=names, inits=inits), (3, 4, 5)
    _, report = assert_matches_onnxruntime(model, feed(shape, -8.0, 8.0))
    assert report.transposes == 0


# --- the Gelu pattern ---------------------------------------------------------------------------
def _c(name, value):
    return {name: np.array(value, np.float32)}


def _gelu_nodes(variant: str, x: str = "x"):
    """Node lists (and constants) of the exported forms of gelu(x), writing y."""
    n = helper.make_node
    scale = [n("Div", [x, "k"], ["z"])] if variant != "bert" else [n("Mul", ["k", x], ["z"])]
    k = _c("k", 1.4142135381698608 if variant != "bert" else 0.7071067690849304)
    erf = scale + [n("Erf", ["z"], ["e"]), n("Add", ["e", "one"], ["a"])]
    consts = {**k, **_c("one", 1.0), **_c("half", 0.5)}
    if variant == "torch":  # (x * (erf + 1)) * 0.5
        return erf + [n("Mul", [x, "a"], ["m"]), n("Mul", ["m", "half"], ["y"])], consts
    if variant == "hf":  # (x * 0.5) * (1 + erf)
        return erf + [n("Mul", [x, "half"], ["h"]), n("Mul", ["h", "a"], ["y"])], consts
    if variant == "bert":  # x * ((1 + erf) * 0.5)
        return erf + [n("Mul", ["a", "half"], ["h"]), n("Mul", [x, "h"], ["y"])], consts
    if variant == "tanh":  # PyTorch's gelu(approximate="tanh") export
        nodes = [n("Mul", [x, x], ["x2"]), n("Mul", [x, "x2"], ["x3"]), n("Mul", ["kappa", "x3"], ["kx3"]),
                 n("Add", [x, "kx3"], ["inner"]), n("Mul", ["beta", "inner"], ["scaled"]),
                 n("Tanh", ["scaled"], ["th"]), n("Add", ["one", "th"], ["a"]),
                 n("Mul", [x, "a"], ["m"]), n("Mul", ["half", "m"], ["y"])]
        return nodes, {**_c("kappa", 0.044715), **_c("beta", math.sqrt(2 / math.pi)),
                       **_c("one", 1.0), **_c("half", 0.5)}
    raise ValueError(variant)


@pytest.mark.parametrize("variant", ["torch", "hf", "bert", "tanh"])
@pytest.mark.parametrize("conv", [False, True])
def test_gelu_pattern_becomes_one_op(variant, conv):
    nodes, consts = _gelu_nodes(variant, "t" if conv else "x")
    if conv:
        weights = np.random.default_rng(5).standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.4
        nodes = [helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1])] + nodes
        consts["w"] = weights
    shape = NCHW if conv else (2, 3, 5)
    # Tight tolerance: the exact and tanh forms differ by up to 5e-4 (around |x| = 2).
    x = {"x": np.linspace(-4, 4, int(np.prod(shape)), dtype=np.float32).reshape(shape)}
    _, report = assert_matches_onnxruntime(make_model(nodes, shape, consts), x, rtol=1e-5, atol=2e-6)
    expected = {"GELU": 1, "CONV_2D": 1} if conv else {"GELU": 1}
    assert report.op_counts == expected


def test_near_miss_is_not_gelu():
    nodes, consts = _gelu_nodes("torch")
    consts["half"] = np.array(0.6, np.float32)
    _, report = assert_matches_onnxruntime(make_model(nodes, (2, 3, 5), consts), feed((2, 3, 5)))
    assert "GELU" not in report.op_counts


def test_gelu_pattern_with_shared_intermediate_stays_correct():
    """The erf output is also a graph output: GELU replaces the product, the erf ops stay."""
    nodes, consts = _gelu_nodes("torch")
    model = make_model(nodes, (2, 3, 5), consts)
    model.graph.output.append(helper.make_tensor_value_info("e", 1, None))
    _, report = assert_matches_onnxruntime(model, feed((2, 3, 5)))
    assert report.op_counts.get("GELU") == 1


def _numpy_run(onnx_model, feeds):
    """Converts to the IR and computes it with each op's numpy `evaluate` (constant folding's
    view of the ops), in ONNX layout."""
    from qconvert.onnx.loader import load
    from qconvert.ops.activations import apply_fused_activation
    from qconvert.ops.registry import TFLITE_OPS
    from qconvert.transforms.pipeline import run_pipeline

    model = load(onnx_model)
    run_pipeline(model, io_layout="onnx")
    values = {name: model.constant(name) for name in model.arrays if model.constant(name) is not None}
    values.update(feeds)
    for op in model.operators:
        results = TFLITE_OPS[op.type].evaluate([values.get(n) for n in op.inputs], op)
        for name, value in zip(op.outputs, results):
            values[name] = apply_fused_activation(np.asarray(value), op.fused_activation)
    return values["y"]


UNARY_CASES = [(op, {}, 13) for op in ("Sqrt", "Exp", "Log", "Abs", "Neg", "Reciprocal", "Floor",
                                       "Ceil", "Round", "Sin", "Cos", "Erf", "Softsign")]


@pytest.mark.parametrize("op_type,attrs,opset", CASES + UNARY_CASES,
                         ids=IDS + [c[0] for c in UNARY_CASES])
def test_numpy_evaluate_matches_onnxruntime(op_type, attrs, opset):
    from tests.harness import run_onnxruntime

    model = plain(op_type, (3, 4), attrs, opset=opset)
    x = feed((3, 4), 0.1 if op_type in ("Sqrt", "Log", "Reciprocal") else -4.0, 4.0)
    np.testing.assert_allclose(_numpy_run(model, x), run_onnxruntime(model, x)["y"],
                               rtol=1e-5, atol=1e-6)



# --- Clip with bounds computed at run time ------------------------------------------------------
def _clip_computed(low: str, high: str, conv: bool = False):
    """Clip of x [1, 4, 10] (or of a Conv's NCHW output) with bounds `low`/`high`: "max-80" (a
    log-mel front end's ReduceMax(x) - 80), "mean" (ReduceMean(x)), a number (a constant) or ""
    (none)."""
    source = "fm" if conv else "x"
    nodes, inits, inputs = [], {"k80": np.array(80, np.float32)}, [source]
    if conv:
        node, w = conv_in_front(NCHW, 4)
        nodes.append(node)
        inits["w"] = numpy_helper.to_array(w)
    for i, bound in enumerate((low, high)):
        name = f"b{i}"
        if bound == "max-80":
            nodes += [helper.make_node("ReduceMax", [source], [f"m{i}"], keepdims=0),
                      helper.make_node("Sub", [f"m{i}", "k80"], [name])]
        elif bound == "mean":
            nodes.append(helper.make_node("ReduceMean", [source], [name], keepdims=0))
        elif bound:
            inits[name] = np.array(float(bound), np.float32)
        inputs.append(name if bound else "")
    nodes.append(helper.make_node("Clip", inputs, ["y"], name="clip"))
    return make_model(nodes, NCHW if conv else (1, 4, 10), inits)


COMPUTED_BOUNDS = [("max-80", ""), ("", "mean"), ("max-80", "mean"), ("-60", "mean"), ("mean", "5")]


@pytest.mark.parametrize("bounds", COMPUTED_BOUNDS, ids="/".join)
@pytest.mark.parametrize("conv", [False, True])
def test_clip_with_computed_bounds_reads_them_as_tensors(bounds, conv):
    """A bound computed at run time is the tensor MAXIMUM/MINIMUM reads (TFLite takes one);
    the values span -100..0 dB so that ReduceMax(x) - 80 cuts some of them."""
    model = _clip_computed(*bounds, conv=conv)
    _, report = assert_matches_onnxruntime(model, feed(NCHW if conv else (1, 4, 10), -100.0, 0.0),
                                           rtol=1e-5, atol=1e-4)
    assert report.op_counts.get("MAXIMUM", 0) == bool(bounds[0])
    assert report.op_counts.get("MINIMUM", 0) == bool(bounds[1])
    # After a conv no TRANSPOSE stays: a computed scalar bound has no layout, so sink_transposes
    # moves the layout transposes past MAXIMUM/MINIMUM as past a constant bound.
    assert report.transposes == 0


def test_clip_with_computed_bound_runs_int8(tmp_path):
    """The log-mel clip quantized: MAXIMUM's int8 kernel reads x and the bound with one shared
    scale (a same-scale op), so nothing stays float and the output is within two steps."""
    model = _clip_computed("max-80", "")
    calibration = calibration_set(model, scale=30.0)
    calibration["x"] = calibration["x"] - 50.0  # dB-like: -140..40
    _, report = assert_int8_matches_onnxruntime(model, tmp_path, calibration)
    assert report.op_counts.get("MAXIMUM") == 1


def test_swish_of_alpha_1_is_the_silu_ops():
    """Swish with alpha 1 is SiLU: the LOGISTIC and MUL that the SiLU pattern becomes
    (transforms/identify_activations.py), nothing more."""
    _, report = assert_matches_onnxruntime(plain("Swish", (2, 3, 5), {}, opset=24), feed((2, 3, 5), -8.0, 8.0))
    assert report.op_counts == {"LOGISTIC": 1, "MUL": 1}


def test_relu_of_integers():
    """Opset 14's integer Relu: MAXIMUM with 0 (TFLite's RELU has no int32 kernel)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    from tests.harness import assert_matches_onnxruntime as matches
    from tests.harness import make_model as model_of

    for elem_type, dtype in ((T.INT32, np.int32), (T.INT8, np.int8)):  # onnxruntime: no int64 Relu
        model = model_of([h.make_node("Relu", ["x"], ["y"])], {"x": (elem_type, [2, 5])},
                         {"y": elem_type}, opset=14)
        x = np.arange(-5, 5, dtype=dtype).reshape(2, 5)
        matches(model, {"x": x}, rtol=0, atol=0)
