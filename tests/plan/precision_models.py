"""Graphs built from ONNX ops where the precision answer is known, for the sensitivity and plan
tests: which tensor int8 cannot hold, and why."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.harness import make_model

ROWS, WIDTH = 8, 32


def layernorm_model(seed: int = 0):
    """(model, calibration): a transformer-style block as jax2tf writes it, its LayerNorm spelled
    out (ReduceMean, Sub, Mul, ReduceMean, Add, Sqrt, Div, Mul, Add), then MatMul -> Relu ->
    MatMul. Each row of x holds an offset of a few hundred plus a spread of about 1: int8's step on
    x (its range over the calibration set is about +-600) is several times the spread, so
    quantizing x destroys the centered values x - mean, and everything after them (the poisoning
    case); the centered values themselves (about +-4) quantize well."""
    rng = np.random.default_rng(seed)
    inits = {"gamma": (1 + 0.1 * rng.standard_normal(WIDTH)).astype(np.float32),
             "beta": (0.1 * rng.standard_normal(WIDTH)).astype(np.float32),
             "eps": np.array(1e-5, np.float32),
             "w1": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
             "w2": (rng.standard_normal((WIDTH, 4)) / np.sqrt(WIDTH)).astype(np.float32)}
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1], name="ln_mean"),
             helper.make_node("Sub", ["x", "mean"], ["centered"], name="ln_sub"),
             helper.make_node("Mul", ["centered", "centered"], ["squared"], name="ln_square"),
             helper.make_node("ReduceMean", ["squared"], ["variance"], axes=[-1], name="ln_var"),
             helper.make_node("Add", ["variance", "eps"], ["variance_eps"], name="ln_eps"),
             helper.make_node("Sqrt", ["variance_eps"], ["std"], name="ln_sqrt"),
             helper.make_node("Div", ["centered", "std"], ["normed"], name="ln_div"),
             helper.make_node("Mul", ["normed", "gamma"], ["scaled"], name="ln_gamma"),
             helper.make_node("Add", ["scaled", "beta"], ["ln"], name="ln_beta"),
             helper.make_node("MatMul", ["ln", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, ROWS, WIDTH))}, {"y": TensorProto.FLOAT},
                       inits)
    count = 16
    offsets = rng.uniform(-600, 600, (count, 1, ROWS, 1))
    x = offsets + rng.standard_normal((count, 1, ROWS, WIDTH))
    return model, {"x": x.astype(np.float32)}


def one_bad_tensor_model(seed: int = 0, depth: int = 8, bad: int = 4):
    """(model, calibration): `depth` 1x1 convolutions over 8 channels with a Relu between each,
    and one Tanh after conv `bad` whose input spans about +-0.05: the int8 TANH's output step
    is fixed at 1/128, so its output keeps a few steps of signal (the one bad tensor), where
    every other tensor is held well by its calibrated range."""
    rng = np.random.default_rng(seed)
    inits, nodes, x = {}, [], "x"
    for k in range(depth):
        scale = 0.02 if k == bad else 1.0
        inits[f"w{k}"] = (rng.standard_normal((8, 8, 1, 1)) * scale / np.sqrt(8)).astype(np.float32)
        nodes.append(helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], name=f"conv{k}"))
        if k == bad:
            nodes.append(helper.make_node("Tanh", [f"c{k}"], [f"t{k}"], name="tanh"))
            nodes.append(helper.make_node("Mul", [f"t{k}", "fifty"], [f"a{k}"], name="gain"))
            inits["fifty"] = np.array(50, np.float32)
        elif k < depth - 1:
            nodes.append(helper.make_node("Relu", [f"c{k}"], [f"a{k}"], name=f"relu{k}"))
        x = f"a{k}" if k < depth - 1 else f"c{k}"
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 8, 6, 6))}, {x: TensorProto.FLOAT}, inits)
    return model, {"x": rng.standard_normal((16, 1, 8, 6, 6)).astype(np.float32)}



def tanh_model():
    """(model, calibration): Conv -> Tanh -> Conv, the Tanh's input spanning +-0.05: its int8
    kernel's fixed output step of 1/128 holds about 23 dB on the output slices; float and 16x8
    hold 30."""
    rng = np.random.default_rng(0)
    inits = {"w": (rng.standard_normal((4, 4, 1, 1)) * 0.02).astype(np.float32),
             "w2": (rng.standard_normal((2, 4, 1, 1)) * 0.5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="small"),
             helper.make_node("Tanh", ["c"], ["t"], name="tanh"),
             helper.make_node("Conv", ["t", "w2"], ["y"], name="out")]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 4, 4, 4))}, {"y": TensorProto.FLOAT}, inits)
    return model, {"x": rng.standard_normal((16, 1, 4, 4, 4)).astype(np.float32)}
