"""LSTM, GRU and RNN with every function of ONNX's `activations` list and their
activation_alpha/activation_beta at negative, zero and positive values, forward, reverse and
bidirectional (a different list per direction), against onnxruntime (issue 32)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import assert_matches_onnxruntime, assert_refused_in_one_line

T, B, I, H = 3, 2, 4, 3
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
ACTIVATIONS = ["Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
               "HardSigmoid", "Elu", "Softsign", "Softplus"]
TAKES_ALPHA = {"Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu"}
TAKES_BETA = {"Affine", "ScaledTanh", "HardSigmoid"}
# alpha and beta values handed out in turn: every sign (and zero) over the cases
ALPHAS = [-0.6, 0.0, 0.8, 1.3, 0.3]
BETAS = [0.5, -0.4, 0.0, 1.1]
DIRECTIONS = ["forward", "reverse", "bidirectional"]


def _model(op, direction="forward", activations=None, alphas=None, betas=None, outputs=("Y", "Y_h"),
           peephole=False, seed=0, **attrs):
    """An op node with random weights on X [T, B, I]; None leaves an attribute out."""
    rng = np.random.default_rng(seed)
    d, gates = (2 if direction == "bidirectional" else 1), GATES[op]
    inits = {"W": rng.standard_normal((d, gates * H, I)) * 0.7,
             "R": rng.standard_normal((d, gates * H, H)) * 0.7,
             "B": rng.standard_normal((d, 2 * gates * H)) * 0.5}
    names = ["X", "W", "R", "B"]
    if peephole:
        inits["P"] = rng.standard_normal((d, 3 * H))
        names += ["", "", "", "P"]
    for key, value in (("activations", activations), ("activation_alpha", alphas),
                       ("activation_beta", betas)):
        if value is not None:
            attrs[key] = value
    node = helper.make_node(op, names, list(outputs), hidden_size=H, direction=direction, **attrs)
    graph = helper.make_graph(
        [node], op.lower(), [helper.make_tensor_value_info("X", TensorProto.FLOAT, (T, B, I))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
    return helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(seed=1):
    return {"X": np.random.default_rng(seed).standard_normal((T, B, I)).astype(np.float32) * 1.5}


def _lists(op, activation, direction, case):
    """(activations, alphas, betas): per direction the default list with one slot replaced by
    `activation` (a different slot in each direction and case), and its parameters."""
    per = len(DEFAULTS[op])
    names = []
    for d in range(2 if direction == "bidirectional" else 1):
        functions = list(DEFAULTS[op])
        functions[(case + d) % per] = activation
        names += functions
    alphas = [ALPHAS[(case + k) % len(ALPHAS)] for k, n in enumerate(names) if n in TAKES_ALPHA]
    betas = [BETAS[(case + k + 1) % len(BETAS)] for k, n in enumerate(names) if n in TAKES_BETA]
    return names, alphas or None, betas or None


CASES = [(op, activation, direction, case)
         for op in GATES for case, activation in enumerate(ACTIVATIONS) for direction in DIRECTIONS]


@pytest.mark.parametrize("op,activation,direction,case", CASES,
                         ids=[f"{op}-{a}-{d}" for op, a, d, _ in CASES])
def test_activation(op, activation, direction, case):
    names, alphas, betas = _lists(op, activation, direction, case)
    model = _model(op, direction, names, alphas, betas)
    assert_matches_onnxruntime(model, _feeds())


# alpha at every sign for the functions that take parameters (each in the first slot)
SIGNS = [(activation, alpha, beta) for activation in sorted(TAKES_ALPHA)
         for alpha, beta in ((-0.7, -0.3), (0.0, 0.0), (0.9, 0.6))]


@pytest.mark.parametrize("op", list(GATES))
@pytest.mark.parametrize("activation,alpha,beta", SIGNS, ids=[f"{a}-{x}-{y}" for a, x, y in SIGNS])
def test_parameter_signs(op, activation, alpha, beta):
    names = [activation] + DEFAULTS[op][1:]
    model = _model(op, "forward", names, [alpha], [beta] if activation in TAKES_BETA else None)
    assert_matches_onnxruntime(model, _feeds(2))


@pytest.mark.parametrize("op", list(GATES))
def test_defaults_when_lists_run_out(op):
    """No activation_alpha/beta: onnxruntime's defaults (LeakyRelu 0.01, HardSigmoid 0.2/0.5,
    Elu 1; 0 for Affine, ThresholdedRelu, ScaledTanh); a short list gives the rest defaults."""
    per = len(DEFAULTS[op])
    for first, second in (("LeakyRelu", "HardSigmoid"), ("Elu", "ThresholdedRelu"), ("ScaledTanh", "Affine")):
        names = ([first, second, "Softsign"][:per] + [second, first, "Softplus"][:per])
        assert_matches_onnxruntime(_model(op, "bidirectional", names), _feeds(3))
        assert_matches_onnxruntime(_model(op, "bidirectional", names, [0.4], [0.2]), _feeds(3))


@pytest.mark.parametrize("op,attrs", [
    ("LSTM", {"clip": 0.6, "peephole": True, "outputs": ("Y", "Y_h", "Y_c")}),
    ("GRU", {"linear_before_reset": 1, "clip": 0.9}),
    ("RNN", {"clip": 0.5}),
])
def test_with_clip_and_other_attributes(op, attrs):
    names = (["HardSigmoid", "Softplus", "Elu"] * 2)[:2 * len(DEFAULTS[op])]
    model = _model(op, "bidirectional", names, [-0.3, 0.7, 0.2, 1.5], [0.6, -0.1], **attrs)
    assert_matches_onnxruntime(model, _feeds(4))


@pytest.mark.parametrize("op", list(GATES))
def test_wrong_count_is_refused(op):
    """onnxruntime, too, wants every direction's functions listed."""
    assert_refused_in_one_line(_model(op, "bidirectional", DEFAULTS[op]), "takes")


def test_unknown_activation_is_refused():
    assert_refused_in_one_line(_model("RNN", "forward", ["Gelu"]), "'Gelu' is not an ONNX recurrent")
