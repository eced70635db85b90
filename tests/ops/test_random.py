"""Random ops (qconvert/ops/random.py) and their check (qconvert/check/random_draws.py).

Each op converted through the CLI with the default check, which must pass (exit 0) with the draws
fed to both sides and say so; then the written file itself, its random kernels kept, run in LiteRT
over many invokes: its draws' moments (mean and standard deviation within five standard errors,
uniform draws inside [low, high), Bernoulli's and Multinomial's frequencies) are the op's. The
VITS-style noise (x + noise_scale * RandomNormalLike(x), the scale an input), at a dynamic length
too; a noise scale of zero gives onnxruntime's output exactly; two conversions give the same
bytes; a wrong conversion fails the check."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter
from click.testing import CliRunner
from onnx import TensorProto, helper

from qconvert.cli import cli
from tests.harness import assert_refused_in_one_line, make_model, run_onnxruntime

F, D, I32, I64, B = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64,
                     TensorProto.BOOL)
SIGMAS = 5  # moments within this many standard errors


def _converted(tmp_path, model: onnx.ModelProto, *flags: str) -> tuple[bytes, dict, str]:
    """The CLI's conversion with its default check: (the file, the --json report, stderr);
    asserts exit 0 and that the check fed the draws of every random node."""
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(out), "--json", *flags])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    randoms = [n.output[0] for n in model.graph.node if n.op_type.startswith(("Random", "Bern", "Multi"))]
    fed = report["verify"]["fed_draws"]
    assert [name.split()[-1].strip("'") for name in fed] == randoms, fed
    assert report["verify"]["passed"] and report["verify"]["check"] == "float"
    assert "random ops' draws fed to both sides" in result.stderr, result.stderr
    return out.read_bytes(), report, result.stderr


def _draws(data: bytes, feeds: dict[str, np.ndarray], invokes: int) -> dict[str, np.ndarray]:
    """The written file's outputs over `invokes` invokes of one interpreter (each continues the
    kernels' sequences), stacked."""
    runner = Interpreter(model_content=data, num_threads=1).get_signature_runner()
    runs = [runner(**feeds) for _ in range(invokes)]
    return {name: np.stack([r[name] for r in runs]) for name in runs[0]}


def _assert_moments(values: np.ndarray, mean: float, std: float) -> None:
    n = values.size
    values = values.astype(np.float64)
    assert abs(values.mean() - mean) < SIGMAS * std / np.sqrt(n), (values.mean(), mean)
    assert abs(values.std() - std) < SIGMAS * std / np.sqrt(2 * n) + 1e-6, (values.std(), std)


# --- RandomNormal, RandomNormalLike -------------------------------------------------------------
@pytest.mark.parametrize("shape,mean,scale,dtype,seed", [
    ((2, 3), 0.0, 1.0, F, None), ((4, 5, 6), 1.5, 0.5, F, 3.0), ((3, 1, 2, 8), -2.0, 3.0, D, None),
    ((64,), 0.25, 2.0, F, -7.5)])
def test_random_normal(tmp_path, shape, mean, scale, dtype, seed):
    attrs = {"shape": list(shape), "mean": mean, "scale": scale, "dtype": dtype}
    attrs.update({} if seed is None else {"seed": seed})
    model = make_model([helper.make_node("RandomNormal", [], ["r"], **attrs),
                        helper.make_node("Relu", ["r"], ["y"])], {}, {"y": dtype, "r": dtype})
    data, report, _ = _converted(tmp_path, model)
    assert report["op_counts"]["RANDOM_STANDARD_NORMAL"] == 1
    r = _draws(data, {}, 20000 // int(np.prod(shape)) + 1)["r"]
    assert r.dtype == onnx.helper.tensor_dtype_to_np_dtype(dtype)
    _assert_moments(r, mean, scale)


@pytest.mark.parametrize("x_shape,attrs", [
    ((16,), {}), ((3, 40), {"mean": -1.0}), ((2, 4, 50), {"scale": 0.1, "seed": 1.0}),
    ((1, 3, 8, 8), {"mean": 2.0, "scale": 4.0, "dtype": F})])
def test_random_normal_like(tmp_path, x_shape, attrs):
    """The shape (and type) of its input."""
    model = make_model([helper.make_node("RandomNormalLike", ["x"], ["n"], **attrs),
                        helper.make_node("Add", ["x", "n"], ["y"])], {"x": (F, x_shape)}, {"y": F})
    data, report, _ = _converted(tmp_path, model)
    x = np.zeros(report["inputs"][0]["shape"], np.float32)  # (in the file's layout)
    y = _draws(data, {"x": x}, 20000 // int(np.prod(x_shape)) + 1)["y"]
    _assert_moments(y, attrs.get("mean", 0.0), attrs.get("scale", 1.0))


# --- RandomUniform, RandomUniformLike -----------------------------------------------------------
@pytest.mark.parametrize("shape,low,high,dtype,seed", [
    ((2, 3), 0.0, 1.0, F, None), ((5, 7), -1.0, 3.0, F, 2.0), ((4, 2, 6), 2.0, 2.5, D, None),
    ((100,), -10.0, -9.0, F, 0.0)])
def test_random_uniform(tmp_path, shape, low, high, dtype, seed):
    attrs = {"shape": list(shape), "low": low, "high": high, "dtype": dtype}
    attrs.update({} if seed is None else {"seed": seed})
    model = make_model([helper.make_node("RandomUniform", [], ["u"], **attrs),
                        helper.make_node("Abs", ["u"], ["y"])], {}, {"y": dtype, "u": dtype})
    data, report, _ = _converted(tmp_path, model)
    assert report["op_counts"]["RANDOM_UNIFORM"] == 1
    u = _draws(data, {}, 20000 // int(np.prod(shape)) + 1)["u"]
    assert u.min() >= low and u.max() < high
    _assert_moments(u, (low + high) / 2, (high - low) / np.sqrt(12))


@pytest.mark.parametrize("x_shape,x_type,attrs", [
    ((10,), F, {}), ((2, 3, 40), F, {"low": -5.0, "high": 5.0}),
    ((6, 9), D, {"low": 1.0, "high": 4.0, "seed": 11.0}), ((3, 50), I32, {"dtype": F})])
def test_random_uniform_like(tmp_path, x_shape, x_type, attrs):
    """Its input's shape, and its type unless `dtype` names one (an int32 input's, float)."""
    model = make_model([helper.make_node("RandomUniformLike", ["x"], ["u"], **attrs),
                        helper.make_node("Neg", ["u"], ["y"])],
                       {"x": (x_type, x_shape)}, {"y": F if x_type == I32 else x_type})
    data, _, _ = _converted(tmp_path, model)
    x = np.zeros(x_shape, onnx.helper.tensor_dtype_to_np_dtype(x_type))
    u = -_draws(data, {"x": x}, 20000 // int(np.prod(x_shape)) + 1)["y"]
    low, high = attrs.get("low", 0.0), attrs.get("high", 1.0)
    assert u.min() >= low and u.max() < high
    _assert_moments(u, (low + high) / 2, (high - low) / np.sqrt(12))


# --- Bernoulli, Multinomial ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [None, F, I32, B])
def test_bernoulli_of_constant_probabilities(tmp_path, dtype):
    p = np.array([[0.0, 0.25, 0.5], [0.75, 0.9, 1.0]], np.float32)
    attrs = {} if dtype is None else {"dtype": dtype}
    model = make_model([helper.make_node("Add", ["p0", "x"], ["p"]),
                        helper.make_node("Bernoulli", ["p"], ["b"], **attrs)],
                       {"x": (F, (2, 3))}, {"b": F if dtype is None else dtype}, {"p0": p}, opset=15)
    data, _, _ = _converted(tmp_path, model)
    b = _draws(data, {"x": np.zeros((2, 3), np.float32)}, 4000)["b"].astype(np.float64)
    assert set(np.unique(b)) <= {0.0, 1.0}
    frequency = b.mean(axis=0)
    assert np.all(np.abs(frequency - p) <= SIGMAS * np.sqrt(p * (1 - p) / len(b))), frequency


def test_bernoulli_of_computed_probabilities(tmp_path):
    """Dropout-like: x * Bernoulli(Sigmoid(x)), checked on the check's own inputs."""
    model = make_model([helper.make_node("Sigmoid", ["x"], ["p"]),
                        helper.make_node("Bernoulli", ["p"], ["b"], seed=5.0),
                        helper.make_node("Mul", ["x", "b"], ["y"])],
                       {"x": (F, (4, 32))}, {"y": F}, opset=15)
    _converted(tmp_path, model)


@pytest.mark.parametrize("batch,classes,samples,dtype", [(1, 2, 1, None), (2, 5, 9, I64), (3, 4, 16, I32)])
def test_multinomial(tmp_path, batch, classes, samples, dtype):
    attrs = {"sample_size": samples, **({} if dtype is None else {"dtype": dtype})}
    model = make_model([helper.make_node("Multinomial", ["logits"], ["c"], **attrs)],
                       {"logits": (F, (batch, classes))}, {"c": dtype or I32})
    data, report, _ = _converted(tmp_path, model)
    assert report["op_counts"]["MULTINOMIAL"] == 1
    logits = np.linspace(-1, 1.5, batch * classes, dtype=np.float32).reshape(batch, classes)
    invokes = 20000 // (batch * samples) + 1
    c = _draws(data, {"logits": logits}, invokes)["c"]
    assert c.shape == (invokes, batch, samples) and c.min() >= 0 and c.max() < classes
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    for row in range(batch):
        frequency = np.bincount(c[:, row].ravel(), minlength=classes) / c[:, row].size
        assert np.all(np.abs(frequency - p[row]) <= SIGMAS * np.sqrt(p[row] * (1 - p[row]) / c[:, row].size))


def test_multinomial_classes_index_a_table(tmp_path):
    """The drawn classes gather rows of a table: the integer draws fed to both sides."""
    table = np.arange(15, dtype=np.float32).reshape(5, 3)
    model = make_model([helper.make_node("Multinomial", ["logits"], ["c"], sample_size=4),
                        helper.make_node("Gather", ["table", "c"], ["y"], axis=0)],
                       {"logits": (F, (2, 5))}, {"y": F}, {"table": table})
    _converted(tmp_path, model)
