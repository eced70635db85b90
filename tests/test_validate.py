"""Bad ONNX models end in one line naming what is at fault, exit code 1, no traceback, no output
file, the input untouched (qconvert/onnx/validate.py, the loader's and importers' shape checks, the
MODEL_BYTES and FOLDED_BYTES limits). Each case is a small model broken the way a corrupt file,
a hostile mutation or a buggy exporter breaks one; the valid models next to them still convert
and match onnxruntime in LiteRT."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from qconvert.cli import cli
from qconvert.errors import ConversionError
from qconvert.onnx.file import read_onnx
from tests.harness import run_onnxruntime

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)


def _model(nodes, inputs=(X,), outputs=(Y,), inits=(), opset=13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", list(inputs), list(outputs), list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _conv(attrs=None, w_shape=(4, 3, 3, 3), x=X) -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal(w_shape).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **{"pads": [1, 1, 1, 1], **(attrs or {})})
    return _model([node], [x], inits=[numpy_helper.from_array(w, "w")])


def _add(x_shape=(1, 3), c_shape=(1, 3), y_shape=None) -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                  [numpy_helper.from_array(np.ones(c_shape, np.float32), "c")])


def _edit(model: onnx.ModelProto, change) -> onnx.ModelProto:
    change(model)
    return model


def _attribute(name, value, type_=None) -> onnx.AttributeProto:
    a = helper.make_attribute(name, value)
    if type_ is not None:
        a.type = type_
    return a


def _replace_weights(m, shape):
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones(shape, np.float32), "w"))


def _set_typed(m):
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.float_data.extend([1.0])


def _cycle(m):
    m.graph.node[0].input[0] = "z"
    m.graph.node.append(helper.make_node("Relu", ["y"], ["z"], name="relu"))


def _unsorted(m):
    m.graph.node.insert(0, helper.make_node("Relu", ["y"], ["z"], name="relu"))
    m.graph.output[0].name = "z"


def _float16_with_its_input_cast_last() -> onnx.ModelProto:
    """onnxconverter-common's float16 model (keep_io_types): the input's Cast appended after the
    nodes that read it."""
    nodes = [helper.make_node("Relu", ["x16"], ["r16"], name="relu"),
             helper.make_node("Cast", ["r16"], ["y"], name="cast_out", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["x16"], name="cast_in", to=TensorProto.FLOAT16)]
    return _model(nodes)


def _product(op: str, w_shape, declared=(1, 10), x_shape=(1, 1, 8, 8), **attrs) -> onnx.ModelProto:
    """Flatten then a Gemm or MatMul whose weight is `w_shape`, the output declared `declared`
    (an exporter's declaration: shape inference keeps it when the product cannot be inferred)."""
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], name="flatten"),
             helper.make_node(op, ["flat", "w"], ["y"], name="fc", **attrs)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(declared))],
                  [numpy_helper.from_array(np.ones(w_shape, np.float32), "w")])


def _cast(to) -> onnx.ModelProto:
    return _model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=to)])


def _reshape(shape) -> onnx.ModelProto:
    return _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
                  outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
                  inits=[numpy_helper.from_array(np.array(shape, np.int64), "s")])


def _non_utf8(m):
    """A tensor name that is not UTF-8: the serialized bytes are edited, as a corrupt file has it."""
    return m.SerializeToString().replace(b"yyyy", b"y\xff\xfey")


# (model or bytes, fragments the one-line message must contain)
CASES = {
    "initializer_raw_size": (_edit(_conv(), lambda m: m.graph.initializer[0].dims.__setitem__(0, 5)),
                             ["initializer 'w'", "dims [5, 3, 3, 3]", "540 bytes", "432"]),
    "initializer_typed_size": (_edit(_add(), _set_typed), ["initializer 'c'", "float_data", "has 1"]),
    "initializer_negative_dim": (_edit(_add(), lambda m: m.graph.initializer[0].dims.__setitem__(0, -1)),
                                 ["initializer 'c'", "negative dimension"]),
    "initializer_type_enum": (_edit(_add(), lambda m: setattr(m.graph.initializer[0], "data_type", 99)),
                              ["initializer 'c'", "data type 99"]),
    "input_type_enum": (_edit(_add(), lambda m: setattr(m.graph.input[0].type.tensor_type,
                                                        "elem_type", 77)),
                        ["graph input 'x'", "data type 77"]),
    "cast_to_enum": (_cast(55), ["node 'cast' (Cast)", "'to'", "data type 55"]),
    "group_string": (_edit(_conv(), lambda m: m.graph.node[0].attribute.append(_attribute("group", "x"))),
                     ["node 'conv' (Conv)", "'group' is STRING", "INT"]),
    "group_zero": (_conv({"group": 0}), ["node 'conv' (Conv)", "'group'", "at least 1"]),
    "group_undefined": (_edit(_conv(), lambda m: m.graph.node[0].attribute.append(
        _attribute("group", 1, onnx.AttributeProto.UNDEFINED))), ["'group'", "no valid type"]),
    "strides_beyond_int32": (_conv({"strides": [2**40, 1]}), ["'strides'", "1099511627776", "int32"]),
    "pads_beyond_int32": (_conv({"pads": [2**33, 0, 0, 0]}), ["'pads'", "8589934592", "int32"]),
    "pads_negative": (_conv({"pads": [-1, 0, 0, 0]}), ["'pads'", "-1", "negative"]),
    "lrn_size_negative": (_model([helper.make_node("LRN", ["x"], ["y"], name="lrn", size=-1)]),
                          ["node 'lrn' (LRN)", "'size'", "at least 1"]),
    "duplicate_attribute": (_edit(_conv(), lambda m: m.graph.node[0].attribute.append(
        _attribute("pads", [0, 0, 0, 0]))), ["node 'conv' (Conv)", "'pads' is given twice"]),
    "required_attribute": (_edit(_cast(1), lambda m: m.graph.node[0].ClearField("attribute")),
                           ["node 'cast' (Cast)", "required attribute 'to'"]),
    "conv_rank3_weight": (_conv(w_shape=(4, 3, 3)), ["conv", "Conv"]),
    "conv_channels": (_conv(w_shape=(4, 2, 3, 3)), ["node 'conv' (Conv)", "3 channels", "take 2"]),
    "conv_group_channels": (_conv({"group": 3}, w_shape=(4, 1, 3, 3)),
                            ["node 'conv' (Conv)", "4 output channels", "3 groups"]),
    "conv_kernel_shape": (_conv({"kernel_shape": [5, 5]}), ["node 'conv' (Conv)", "kernel_shape"]),
    "two_producers": (_edit(_add(), lambda m: m.graph.node.append(
        helper.make_node("Relu", ["x"], ["y"], name="relu"))),
        ["tensor 'y'", "two nodes", "'add' (Add)", "'relu' (Relu)"]),
    "output_not_produced": (_edit(_add(), lambda m: m.graph.output.append(
        helper.make_tensor_value_info("nobody", TensorProto.FLOAT, [1, 3]))),
        ["graph output 'nobody'", "not written"]),
    "input_not_produced": (_edit(_add(), lambda m: m.graph.node[0].input.__setitem__(1, "ghost")),
                           ["node 'add' (Add)", "'ghost'"]),
    "required_input_empty": (_edit(_add(), lambda m: m.graph.node[0].input.__setitem__(0, "")),
                             ["node 'add' (Add)", "input 0 (A) is required"]),
    "no_outputs": (_edit(_add(), lambda m: m.graph.ClearField("output")), ["no outputs"]),
    "no_nodes": (_edit(_add(), lambda m: (m.graph.ClearField("node"),
                                          setattr(m.graph.output[0], "name", "x"))), ["no nodes"]),
    "cycle": (_edit(_add(), _cycle), ["cycle", "node '"]),
    "non_utf8_name": (_non_utf8(_model([helper.make_node("Relu", ["x"], ["yyyy"], name="relu")],
                                       outputs=[helper.make_tensor_value_info("yyyy", TensorProto.FLOAT,
                                                                              None)])),
                      ["not valid UTF-8"]),
    "no_broadcast": (_add((1, 3), (1, 4), [1, 3]), ["node 'add' (Add)", "[1, 3], [1, 4]", "broadcast"]),
    "no_broadcast_undeclared": (_add((1, 3), (1, 4)), ["'add'", "Incompatible dimensions"]),
    "mixed_input_types": (_model([helper.make_node("Less", ["x", "i"], ["y"], name="less")],
                                 [X, helper.make_tensor_value_info("i", TensorProto.INT32, [1])]),
                          ["node 'less' (Less)", "'i' is tensor(int32)", "'x' is tensor(float)"]),
    "type_not_allowed": (_model([helper.make_node("Or", ["x", "x"], ["y"], name="or")]),
                         ["node 'or' (Or)", "'x' is tensor(float)", "tensor(bool)"]),
    "pool_kernel_rank": (_model([helper.make_node("MaxPool", ["x"], ["y"], name="pool",
                                                  kernel_shape=[2])],
                                outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                       [1, 3, 7, 8])]),
                         ["node 'pool' (MaxPool)", "'kernel_shape' has 1 values for 2"]),
    "reshape_size": (_reshape([7]), ["node 'reshape' (Reshape)", "[1, 3, 8, 8] to [7]"]),
    "conv_empty_input": (_conv(x=helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 0, 8])),
                         ["node 'conv' (Conv)", "[1, 3, 0, 8] is empty"]),
    "input_beyond_int32": (_add((2**33, 3)), ["input 'x'", "8589934592", "int32"]),
    "input_type_undefined": (_edit(_add(), lambda m: setattr(m.graph.input[0].type.tensor_type,
                                                             "elem_type", 0)),
                             ["graph input 'x'", "UNDEFINED"]),
    "input_without_type": (_edit(_add(), lambda m: m.graph.input[0].ClearField("type")),
                           ["graph input 'x'", "no tensor type"]),
    "gemm_inner_mismatch": (_product("Gemm", (10, 65), transB=1),
                            ["node 'fc' (Gemm)", "'flat' [1, 64] has 64 features", "'w' [10, 65] "
                             "(transB) expects 65"]),
    "matmul_inner_mismatch": (_product("MatMul", (65, 10)),
                              ["node 'fc' (MatMul)", "64 features, 'w' [65, 10] expects 65"]),
    "opset_beyond_int32": (_edit(_add(), lambda m: setattr(m.opset_import[0], "version", 2**40)),
                           ["opset import 'ai.onnx'", "version 1099511627776"]),
    "gemm_empty_input": (_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="gemm")],
                                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3])],
                                inits=[numpy_helper.from_array(np.ones((3, 2), np.float32), "w"),
                                       numpy_helper.from_array(np.ones(2, np.float32), "b")]),
                         ["node 'gemm' (Gemm)", "[0, 3] is empty"]),
}


def _convert(tmp_path, model, *args, env=None):
    """Runs the CLI on `model` (a proto or its bytes); returns (result, input path, output path)."""
    source, out = tmp_path / "m.onnx", tmp_path / "m.tflite"
    source.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    result = CliRunner().invoke(cli, [str(source), str(out), *args], env=env)
    return result, source, out


def _assert_refused(result, source, before: bytes, out, fragments):
    assert result.exit_code == 1, result.output
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1 and message.startswith("qconvert: error:"), message
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert not out.exists()
    assert source.read_bytes() == before


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_model_is_one_line_exit_1(tmp_path, case):
    model, fragments = CASES[case]
    before = model if isinstance(model, bytes) else model.SerializeToString()
    result, source, out = _convert(tmp_path, model)
    _assert_refused(result, source, before, out, fragments)


# --- external data -------------------------------------------------------------------------------
def _external_model(folder, location="w.bin") -> bytes:
    """A Conv model whose weights lie in `folder`/w.bin, the location then rewritten."""
    model = _conv()
    onnx.save(model, str(folder / "m.onnx"), save_as_external_data=True, location="w.bin",
              size_threshold=0)
    saved = onnx.load(str(folder / "m.onnx"), load_external_data=False)
    for t in saved.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = location
    return saved.SerializeToString()


@pytest.mark.parametrize("kind", ["missing", "parent", "absolute", "symlink", "beyond_end"])
def test_external_data_outside_the_folder_is_refused(tmp_path, kind):
    folder = tmp_path / "model"
    folder.mkdir()
    location = {"missing": "nothere.bin", "parent": "../w.bin", "absolute": str(tmp_path / "w.bin"),
                "symlink": "link.bin", "beyond_end": "short.bin"}[kind]
    data = _external_model(folder, location)
    (tmp_path / "w.bin").write_bytes((folder / "w.bin").read_bytes())  # the file, outside
    (folder / "link.bin").symlink_to(tmp_path / "w.bin")
    (folder / "short.bin").write_bytes(b"\0" * 10)
    (folder / "m.onnx").write_bytes(data)
    out = folder / "m.tflite"
    result = CliRunner().invoke(cli, [str(folder / "m.onnx"), str(out)])
    expected = {"missing": "no such file", "parent": "outside the model's folder",
                "absolute": "absolute path", "symlink": "symbolic link", "beyond_end": "10 bytes"}[kind]
    _assert_refused(result, folder / "m.onnx", data, out, ["initializer 'w'", location, expected])


def test_external_data_inside_the_folder_converts(tmp_path):
    """The checks let a regular external data file next to the model through, and it converts to
    the model onnxruntime computes."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "m.onnx").write_bytes(_external_model(folder))
    out = folder / "m.tflite"
    result = CliRunner().invoke(cli, [str(folder / "m.onnx"), str(out), "--io-layout", "onnx"])
    assert result.exit_code == 0, result.output
    _assert_runs_like_onnxruntime(_conv(), out.read_bytes())


def _assert_runs_like_onnxruntime(model, flatbuffer):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=flatbuffer)
    interpreter.allocate_tensors()
    feeds = {}
    for detail in interpreter.get_input_details():
        x = np.random.default_rng(3).standard_normal(detail["shape"]).astype(np.float32)
        interpreter.set_tensor(detail["index"], x)
        feeds[detail["name"]] = x
    interpreter.invoke()
    actual = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    expected = next(iter(run_onnxruntime(model, feeds).values()))
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


# --- what the checks must let through --------------------------------------------------------------
def _slice_to_the_end() -> onnx.ModelProto:
    """Slice-1 with INT64_MAX ends (old PyTorch exports): beyond int32, and valid."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1], ends=[2**63 - 1], axes=[1])
    return _model([node], [x], opset=9)


def _output_listed_as_input() -> onnx.ModelProto:
    """An old exporter's graph input that is a node's output (onnxruntime refuses it: the
    reference is the model without it)."""
    model = _model([helper.make_node("Relu", ["x"], ["y"])])
    model.graph.input.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8]))
    return model


def _declared_output_contradicts() -> onnx.ModelProto:
    """A graph output declared with a shape the model does not compute: what the model computes
    wins (LiteRT computes it too)."""
    return _model([helper.make_node("Relu", ["x"], ["y"])],
                  outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 9])])


def test_an_input_shape_that_changes_a_flattened_size_names_both_sizes(tmp_path):
    """--input-shape x:1,1,4096,4096 on an 8x8 model whose Gemm weight fixes the flattened size."""
    model = _product("Gemm", (10, 64), transB=1)
    result, source, out = _convert(tmp_path, model, "--input-shape", "x:1,1,4096,4096")
    _assert_refused(result, source, model.SerializeToString(), out,
                    ["node 'fc' (Gemm)", "'flat' [1, 16777216] has 16,777,216 features", "expects 64"])


@pytest.mark.parametrize("build, reference", [
    (_declared_output_contradicts, lambda: _model([helper.make_node("Relu", ["x"], ["y"])])),
    (_slice_to_the_end, _slice_to_the_end),
    (_output_listed_as_input, lambda: _model([helper.make_node("Relu", ["x"], ["y"])])),
    (lambda: _conv({"group": 3}, w_shape=(6, 1, 3, 3)), None),
    (lambda: _edit(_add(), _unsorted), None),
    (_float16_with_its_input_cast_last, None),
], ids=["declared_output_contradicts", "slice_int64_ends", "output_listed_as_input", "depthwise_group",
        "nodes_out_of_order", "float16_input_cast_last"])
def test_valid_models_pass_the_checks(tmp_path, build, reference):
    model = build()
    result, _, out = _convert(tmp_path, model, "--io-layout", "onnx")
    assert result.exit_code == 0, result.output
    _assert_runs_like_onnxruntime(reference() if reference else model, out.read_bytes())


# --- limits --------------------------------------------------------------------------------------
def test_model_bytes_limit(tmp_path):
    model = _conv()
    before = model.SerializeToString()
    result, source, out = _convert(tmp_path, model, env={"QCONVERT_MAX_MODEL_BYTES": "100"})
    _assert_refused(result, source, before, out,
                    ["m.onnx", f"{len(before):,} bytes of ONNX model", "QCONVERT_MAX_MODEL_BYTES"])


@pytest.mark.parametrize("op", ["Expand", "Tile", "ConstantOfShape", "Range"])
def test_folded_constant_limit_is_checked_before_folding(tmp_path, op):
    """Constant nodes whose output would take 16 GiB: refused by the limit (before numpy would
    try to allocate it), naming the node and the variable."""
    big = np.array([1 << 20, 1 << 12], np.int64)
    one = numpy_helper.from_array(np.ones((1, 1), np.float32), "one")
    nodes, inits = {
        "Expand": ([helper.make_node("Expand", ["one", "shape"], ["c"], name="n")],
                   [one, numpy_helper.from_array(big, "shape")]),
        "Tile": ([helper.make_node("Tile", ["one", "shape"], ["c"], name="n")],
                 [one, numpy_helper.from_array(big, "shape")]),
        "ConstantOfShape": ([helper.make_node("ConstantOfShape", ["shape"], ["c"], name="n")],
                            [numpy_helper.from_array(big, "shape")]),
        "Range": ([helper.make_node("Range", ["a", "b", "d"], ["c"], name="n")],
                  [numpy_helper.from_array(np.array(v, np.float32), k)
                   for k, v in (("a", 0.0), ("b", 2.0**32), ("d", 1.0))]),
    }[op]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    model = _model(nodes + [helper.make_node("Add", ["x", "c"], ["y"])], [x], inits=inits)
    before = model.SerializeToString()
    result, source, out = _convert(tmp_path, model, env={"QCONVERT_MAX_FOLDED_BYTES": "1000000"})
    _assert_refused(result, source, before, out,
                    [f"node 'n' ({op})", "exceed the limit of 1,000,000", "QCONVERT_MAX_FOLDED_BYTES"])


def test_non_regular_input_is_read_within_the_limit(tmp_path, monkeypatch):
    """A FIFO given to read_onnx: read up to QCONVERT_MAX_MODEL_BYTES + 1 bytes, then refused,
    not read for as long as its writer goes on."""
    fifo = tmp_path / "in.onnx"
    os.mkfifo(fifo)

    def write():
        try:
            with open(fifo, "wb") as f:
                f.write(b"\0" * (1 << 20))
        except BrokenPipeError:
            pass  # the reader stopped at the limit

    writer = threading.Thread(target=write)
    writer.start()
    monkeypatch.setenv("QCONVERT_MAX_MODEL_BYTES", "1000")
    with pytest.raises(ConversionError, match="more than the limit of 1,000 bytes of ONNX model "
                                              r"\(set QCONVERT_MAX_MODEL_BYTES"):
        read_onnx(str(fifo))
    writer.join()


@pytest.mark.parametrize("via_stdin", [False, True])
def test_an_empty_model_is_refused_under_an_address_space_limit(tmp_path, via_stdin):
    """A file that cannot be memory-mapped (empty) or stdin is read in chunks: one read of
    QCONVERT_MAX_MODEL_BYTES (4 GiB) would be allocated up front, a MemoryError under `ulimit -v`
    4 GiB (as a hostile-input harness runs every case)."""
    import resource
    import subprocess
    import sys

    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    out = tmp_path / "out.tflite"

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    command = [sys.executable, "-m", "qconvert", "-" if via_stdin else str(empty), str(out)]
    with open(empty, "rb") as stdin:
        result = subprocess.run(command, stdin=stdin, capture_output=True, text=True,
                                preexec_fn=limit_memory)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().endswith("not an ONNX model (no IR version or empty graph)")
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.FLOAT])
def test_a_graph_input_that_is_also_a_graph_output_is_returned_as_it_is(dtype):
    """An int64 input returned untouched (it was an internal error: the CAST to the ONNX dtype
    tried to create a second tensor of the input's name)."""
    from tests.harness import convert_proto, run_tflite

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 4)),
                               helper.make_tensor_value_info("k", dtype, (2,))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("k", dtype, (2,))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    flatbuffer, report = convert_proto(model)
    k = np.array([2**40, -3], np.int64 if dtype == TensorProto.INT64 else np.float32)
    out = run_tflite(flatbuffer, report, {"x": np.ones((1, 4), np.float32), "k": k})
    np.testing.assert_array_equal(out["k"], k)
