"""identify_gelu: the exported Gelu patterns, x * 0.5 * (1 + erf(x / sqrt 2)) and the tanh form
x * 0.5 * (1 + tanh(0.7978 * (x + 0.044715 * x^3))), become one GELU (approximate for tanh).

Shown here, with the step alone: the tanh form with its cube as (x * x) * x and its constants on
either side becomes one approximate GELU with the same values; with the tanh also a graph output,
the GELU still replaces the product and the tanh's ops stay; a near-miss cubic coefficient, and
a TANH tagged as an Erf group (which the step checks numerically), are left alone. End to end,
the tanh form written with Pow(x, 3), a form tests/ops/test_activations.py does not cover,
converts to one GELU (the whole pattern without the step) and matches onnxruntime to within
float32 rounding, far tighter than the 5e-4 between the exact and the tanh Gelu."""

import math

import numpy as np
import pytest
from onnx import TensorProto, helper

from qconvert.ops.unary import ERF_MARK
from qconvert.transforms.engine import run_to_fixed_point
from qconvert.transforms.identify_gelu import identify_gelu
from tests.harness import assert_matches_onnxruntime, make_model, without_float_step
from tests.transforms.builders import Builder, evaluate_model, op_types

F = TensorProto.FLOAT
SHAPE = (2, 3, 5)
X = np.linspace(-5, 5, 30, dtype=np.float32).reshape(SHAPE)
BETA = math.sqrt(2 / math.pi)


def tanh_gelu(cubic=0.044715):
    """y = ((1 + tanh(beta * (kappa * ((x * x) * x) + x))) * x) * 0.5"""
    b = Builder().input("x", SHAPE)
    for name, value in (("kappa", cubic), ("beta", BETA), ("one", 1.0), ("half", 0.5)):
        b.const(name, np.float32(value))
    for op_type, inputs, output in (("MUL", ["x", "x"], "x2"), ("MUL", ["x2", "x"], "x3"),
                                    ("MUL", ["kappa", "x3"], "kx3"), ("ADD", ["kx3", "x"], "inner"),
                                    ("MUL", ["inner", "beta"], "scaled"), ("TANH", ["scaled"], "th"),
                                    ("ADD", ["one", "th"], "a"), ("MUL", ["a", "x"], "m"),
                                    ("MUL", ["m", "half"], "y")):
        b.op(op_type, inputs, output, SHAPE)
    return b.output("y").model


def run(model):
    before = evaluate_model(model, {"x": X})
    run_to_fixed_point(model, [("identify_gelu", identify_gelu)])
    after = evaluate_model(model, {"x": X})
    for name in before:
        np.testing.assert_allclose(after[name], before[name], rtol=1e-6, atol=1e-6)


def test_tanh_form_becomes_one_approximate_gelu():
    model = tanh_gelu()
    run(model)
    assert op_types(model) == ["GELU"]
    assert model.operators[0].inputs == ["x"] and model.operators[0].options == {"approximate": True}


def test_a_tanh_read_elsewhere_stays_beside_the_gelu():
    model = tanh_gelu()
    model.outputs.append("th")
    run(model)
    assert op_types(model) == ["MUL", "MUL", "MUL", "ADD", "MUL", "TANH", "GELU"]


def test_a_near_miss_cubic_coefficient_is_not_gelu():
    model = tanh_gelu(cubic=0.05)
    run(model)
    assert "GELU" not in op_types(model)


def test_an_erf_group_that_does_not_compute_erf_is_not_gelu():
    """x * 0.5 * (1 + f(x / sqrt 2)) with f a TANH tagged as an Erf importer's group."""
    b = Builder().input("x", SHAPE)
    for name, value in (("root2", math.sqrt(2)), ("one", 1.0), ("half", 0.5)):
        b.const(name, np.float32(value))
    b.op("DIV", ["x", "root2"], "z", SHAPE).op("TANH", ["z"], "e", SHAPE).op("ADD", ["e", "one"], "a", SHAPE)
    b.op("MUL", ["x", "a"], "m", SHAPE).op("MUL", ["m", "half"], "y", SHAPE).output("y")
    b.model.operators[1].source = "erf" + ERF_MARK
    run(b.model)
    assert op_types(b.model) == ["DIV", "TANH", "ADD", "MUL", "MUL"]


def pow_form():
    n = helper.make_node
    nodes = [n("Pow", ["x", "three"], ["x3"]), n("Mul", ["x3", "kappa"], ["kx3"]),
             n("Add", ["x", "kx3"], ["inner"]), n("Mul", ["beta", "inner"], ["scaled"]),
             n("Tanh", ["scaled"], ["th"]), n("Add", ["th", "one"], ["a"]),
             n("Mul", ["half", "x"], ["h"]), n("Mul", ["a", "h"], ["y"])]
    inits = {"three": 3.0, "kappa": 0.044715, "beta": BETA, "one": 1.0, "half": 0.5}
    return make_model(nodes, {"x": (F, SHAPE)}, {"y": F}, {k: np.float32(v) for k, v in inits.items()})


@pytest.mark.parametrize("with_step", [True, False])
def test_onnx_tanh_form_with_pow_is_one_gelu(with_step, monkeypatch):
    if not with_step:
        without_float_step(monkeypatch, "identify_gelu")
    _, report = assert_matches_onnxruntime(pow_form(), {"x": X}, rtol=1e-5, atol=2e-6)
    if with_step:
        assert report.op_counts == {"GELU": 1}
    else:
        assert report.op_counts == {"POW": 1, "MUL": 4, "ADD": 2, "TANH": 1}
