"""A dynamic batch dimension (axis 0 of every input, one name) is set to 1 and, where the graph
allows, stays resizable in the .tflite: LiteRT's resize_tensor_input to batch 4 then gives
onnxruntime's results for those 4 inputs, with and without XNNPACK, float and int8. Where the
graph does not allow it the batch is written fixed and the note says why. Without a shared batch,
a dynamic axis 0 of any input defaults to 1 as well, named in the summary; any other dynamic
dimension is still an error (qconvert/onnx/dynamic_batch.py)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from qconvert.cli import cli
from tests.harness import convert
from qconvert.errors import ConversionError
from qconvert.tflite import schema_generated as S
from tests.harness import output_steps, run_onnxruntime

RESOLVERS = {"xnnpack": OpResolverType.AUTO,
             "builtin": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
C, H, W, FEATURES, CLASSES = 3, 6, 6, 4 * 6 * 6, 5


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _flatten_nodes(kind: str) -> tuple[list, list]:
    """r [N, 4, 6, 6] -> flat [N, 144], as exporters write it."""
    if kind == "flatten":
        return [helper.make_node("Flatten", ["r"], ["flat"])], []
    if kind in ("reshape_minus_1", "reshape_0"):
        first = -1 if kind == "reshape_minus_1" else 0
        return ([helper.make_node("Reshape", ["r", "target"], ["flat"])],
                [_ints("target", [first, FEATURES] if first else [0, -1])])
    # PyTorch's x.view(x.size(0), -1): the target is computed from the batch size.
    assert kind == "shape_chain"
    return ([helper.make_node("Shape", ["r"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axis0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["flat"])],
            [_ints("zero", 0), _ints("axis0", [0]), _ints("minus1", [-1])])


def classifier(flatten: str = "reshape_0", batch=("N",)) -> onnx.ModelProto:
    """x [batch, 3, 6, 6] -> Conv -> Relu -> (flatten) -> Gemm -> y [batch, 5]."""
    rng = np.random.default_rng(7)
    flat_nodes, flat_inits = _flatten_nodes(flatten)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), *flat_nodes,
             helper.make_node("Gemm", ["flat", "dense", "bias"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(rng.standard_normal((4, C, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((CLASSES, FEATURES)) / 8).astype(np.float32),
                                     "dense"),
             numpy_helper.from_array(rng.standard_normal(CLASSES).astype(np.float32), "bias"),
             *flat_inits]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*batch, C, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*batch, CLASSES])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _convert_cli(model: onnx.ModelProto, tmp_path, *options) -> tuple[bytes, dict, str]:
    """(the .tflite, the --json report, the summary line) of a CLI conversion."""
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "m.tflite"
    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(out), "--json", *options])
    assert result.exit_code == 0, result.output
    return out.read_bytes(), json.loads(result.stdout), result.stderr.strip()


def _run(data: bytes, report: dict, feeds: dict, resolver: str) -> dict:
    """Runs the .tflite on ONNX-layout `feeds` after resizing each input to the feed's shape with
    resize_tensor_input; returns ONNX-layout outputs."""
    interpreter = Interpreter(model_content=data, num_threads=1,
                              experimental_op_resolver_type=RESOLVERS[resolver])
    details = {d["name"]: d for d in interpreter.get_input_details()}
    values = {}
    for info in report["inputs"]:
        value = feeds[info["name"]]
        if info["layout_permutation"]:
            value = np.transpose(value, info["layout_permutation"])
        values[info["name"]] = np.ascontiguousarray(value, dtype=info["dtype"])
        interpreter.resize_tensor_input(details[info["name"]]["index"], values[info["name"]].shape,
                                        strict=True)
    interpreter.allocate_tensors()
    for name, value in values.items():
        interpreter.set_tensor(details[name]["index"], value)
    interpreter.invoke()
    outputs = {d["name"]: d for d in interpreter.get_output_details()}
    results = {}
    for info in report["outputs"]:
        value = interpreter.get_tensor(outputs[info["name"]]["index"])
        if info["layout_permutation"]:
            value = np.transpose(value, np.argsort(info["layout_permutation"]))
        results[info["name"]] = value
    return results


def assert_resizes_to_the_feeds_batch(model, feeds: dict, output: str = "y", rtol=1e-4, atol=1e-4):
    """`model` (a dynamic batch) converts with its batch resizable, and the .tflite resized to the
    batch of `feeds` matches onnxruntime there, with XNNPACK and with the builtin kernels."""
    import json

    from tests.harness import convert, run_onnxruntime

    flatbuffer, report = convert("m.onnx", data=model.SerializeToString())
    assert report.batch.resizable, report.batch.note
    want = run_onnxruntime(model, feeds)[output]
    report = json.loads(json.dumps(report.as_dict()))
    for resolver in RESOLVERS:
        np.testing.assert_allclose(_run(bytes(flatbuffer), report, feeds, resolver)[output], want,
                                   rtol=rtol, atol=atol, err_msg=resolver)


def _activation_signatures(data: bytes) -> list[tuple[str, list, list]]:
    """(name, shape, shape_signature) of every tensor without data, read from the file; a tensor
    without a shape_signature reports its shape."""
    model = S.Model.GetRootAs(data)
    graph = model.Subgraphs(0)
    result = []
    for k in range(graph.TensorsLength()):
        tensor = graph.Tensors(k)
        if model.Buffers(tensor.Buffer()).DataLength():
            continue
        shape = tensor.ShapeAsNumpy().tolist() if tensor.ShapeLength() else []
        signature = tensor.ShapeSignatureAsNumpy().tolist() if tensor.ShapeSignatureLength() else shape
        result.append((tensor.Name().decode(), shape, signature))
    return result


def _batch(seed: int, n: int = 4) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, C, H, W)).astype(np.float32)


@pytest.mark.parametrize("flatten", ["reshape_0", "reshape_minus_1", "flatten", "shape_chain"])
def test_float_model_resizes_to_batch_4_like_onnxruntime(tmp_path, flatten):
    model = classifier(flatten)
    data, report, summary = _convert_cli(model, tmp_path)
    assert report["batch"] == {"symbol": "N", "size": 1, "resizable": True,
                               "note": "batch dimension 'N' set to 1, resizable (shape_signature -1)"}
    assert "; batch dimension 'N' set to 1, resizable (shape_signature -1)" in summary
    assert report["inputs"][0]["shape"] == [1, H, W, C]  # written at batch 1
    # Every activation (input, Conv output, reshaped, output) has -1 for its batch.
    signatures = _activation_signatures(data)
    assert len(signatures) >= 3
    for name, shape, signature in signatures:
        assert shape[0] == 1 and signature == [-1] + shape[1:], (name, shape, signature)
    x = _batch(1)
    want = run_onnxruntime(model, {"x": x})["y"]
    for resolver in RESOLVERS:
        got = _run(data, report, {"x": x}, resolver)["y"]
        assert got.shape == (4, CLASSES)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=resolver)


def test_int8_model_resizes_to_batch_4(tmp_path):
    """--quantize: at batch 4 each sample's int8 result is exactly its result at batch 1, and
    within a few output steps of onnxruntime's."""
    model = classifier("shape_chain")
    np.savez(tmp_path / "calibration.npz", x=_batch(2, 32))
    data, report, summary = _convert_cli(model, tmp_path, "--quantize", "--calibration",
                                         str(tmp_path / "calibration.npz"))
    assert report["quantization"]["int8_ops"] >= 3 and not report["quantization"]["float_ops"]
    assert report["batch"]["resizable"] and "batch dimension 'N' set to 1, resizable" in summary
    x = _batch(3)
    want = run_onnxruntime(model, {"x": x})["y"]
    step = output_steps(data)["y"]
    for resolver in RESOLVERS:
        got = _run(data, report, {"x": x}, resolver)["y"]
        assert got.shape == (4, CLASSES)
        one_by_one = np.concatenate([_run(data, report, {"x": x[k:k + 1]}, resolver)["y"]
                                     for k in range(4)])
        # The same int8 values (DEQUANTIZE's float rounding may differ by an ulp).
        np.testing.assert_array_equal(np.round(got / step), np.round(one_by_one / step), err_msg=resolver)
        np.testing.assert_allclose(got, want, rtol=0, atol=0.05 * np.abs(want).max(), err_msg=resolver)


def test_inputs_sharing_the_batch_resize_together(tmp_path):
    """Two inputs under the same name; an unnamed batch (no dim_value, no dim_param) likewise."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("MatMul", ["s", "m"], ["p"]),
             helper.make_node("Softmax", ["p"], ["y"], axis=-1)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch_size", 7]) for n in "ab"]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = numpy_helper.from_array(rng.standard_normal((7, 3)).astype(np.float32), "m")
    graph = helper.make_graph(nodes, "g", inputs, [output], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    data, report, _ = _convert_cli(model, tmp_path)
    assert report["batch"]["symbol"] == "batch_size" and report["batch"]["resizable"]
    feeds = {n: rng.standard_normal((4, 7)).astype(np.float32) for n in "ab"}
    want = run_onnxruntime(model, feeds)["y"]
    for resolver in RESOLVERS:
        np.testing.assert_allclose(_run(data, report, feeds, resolver)["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dim", [None, -1])
def test_an_unnamed_batch_defaults_to_1(tmp_path, dim):
    """A dim without value, or Paddle's -1."""
    model = classifier("flatten", batch=(dim,))
    data, report, summary = _convert_cli(model, tmp_path)
    assert report["batch"]["symbol"] == "" and report["batch"]["resizable"]
    assert "batch dimension (unnamed) set to 1" in summary
    x = _batch(4, 2)
    np.testing.assert_allclose(_run(data, report, {"x": x}, "builtin")["y"],
                               run_onnxruntime(model, {"x": x})["y"], rtol=1e-4, atol=1e-4)


def _relu_then(nodes, inits=(), shape=("N", 4, 6)) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), *nodes], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


# name: (model, fragment of the reason the batch stays 1)
FIXED = {
    # A Reshape to a constant [1, -1] folds the batch into axis 1: at batch 2 ONNX gives [1, 48].
    "reshape_to_1": (lambda: _relu_then([helper.make_node("Reshape", ["r", "t"], ["y"])],
                                        [_ints("t", [1, -1])]),
                     "tensor 'y' is [1,24] at batch 1 but [1,48] at batch 2"),
    "reduce_over_batch": (lambda: _relu_then([helper.make_node("ReduceMean", ["r"], ["y"], axes=[0])]),
                          "tensor 'y' is [1,4,6] at batch 1 but [1,4,6] at batch 2"),
    "transpose_moves_batch": (lambda: _relu_then([helper.make_node("Transpose", ["r"], ["y"],
                                                                   perm=[1, 0, 2])]),
                              "the batch leaves axis 0"),
    # x / batch_size: a constant computed from the batch size used in arithmetic.
    "divide_by_batch": (lambda: _relu_then([helper.make_node("Shape", ["r"], ["shape"]),
                                            helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
                                            helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
                                            helper.make_node("Div", ["r", "nf"], ["y"])], [_ints("zero", 0)]),
                        "the value of 'nf' (Div input 1) depends on the batch size"),
    # ONNX allows it at any batch, but TRANSPOSE_CONV holds its output shape as a constant.
    "transpose_conv": (lambda: _relu_then(
        [helper.make_node("ConvTranspose", ["r", "k"], ["y"])],
        [numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32) / 9, "k")], shape=("N", 4, 5, 5)),
        "TRANSPOSE_CONV (node ConvTranspose_1:y) has no batch-agnostic form"),
}


@pytest.mark.parametrize("name", list(FIXED))
def test_batch_stays_1_where_the_graph_does_not_allow_resizing(tmp_path, name):
    build, reason = FIXED[name]
    model = build()
    data, report, summary = _convert_cli(model, tmp_path)
    assert report["batch"]["resizable"] is False and report["batch"]["size"] == 1
    assert reason in report["batch"]["note"] and report["batch"]["note"] in summary
    assert report["batch"]["note"].startswith("batch dimension 'N' set to 1, fixed: ")
    for tensor, shape, signature in _activation_signatures(data):
        assert signature == shape, tensor  # no -1 anywhere
    # Right at batch 1.
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    x = np.random.default_rng(6).standard_normal([1, *dims]).astype(np.float32)
    np.testing.assert_allclose(_run(data, report, {"x": x}, "builtin")["y"],
                               run_onnxruntime(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def _relu_each(shapes: dict) -> onnx.ModelProto:
    """Relu of each input {name: dims} (None: an unnamed dynamic dimension)."""
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    nodes = [helper.make_node("Relu", [n], [n + "_y"]) for n in shapes]
    outputs = [helper.make_tensor_value_info(n + "_y", TensorProto.FLOAT, None) for n in shapes]
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                             opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


# name: (input shapes, --input-shape options, {input: its axis 0 as converted})
LEADING_DEFAULTS = {
    "different_names": ({"x": ["N", 3], "z": ["M", 3]}, [], {"x": 1, "z": 1}),
    "only_some_inputs": ({"x": ["N", 3], "z": [1, 3]}, [], {"x": 1}),
    "named_and_unnamed": ({"x": ["N", 3], "z": [None, 3]}, [], {"x": 1, "z": 1}),
    "rank_1_length": ({"x": [2, 5], "length": ["L"]}, [], {"length": 1}),
    "state_beside_pinned": ({"ids": ["B", "T"], "h": ["B", 8], "c": [None, 8]},
                            ["--input-shape", "ids:2,7"], {"h": 2, "c": 1}),
}


@pytest.mark.parametrize("name", list(LEADING_DEFAULTS))
def test_dynamic_leading_dims_default_without_a_shared_batch(tmp_path, name):
    """Without a batch every input shares, a dynamic axis 0 that --input-shape leaves out is set
    to 1 (or to the size --input-shape gives the same name), and the summary and --json say so."""
    shapes, options, set_to = LEADING_DEFAULTS[name]
    model = _relu_each(shapes)
    data, report, summary = _convert_cli(model, tmp_path, *options)
    assert report["leading_dims"] == set_to and report["batch"] is None
    assert "dynamic axis 0 set" in summary and all(f"'{n}' {k}" in summary for n, k in set_to.items())
    rng = np.random.default_rng(3)
    pinned = {o.split(":")[0]: [int(d) for d in o.split(":")[1].split(",")] for o in options[1::2]}
    feeds = {n: rng.standard_normal(pinned.get(n) or [set_to.get(n, d) if k == 0 else d
                                                       for k, d in enumerate(s)]).astype(np.float32)
             for n, s in shapes.items()}
    want = run_onnxruntime(model, feeds)
    interpreter = Interpreter(model_content=data)
    got = interpreter.get_signature_runner()(**feeds)
    for n in shapes:
        np.testing.assert_array_equal(got[n + "_y"], want[n + "_y"])


def test_a_pinned_dimension_name_sizes_the_other_inputs(tmp_path):
    """--input-shape input_ids:2,5 sizes the attention mask's [batch, seq] too: same names."""
    shapes = {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"], "length": ["batch"]}
    model = _relu_each(shapes)
    data, report, summary = _convert_cli(model, tmp_path, "--input-shape", "input_ids:2,5")
    assert report["leading_dims"] == {"attention_mask": 2, "length": 2}
    assert [i["shape"] for i in report["inputs"]] == [[2, 5], [2, 5], [2]]
    rng = np.random.default_rng(4)
    feeds = {"input_ids": rng.standard_normal((2, 5)).astype(np.float32),
             "attention_mask": rng.standard_normal((2, 5)).astype(np.float32),
             "length": rng.standard_normal(2).astype(np.float32)}
    want = run_onnxruntime(model, feeds)
    got = Interpreter(model_content=data).get_signature_runner()(**feeds)
    for n in shapes:
        np.testing.assert_array_equal(got[n + "_y"], want[n + "_y"])


def test_input_shape_overrides_the_default(tmp_path):
    model = classifier("reshape_0")
    data, report, summary = _convert_cli(model, tmp_path, "--input-shape", "x:2,3,6,6")
    assert report["batch"] is None and "batch dimension" not in summary
    assert report["inputs"][0]["shape"] == [2, H, W, C]
    for tensor, shape, signature in _activation_signatures(data):
        assert signature == shape, tensor
    x = _batch(8, 2)
    np.testing.assert_allclose(_run(data, report, {"x": x}, "xnnpack")["y"],
                               run_onnxruntime(model, {"x": x})["y"], rtol=1e-4, atol=1e-4)


def test_static_batch_has_no_note(tmp_path):
    _, report, summary = _convert_cli(classifier("reshape_0", batch=(1,)), tmp_path)
    assert report["batch"] is None and "batch dimension" not in summary


def _zoo_model(nodes, inits, inputs) -> onnx.ModelProto:
    values = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", values, [output], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _f32(seed, *shape):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _named(tensor, name):
    tensor.name = name
    return tensor


FLOAT = TensorProto.FLOAT
# name: an ONNX model whose TFLite ops (in the comment) each carry the batch by their own rule.
ZOO = {
    # CONV_2D, MAX_POOL_2D, MEAN, RESHAPE, CONCATENATION (axis 1), SOFTMAX
    "vision_head": lambda: _zoo_model(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2]),
         helper.make_node("GlobalAveragePool", ["p"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
         helper.make_node("Concat", ["f", "f"], ["cc"], axis=1),
         helper.make_node("Softmax", ["cc"], ["y"], axis=1)],
        [_named(_f32(1, 4, 3, 3, 3), "w")], {"x": (FLOAT, ["N", 3, 8, 8])}),
    # MEAN (last axis), SUB, FULLY_CONNECTED keeping dims, TRANSPOSE keeping axis 0
    "sequence": lambda: _zoo_model(
        [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), helper.make_node("Sub", ["x", "m"], ["d"]),
         helper.make_node("MatMul", ["d", "k"], ["mm"]),
         helper.make_node("Transpose", ["mm"], ["y"], perm=[0, 2, 1])],
        [_named(_f32(2, 6, 5), "k")], {"x": (FLOAT, ["N", 4, 6])}),
    # GATHER of a constant table by batched indices
    "embedding": lambda: _zoo_model(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("ReduceMean", ["e"], ["y"], axes=[1], keepdims=0)],
        [_named(_f32(3, 10, 3), "table")], {"ids": (TensorProto.INT64, ["N", 4])}),
    # SPLIT (axis 1), SLICE and STRIDED_SLICE (axis 2), PAD, CONCATENATION, MUL
    "slices": lambda: _zoo_model(
        [helper.make_node("Split", ["x"], ["a", "b"], axis=1),
         helper.make_node("Slice", ["a", "one", "three", "two"], ["s"]),
         helper.make_node("Pad", ["s", "pads"], ["pd"]),
         helper.make_node("Slice", ["b", "zero", "big", "two", "two"], ["t"]),
         helper.make_node("Concat", ["t", "t"], ["tt"], axis=2),
         helper.make_node("Mul", ["pd", "tt"], ["y"])],
        [_ints("zero", [0]), _ints("one", [1]), _ints("two", [2]), _ints("three", [3]), _ints("big", [99]),
         _ints("pads", [0, 0, 1, 0, 0, 1])], {"x": (FLOAT, ["N", 4, 4])}),
}


@pytest.mark.parametrize("name", list(ZOO))
def test_op_families_keep_the_batch_resizable(name):
    model = ZOO[name]()
    flatbuffer, report = convert("m.onnx", data=model.SerializeToString())
    assert report.batch.resizable, report.batch.note
    data, report = bytes(flatbuffer), json.loads(json.dumps(report.as_dict()))
    rng = np.random.default_rng(9)
    feeds = {}
    for value in model.graph.input:
        shape = [3] + [d.dim_value for d in value.type.tensor_type.shape.dim[1:]]
        integer = value.type.tensor_type.elem_type == TensorProto.INT64
        feeds[value.name] = (rng.integers(0, 10, shape) if integer
                             else rng.standard_normal(shape).astype(np.float32))
    want = run_onnxruntime(model, feeds)["y"]
    for resolver in RESOLVERS:
        got = _run(data, report, feeds, resolver)["y"]
        assert got.shape == want.shape, resolver
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=resolver)
