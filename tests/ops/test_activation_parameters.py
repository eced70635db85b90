"""The parameterized activations at every sign of their parameters (negative, zero, positive), on
float32 and float16 inputs, against onnxruntime (issue 32): Elu, Selu, Celu, LeakyRelu,
ThresholdedRelu, HardSigmoid, Shrink, Swish, PRelu, Clip (min > max, one bound omitted, the
attribute form of opset 6), and the parameterless Softplus, Softsign, Gelu approximations."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line

SHAPE = (3, 40)
# (ONNX op, attributes, opset): each parameter at a negative, a zero and a positive value
CASES = [
    *[("Elu", {"alpha": a}, 13) for a in (-0.7, 0.0, 0.4, 2.0)],
    *[("Selu", {"alpha": a, "gamma": g}, 13)
      for a, g in ((-1.2, 1.05), (0.0, 1.05), (1.67, -0.5), (1.67, 0.0), (2.0, 0.5))],
    *[("Celu", {"alpha": a}, 13) for a in (-2.5, -1.0, -0.4, 0.4, 1.0, 2.5)],
    *[("LeakyRelu", {"alpha": a}, 16) for a in (-0.5, 0.0, 0.3, 1.0, 1.7)],
    *[("ThresholdedRelu", {"alpha": a}, 13) for a in (-1.0, 0.0, 1.2)],
    *[("HardSigmoid", {"alpha": a, "beta": b}, 13)
      for a, b in ((-0.3, 0.5), (0.0, 0.7), (0.2, -0.4), (0.2, 0.0), (1.0, 0.0), (1.5, 1.5))],
    *[("Shrink", {"bias": b, "lambd": lam}, 13)
      for b, lam in ((0.3, -0.5), (0.0, 0.0), (-0.4, 0.5), (0.5, 1.0), (1.5, -1.0))],
    *[("Swish", {"alpha": a}, 24) for a in (-1.0, 0.0, 1.702)],
    ("Softplus", {}, 13), ("Softsign", {}, 13), ("HardSwish", {}, 14), ("Mish", {}, 18),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
]
IDS = [f"{op}-{'-'.join(f'{k}{v}' for k, v in attrs.items())}" for op, attrs, _ in CASES]
DTYPES = {"float32": (TensorProto.FLOAT, np.float32), "float16": (TensorProto.FLOAT16, np.float16)}
# Celu's type constraint is float32 only (ONNX); every other op here also takes float16.
FLOAT32_ONLY = {"Celu"}


def _model(op_type, attrs, opset, dtype="float32", inits=None, extra_inputs=()):
    elem, np_type = DTYPES[dtype]
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x", *extra_inputs], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", elem, list(SHAPE))],
        [helper.make_tensor_value_info("y", elem, None)],
        [numpy_helper.from_array(np.asarray(v, np_type), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _feeds(dtype, low=-6.0, high=6.0):
    """A sweep of [low, high] with 0 and the parameter values' neighbourhoods in it."""
    x = np.linspace(low, high, SHAPE[0] * SHAPE[1]).reshape(SHAPE)
    return {"x": x.astype(DTYPES[dtype][1])}


def _tolerance(dtype):
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == "float32" else {"rtol": 2e-3, "atol": 2e-3}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_type,attrs,opset", CASES, ids=IDS)
def test_parameter_signs(op_type, attrs, opset, dtype):
    if dtype != "float32" and op_type in FLOAT32_ONLY:
        pytest.skip(f"{op_type} takes float32 only")
    assert_matches_onnxruntime(_model(op_type, attrs, opset, dtype), _feeds(dtype), **_tolerance(dtype))


def test_celu_overflow_with_negative_alpha():
    """alpha < 0: the negative side alpha * (exp(x / alpha) - 1) runs to -inf, as onnxruntime's."""
    model = _model("Celu", {"alpha": -0.5}, 13)
    x = np.array([-200.0, -50.0, -30.0, -1e-3, 0.0, 1e-3, 30.0, 200.0] * 15, np.float32).reshape(SHAPE)
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-5, atol=1e-6)


def test_celu_alpha_zero_is_refused():
    """alpha 0 divides by zero (ONNX leaves it undefined)."""
    assert_refused_in_one_line(_model("Celu", {"alpha": 0.0}, 13), "Celu.*alpha 0 divides by zero")


# Clip: (min, max) as constant inputs (None omits the bound) at opset 13, or attributes at opset 6
CLIPS = [(-1.0, 1.0), (0.0, 6.0), (0.0, None), (2.0, -1.0), (0.5, 0.5), (None, 0.5), (-0.5, None),
         (None, None), (1.0, 0.0)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("low,high", CLIPS, ids=[f"{lo}_{hi}" for lo, hi in CLIPS])
def test_clip_bounds(low, high, dtype):
    inputs = ["lo" if low is not None else "", "hi" if high is not None else ""]
    while inputs and not inputs[-1]:
        inputs.pop()
    inits = {name: value for name, value in (("lo", low), ("hi", high)) if value is not None}
    model = _model("Clip", {}, 13, dtype, inits=inits, extra_inputs=inputs)
    assert_matches_onnxruntime(model, _feeds(dtype), **_tolerance(dtype))


@pytest.mark.parametrize("low,high", [(-1.0, 1.0), (0.0, 6.0), (0.5, 0.5), (-2.0, -0.5)])
def test_clip_attributes_opset6(low, high):
    """Clip-6's bounds as attributes (onnxruntime refuses min > max there)."""
    assert_matches_onnxruntime(_model("Clip", {"min": low, "max": high}, 6), _feeds("float32"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("slope", [[-0.5], [0.0], [0.25], [1.5],
                                   list(np.linspace(-1, 1, SHAPE[1]))], ids=["neg", "zero", "pos", "big", "mixed"])
def test_prelu_slope_signs(slope, dtype):
    model = _model("PRelu", {}, 16, dtype, inits={"s": slope}, extra_inputs=["s"])
    assert_matches_onnxruntime(model, _feeds(dtype), **_tolerance(dtype))
