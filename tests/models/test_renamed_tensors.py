"""A model's tensor names never collide with the names qconvert creates.

Importers and transformations name the tensors they create (PRelu's "slope", HardSigmoid's "c",
"x_nhwc", "perm", "lstm_w0"...). Those names are collected here from qconvert's source (every
string given to a call that creates a tensor name), not listed by hand, and a model's
initializers, values, inputs and outputs are renamed to them; the renamed model must convert to a
.tflite that matches onnxruntime, and to the same outputs as the model under its own names.
"""

from __future__ import annotations

import ast
import itertools
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import qconvert
from qconvert import ir
from qconvert.calibration.data import model_input_specs
from tests.harness import (
    calibration_set,
    convert_proto,
    convert_quantized,
    random_feeds,
    run_onnxruntime,
    run_tflite,
)
from tests.models.randomize import randomize_light_model
from tests.models.test_light_models import LIGHT_DIR

# The calls that create a tensor name from their first argument (ir.Model and
# import_context.ImportContext).
NAMING_CALLS = {"constant", "tensor", "add_constant", "add_array", "add_array_like", "unique_name"}
HOLE = "{}"  # where a name is built from another name or a number


def _templates(node: ast.expr) -> list[str]:
    """The names an expression can give, with HOLE for each part that is not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _templates(node.left) or [HOLE], _templates(node.right) or [HOLE]
        return [a + b for a in left for b in right]
    if isinstance(node, ast.IfExp):
        return _templates(node.body) + _templates(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [t for value in node.values for t in _templates(value)]
    return []


def created_name_templates() -> list[str]:
    """Every name template qconvert's source gives a naming call, ir.py's derived names, and what
    unique_name makes of a taken literal (`slope_0`, `c_1`)."""
    root = pathlib.Path(qconvert.__file__).parent
    found: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in NAMING_CALLS and node.args):
                found.update(t for t in _templates(node.args[0]) if t and t != HOLE)
    # The derived names of ir.py (a channels-last twin, a copy of another type), which the
    # naming calls get from those functions rather than as literals.
    found.update([ir.channels_last_name(HOLE), ir.dequantized_name(HOLE)]
                 + [ir.typed_name(HOLE, dtype) for dtype in (np.int8, np.uint8, np.int16, np.int32)])
    literals = [t for t in found if HOLE not in t]
    found.update(f"{t}_{k}" for t in literals for k in (0, 1))
    return sorted(found)


TEMPLATES = created_name_templates()


def test_the_templates_cover_the_names_of_the_reported_collisions():
    """The collection sees the names that collided (keras2onnx's PRelu `slope`, `c`, `c_0`, `c_1`
    beside LeakyRelu, HardSigmoid and Clip) and the layout suffixes the transformations add."""
    assert {"slope", "c", "c_0", "c_1", "perm", "{}_nhwc", "{}_int8", "{}_value"} <= set(TEMPLATES)


def renamed(model: onnx.ModelProto, offset: int) -> onnx.ModelProto:
    """`model` with every tensor renamed to a created-name template (starting at template
    `offset`): a template's first hole is the new name of the tensor renamed just before (so
    `{}_nhwc` becomes that tensor's NHWC twin's name; "t" once such chains grow long), other
    holes 0."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    order = list(dict.fromkeys(
        [v.name for v in graph.input] + [t.name for t in graph.initializer]
        + [o for node in graph.node for o in node.output if o] + [v.name for v in graph.output]))
    mapping: dict[str, str] = {}
    templates = itertools.cycle(TEMPLATES[offset:] + TEMPLATES[:offset])
    previous = "t"
    for name in order:
        while True:
            template = next(templates)
            new = template.replace(HOLE, previous, 1).replace(HOLE, "0")
            if new not in mapping.values() and new not in order[len(mapping) + 1:]:
                break
        mapping[name] = new
        previous = new if len(new) < 40 else "t"  # chains of suffixes, but not without end
    for value in itertools.chain(graph.input, graph.output, graph.value_info):
        value.name = mapping.get(value.name, value.name)
    for tensor in graph.initializer:
        tensor.name = mapping[tensor.name]
    for node in graph.node:
        node.input[:] = [mapping.get(n, n) for n in node.input]
        node.output[:] = [mapping.get(n, n) for n in node.output]
    return model


def activations_model() -> onnx.ModelProto:
    """A chain through the importers that create constants of their own, each activation with
    its own initializers: grouped Conv, PRelu twice (the later slope named like the earlier
    importer's constant after renaming), LeakyRelu, HardSigmoid, Clip with bounds, pooling, Pad,
    Erf, Pow, a LayerNorm written out, Gemm, Softmax, and a second output through Transpose,
    Reshape and Split."""
    rng = np.random.default_rng(0)
    f = np.float32
    inits = {
        "w": (rng.standard_normal((8, 2, 3, 3)) * 0.4).astype(f), "b": rng.standard_normal(8).astype(f),
        "s1": (rng.random((8, 1, 1)) * 0.3).astype(f), "s2": (rng.random((8, 1, 1)) * 0.2).astype(f),
        "lo": np.array(-0.5, f), "hi": np.array(0.8, f), "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
        "two": np.array(2.0, f), "eps": np.array(1e-5, f),
        "fc": (rng.standard_normal((10, 8 * 5 * 5)) * 0.1).astype(f), "fcb": rng.standard_normal(10).astype(f),
        "shape": np.array([1, 4, 2, 25], np.int64), "split": np.array([2, 2], np.int64),
    }
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w", "b"], ["c1"], group=2, pads=[1, 1, 1, 1]),
        n("PRelu", ["c1", "s1"], ["p1"]),
        n("LeakyRelu", ["p1"], ["l1"], alpha=0.2),
        n("HardSigmoid", ["l1"], ["h1"], alpha=0.3, beta=0.4),
        n("Mul", ["h1", "c1"], ["m1"]),
        n("Clip", ["m1", "lo", "hi"], ["k1"]),
        n("PRelu", ["k1", "s2"], ["p2"]),
        n("MaxPool", ["p2"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Pad", ["mp", "pads"], ["pd"], mode="reflect"),
        n("AveragePool", ["pd"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
        n("Erf", ["ap"], ["e1"]),
        n("Add", ["e1", "ap"], ["a1"]),
        n("ReduceMean", ["a1"], ["mean"], axes=[-1]),
        n("Sub", ["a1", "mean"], ["centered"]),
        n("Pow", ["centered", "two"], ["sq"]),
        n("ReduceMean", ["sq"], ["var"], axes=[-1]),
        n("Add", ["var", "eps"], ["var_eps"]),
        n("Sqrt", ["var_eps"], ["std"]),
        n("Div", ["centered", "std"], ["normed"]),
        n("Flatten", ["normed"], ["flat"]),
        n("Gemm", ["flat", "fc", "fcb"], ["logits"], transB=1),
        n("Softmax", ["logits"], ["probs"]),
        n("Transpose", ["normed"], ["tr"], perm=[0, 2, 3, 1]),
        n("Reshape", ["tr", "shape"], ["rs"]),
        n("Split", ["rs", "split"], ["s_a", "s_b"], axis=1),
        n("Sub", ["s_a", "s_b"], ["diff"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("logits", "probs", "diff")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def recurrent_model() -> onnx.ModelProto:
    """An LSTM (its importer names lstm_w0, lstm_state, ...) between two MatMuls, int64 input
    ids through Gather (the input's CAST names `{}_int32`)."""
    rng = np.random.default_rng(1)
    f = np.float32
    hidden, features = 6, 5
    inits = {
        "table": rng.standard_normal((12, features)).astype(f),
        "W": (rng.standard_normal((1, 4 * hidden, features)) * 0.3).astype(f),
        "R": (rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(f),
        "B": (rng.standard_normal((1, 8 * hidden)) * 0.1).astype(f),
        "proj": rng.standard_normal((hidden, 3)).astype(f),
    }
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["emb"]),
        n("Transpose", ["emb"], ["seq"], perm=[1, 0, 2]),
        n("LSTM", ["seq", "W", "R", "B"], ["all", "h_last", "c_last"], hidden_size=hidden),
        n("Squeeze", ["h_last"], ["h"], axes=[0]),
        n("MatMul", ["h", "proj"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("c_last", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)


def light(name: str):
    return lambda: randomize_light_model(onnx.load(f"{LIGHT_DIR}/light_{name}.onnx"), seed=1)


MODELS = {"activations": activations_model, "recurrent": recurrent_model,
          "squeezenet": light("squeezenet"), "shufflenet": light("shufflenet")}


def renamed_feeds(original: onnx.ModelProto, model: onnx.ModelProto, seed: int) -> dict:
    """The original model's random feeds under the renamed model's input names (same order)."""
    feeds = random_feeds(original, seed)
    return dict(zip(model_input_specs(model), feeds.values()))


def assert_same_outputs(original: onnx.ModelProto, model: onnx.ModelProto, flatbuffer, report,
                        reference, report_original, exact: bool) -> None:
    """The renamed model's .tflite against onnxruntime (float) and against the original's
    .tflite (same inputs, outputs paired by position): equal, or within a float tolerance."""
    feeds = renamed_feeds(original, model, seed=3)
    got = run_tflite(flatbuffer, report, feeds)
    base = run_tflite(reference, report_original, random_feeds(original, 3))
    expected = run_onnxruntime(model, feeds) if not exact else None
    for name, base_name in zip([o.name for o in model.graph.output], [o.name for o in original.graph.output]):
        assert got[name].shape == base[base_name].shape, name
        if exact:
            np.testing.assert_array_equal(got[name], base[base_name], err_msg=name)
            continue
        want = expected[name]
        scale = float(np.abs(want).max()) or 1.0
        np.testing.assert_allclose(got[name].reshape(want.shape), want, rtol=1e-3, atol=1e-4 * scale,
                                   err_msg=name)
        np.testing.assert_allclose(got[name], base[base_name], rtol=1e-5, atol=1e-6 * scale, err_msg=name)


def offsets(model: onnx.ModelProto) -> list[int]:
    """Enough rotations of the templates that every template names some tensor of the model."""
    count = len({o for node in model.graph.node for o in node.output} | {t.name for t in model.graph.initializer})
    return list(range(0, len(TEMPLATES), max(count, 1)))


CASES = [(name, k) for name, make in MODELS.items() for k in range(len(offsets(make())))]


@pytest.mark.parametrize("name,variant", CASES)
def test_renamed_model_converts_as_under_its_own_names(name, variant):
    original = MODELS[name]()
    model = renamed(original, offsets(original)[variant])
    reference, report_original = convert_proto(original)
    flatbuffer, report = convert_proto(model)
    assert_same_outputs(original, model, flatbuffer, report, reference, report_original, exact=False)


@pytest.mark.parametrize("variant", range(len(offsets(activations_model()))))
def test_renamed_model_quantizes_to_the_same_int8_model(variant, tmp_path):
    """int8: the renamed model's .tflite computes exactly what the original's does on the same
    calibration data: no constant of qconvert's took a model tensor's place."""
    original = activations_model()
    model = renamed(original, offsets(original)[variant])
    calibration = calibration_set(original, count=8)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    reference, report_original = convert_quantized(original, calibration, tmp_path / "a")
    calibration = dict(zip(model_input_specs(model), calibration.values()))
    flatbuffer, report = convert_quantized(model, calibration, tmp_path / "b")
    assert_same_outputs(original, model, flatbuffer, report, reference, report_original, exact=True)
