"""identify_activations: elementwise chains that compute a known activation, found by evaluating
the chain, become the activation's op(s), whatever ops the exporter wrote.

Shown end to end (float: exact against onnxruntime; int8: within 2 output steps in LiteRT), for
the forms exporters write: HardSwish as x * relu6(x + 3) / 6 (Clip), as x * HardSigmoid(x), as
min(max(x + 3, 0), 6) * (1/6) * x; the logistic as 1 / (1 + exp(-x)); SiLU as x / (1 + exp(-x)) and
as x * Reciprocal(1 + exp(x * -1)) (LOGISTIC + MUL); tanh as (exp(2x) - 1) / (exp(2x) + 1). Left
alone: a near miss (x * relu6(x + 3) / 5), and a chain over two tensors."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.harness import assert_int8_matches_onnxruntime, assert_matches_onnxruntime, make_model

F = TensorProto.FLOAT
SHAPE = (1, 8, 4, 4)


def _constants(**values):
    return {name: np.array(v, np.float32) for name, v in values.items()}


def _model(nodes, constants, inputs=("x",)):
    return make_model(nodes, {name: (F, SHAPE) for name in inputs}, {"y": F}, constants)


N = helper.make_node
FORMS = {
    "hard swish, relu6 as Clip, / 6": ("HARD_SWISH", _model(
        [N("Add", ["x", "three"], ["a"]), N("Clip", ["a", "zero", "six"], ["r"]), N("Mul", ["x", "r"], ["m"]),
         N("Div", ["m", "six"], ["y"])], _constants(three=3, zero=0, six=6))),
    "hard swish, x * HardSigmoid(x)": ("HARD_SWISH", _model(
        [N("HardSigmoid", ["x"], ["s"], alpha=1 / 6, beta=0.5), N("Mul", ["x", "s"], ["y"])], {})),
    "hard swish, Min/Max, * 1/6 first": ("HARD_SWISH", _model(
        [N("Add", ["x", "three"], ["a"]), N("Max", ["a", "zero"], ["b"]), N("Min", ["b", "six"], ["r"]),
         N("Mul", ["r", "sixth"], ["g"]), N("Mul", ["x", "g"], ["y"])],
        _constants(three=3, zero=0, six=6, sixth=1 / 6))),
    "logistic, 1 / (1 + exp(-x))": ("LOGISTIC", _model(
        [N("Neg", ["x"], ["n"]), N("Exp", ["n"], ["e"]), N("Add", ["e", "one"], ["d"]), N("Div", ["one", "d"], ["y"])],
        _constants(one=1))),
    "silu, x / (1 + exp(-x))": ("LOGISTIC MUL", _model(
        [N("Neg", ["x"], ["n"]), N("Exp", ["n"], ["e"]), N("Add", ["e", "one"], ["d"]), N("Div", ["x", "d"], ["y"])],
        _constants(one=1))),
    "silu, x * Reciprocal(1 + exp(x * -1))": ("LOGISTIC MUL", _model(
        [N("Mul", ["x", "minus"], ["n"]), N("Exp", ["n"], ["e"]), N("Add", ["one", "e"], ["d"]),
         N("Reciprocal", ["d"], ["s"]), N("Mul", ["x", "s"], ["y"])], _constants(one=1, minus=-1))),
    "tanh, (exp(2x) - 1) / (exp(2x) + 1)": ("TANH", _model(
        [N("Mul", ["x", "two"], ["t"]), N("Exp", ["t"], ["e"]), N("Sub", ["e", "one"], ["p"]),
         N("Add", ["e", "one"], ["q"]), N("Div", ["p", "q"], ["y"])], _constants(one=1, two=2))),
}


def op_types_of_report(report) -> list[str]:
    """The written model's op types, sorted, one entry per op."""
    return sorted(t for t, n in report.op_counts.items() for _ in range(n))


def _feeds(scale=3.0):
    return {"x": (np.random.default_rng(0).standard_normal(SHAPE) * scale).astype(np.float32)}


@pytest.mark.parametrize("form", list(FORMS))
def test_the_form_becomes_its_activation_and_matches_onnxruntime(form):
    expected, model = FORMS[form]
    _, report = assert_matches_onnxruntime(model, _feeds(), rtol=1e-5, atol=1e-5)
    assert op_types_of_report(report) == expected.split()


@pytest.mark.parametrize("form", ["hard swish, relu6 as Clip, / 6", "silu, x / (1 + exp(-x))",
                                  "silu, x * Reciprocal(1 + exp(x * -1))"])
def test_the_identified_activation_runs_int8_within_two_steps(form, tmp_path):
    """Written out, exp(-x) and the division have no int8 kernel (they stayed float); identified,
    every op is int8."""
    _, model = FORMS[form]
    calibration = {"x": np.stack([_feeds()["x"] * k for k in (0.5, 1.0, 1.5, 2.0)])}
    assert_int8_matches_onnxruntime(model, tmp_path, calibration)


def test_a_near_miss_is_left_alone():
    model = _model([N("Add", ["x", "three"], ["a"]), N("Clip", ["a", "zero", "six"], ["r"]),
                    N("Mul", ["x", "r"], ["m"]), N("Div", ["m", "five"], ["y"])],
                   _constants(three=3, zero=0, six=6, five=5))
    _, report = assert_matches_onnxruntime(model, _feeds())
    assert "HARD_SWISH" not in op_types_of_report(report)


def test_a_chain_over_two_tensors_is_left_alone():
    """x * relu6(z + 3) / 6 with z another input: no one x."""
    model = _model([N("Add", ["z", "three"], ["a"]), N("Clip", ["a", "zero", "six"], ["r"]),
                    N("Mul", ["x", "r"], ["m"]), N("Div", ["m", "six"], ["y"])],
                   _constants(three=3, zero=0, six=6), inputs=("x", "z"))
    feeds = {**_feeds(), "z": _feeds(2.0)["x"][..., ::-1].copy()}
    _, report = assert_matches_onnxruntime(model, feeds)
    assert "HARD_SWISH" not in op_types_of_report(report)
