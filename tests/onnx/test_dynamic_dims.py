"""Dynamic dimensions beyond the batch (qconvert/onnx/dynamic_dims.py): kept resizable where the
graph allows, the file run in LiteRT at sizes it was not converted at (odd ones, a height unlike
the width) against onnxruntime; fixed at their size, the summary saying why, where it does not;
an error naming --input-shape where the model does not convert at the base size."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import run_onnxruntime
from tests.test_dynamic_batch import _activation_signatures, _convert_cli, _run

RNG = np.random.default_rng(0)


def _weight(name, *shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)


def _ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(nodes, shape, inits=(), opset=17, name="x"):
    x = helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def _segmenter():
    """Conv (stride 2), Relu, Conv, then Resize by scales back up: the Resize's size is an
    integer constant moving with H and W, computed when the model runs."""
    return _model([helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], strides=[2, 2]),
                   helper.make_node("Relu", ["a"], ["b"]),
                   helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("Resize", ["c", "", "s"], ["y"], mode="nearest")],
                  ["N", 3, "H", "W"], [_weight("w1", 8, 3, 3, 3), _weight("w2", 4, 8, 3, 3),
                                       numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")])


def _frames():
    """Conv1d with stride 2 over dynamic frames, then the mean over them: the lifted convs'
    reshapes hold the frames (-1) and the batch (from SHAPE)."""
    return _model([helper.make_node("Conv", ["x", "w1"], ["a"], pads=[2, 2]),
                   helper.make_node("Relu", ["a"], ["b"]),
                   helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1], strides=[2]),
                   helper.make_node("ReduceMean", ["c"], ["y"], axes=[2], keepdims=0)],
                  ["N", 8, "T"], [_weight("w1", 16, 8, 5), _weight("w2", 16, 16, 3)], opset=13)


def _heads():
    """Attention's reshapes as exporters write them: [1, S, 32] to [1, S, 4, 8] by a shape that
    Shape, Gather and Concat build, heads transposed, multiplied, and back."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["s", "zero"], ["s1"]),
             helper.make_node("Concat", ["batch", "s1", "heads"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["r"], ["tk"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["t", "tk"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "t"], ["o"]),
             helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
             helper.make_node("Concat", ["batch", "s1", "width"], ["back"], axis=0),
             helper.make_node("Reshape", ["ot", "back"], ["y"])]
    inits = [_ints("one", 1), _ints("zero", [0]), _ints("batch", [1]), _ints("heads", [4, 8]),
             _ints("width", [32])]
    return _model(nodes, [1, "S", 32], inits)


def _expanded():
    """A constant expanded to the input's shape: folded, a float constant as long as the
    sequence, one row repeated (a Spread): BROADCAST_TO of the row to the computed shape."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Expand", ["bias", "shape"], ["wide"]),
             helper.make_node("Add", ["x", "wide"], ["y"])]
    bias = numpy_helper.from_array(RNG.standard_normal((1, 1, 32)).astype(np.float32), "bias")
    return _model(nodes, [1, "S", 32], [bias])


def _chunks():
    """q, k = x[..., 0:8], x[..., 8:16] (a fused projection's chunks) multiplied: each SLICE's
    size holds the sequence, which -1 ("to the end") keeps at any length."""
    nodes = [helper.make_node("Slice", ["x", "s0", "e0", "axes"], ["q"]),
             helper.make_node("Slice", ["x", "s1", "e1", "axes"], ["k"]),
             helper.make_node("Mul", ["q", "k"], ["y"])]
    inits = [_ints("s0", [0]), _ints("e0", [8]), _ints("s1", [8]), _ints("e1", [16]), _ints("axes", [2])]
    return _model(nodes, [1, "S", 16], inits)


def _positions():
    """A position table cut to the sequence (Gather of Range(0, S)) and added: folded, a float
    constant as long as the sequence, the first rows of an initializer: SLICE of that table to
    the length computed when the model runs."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
             helper.make_node("Range", ["zero", "s", "step"], ["ids"]),
             helper.make_node("Gather", ["table", "ids"], ["pos"], axis=0),
             helper.make_node("Add", ["x", "pos"], ["y"])]
    inits = [_ints("one", 1), _ints("zero", 0), _ints("step", 1),
             numpy_helper.from_array(RNG.standard_normal((512, 16)).astype(np.float32), "table")]
    return _model(nodes, [1, "S", 16], inits)


def _merged_positions():
    """x + table[:S] + row (BERT's word + position + token-type embeddings): the float pipeline
    merges the two constants into one, the table's first rows plus a row."""
    base = _positions()
    base.graph.node[-1].output[0] = "with_positions"
    base.graph.node.append(helper.make_node("Add", ["with_positions", "row"], ["y"]))
    base.graph.initializer.append(numpy_helper.from_array(RNG.standard_normal((1, 16)).astype(np.float32), "row"))
    return base


def _arange_gather():
    """Gather of x's rows at Range(0, S) + 0 along the sequence (an attention mask's index
    arithmetic): folded, an integer vector 0..S-1: RANGE when the model runs."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
             helper.make_node("Range", ["zero", "s", "step"], ["ids"]),
             helper.make_node("Gather", ["x", "ids"], ["y"], axis=1)]
    inits = [_ints("one", 1), _ints("zero", 0), _ints("step", 1)]
    return _model(nodes, [1, "S", 8], inits)


def _flattened_and_back():
    """[1, 4, H, W] flattened to [1, 4, H*W] and back by targets built from its Shape (SegFormer's
    depthwise conv between attention blocks): the flattened axis moves with both H and W, so the
    height and width of the target back must follow H and W themselves."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "two"], ["h"], axis=0),
             helper.make_node("Gather", ["shape", "three"], ["w"], axis=0),
             helper.make_node("Mul", ["h", "w"], ["hw"]),
             helper.make_node("Concat", ["head", "hw"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["r"]),
             helper.make_node("Concat", ["head", "h", "w"], ["back_shape"], axis=0),
             helper.make_node("Reshape", ["r", "back_shape"], ["y"])]
    inits = [_ints("two", [2]), _ints("three", [3]), _ints("head", [1, 4])]
    return _model(nodes, [1, 4, "H", "W"], inits, opset=18)  # (Pad axes)


def _trimmed():
    """x[:, :, :-1] over dynamic frames beside a dynamic batch (Wav2Vec2's positional conv
    padding): a SLICE ending one before the end, STRIDED_SLICE with end -1: frames and batch
    both resizable."""
    nodes = [helper.make_node("Slice", ["x", "start", "end", "axes"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    return _model(nodes, ["N", 3, "T"], [_ints("start", [0]), _ints("end", [-1]), _ints("axes", [2])])


def _upsampled():
    """A U-Net's step: Conv stride 2, ConvTranspose 2x2 stride 2 back, concatenated with the
    input: the transposed conv is blocks (CONV_2D, DEPTH_TO_SPACE), sized from its input."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["d"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("ConvTranspose", ["d", "w2"], ["u"], strides=[2, 2]),
             helper.make_node("Concat", ["u", "x"], ["y"], axis=1)]
    return _model(nodes, ["N", 3, "H", "W"], [_weight("w1", 8, 3, 3, 3), _weight("w2", 8, 4, 2, 2)])


def _sinusoid():
    """A sinusoidal position code computed from Range(0, S): folded at each size into a table
    that no initializer holds whole, so its arithmetic is computed when the model runs (the
    loader's `computed`)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0),
             helper.make_node("Range", ["zero", "s", "step"], ["ids"]),
             helper.make_node("Cast", ["ids"], ["t"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["t", "last"], ["column"]),
             helper.make_node("Mul", ["column", "freq"], ["angles"]),
             helper.make_node("Sin", ["angles"], ["code"]),
             helper.make_node("Add", ["x", "code"], ["y"])]
    inits = [_ints("one", 1), _ints("zero", 0), _ints("step", 1), _ints("last", [1]),
             numpy_helper.from_array(np.linspace(0.01, 1, 16).astype(np.float32), "freq")]
    return _model(nodes, [1, "S", 16], inits)


def _relu(shape):
    return _model([helper.make_node("Relu", ["x"], ["y"])], shape)


def _matches_at(data, report, model, shapes, seed) -> None:
    """The file at each ONNX input shape, on XNNPACK and the builtin kernels, against onnxruntime."""
    for shape in shapes:
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        expected = run_onnxruntime(model, {"x": x})["y"]
        for resolver in ("xnnpack", "builtin"):
            np.testing.assert_allclose(_run(data, report, {"x": x}, resolver)["y"], expected,
                                       rtol=1e-4, atol=1e-5, err_msg=f"{shape} {resolver}")


# name: (model, the resizable symbols, ONNX input shapes run beside the converted one)
RESIZABLE = {
    "segmenter": (_segmenter, ["H", "W"], [(1, 3, 96, 160), (2, 3, 40, 72), (1, 3, 33, 17)]),
    "frames": (_frames, ["T"], [(1, 8, 77), (3, 8, 20), (1, 8, 2)]),
    "heads": (_heads, ["S"], [(1, 1, 32), (1, 13, 32), (1, 200, 32)]),
    "chunks": (_chunks, ["S"], [(1, 1, 16), (1, 37, 16)]),
    "expanded": (_expanded, ["S"], [(1, 1, 32), (1, 29, 32)]),
    "positions": (_positions, ["S"], [(1, 1, 16), (1, 300, 16), (1, 512, 16)]),
    "merged_positions": (_merged_positions, ["S"], [(1, 3, 16), (1, 200, 16)]),
    "arange_gather": (_arange_gather, ["S"], [(1, 2, 8), (1, 77, 8)]),
    "flattened_and_back": (_flattened_and_back, ["H", "W"], [(1, 4, 96, 64), (1, 4, 31, 17)]),
    "trimmed": (_trimmed, ["T"], [(2, 3, 40), (3, 3, 2)]),
    "upsampled": (_upsampled, ["H", "W"], [(2, 3, 96, 32), (1, 3, 16, 160)]),
    "unnamed_axis": (lambda: _relu([1, None, 5]), ["x:1"], [(1, 3, 5), (1, 300, 5)]),
    "named_beside_batch": (lambda: _relu(["N", "T", 3]), ["T"], [(2, 9, 3), (1, 1, 3)]),
    # folded at 64, a table no initializer holds whole: computed when the model runs instead
    "sinusoid": (_sinusoid, ["S"], [(1, 1, 16), (1, 37, 16), (1, 300, 16)]),
}


@pytest.mark.parametrize("name", list(RESIZABLE))
def test_dynamic_dimensions_stay_resizable_and_match_at_other_sizes(tmp_path, name):
    build, symbols, shapes = RESIZABLE[name]
    model = build()
    data, report, summary = _convert_cli(model, tmp_path)
    assert [d["symbol"] for d in report["dimensions"] if d["resizable"]] == symbols, report["dimensions"]
    assert all(d["size"] == 64 for d in report["dimensions"])
    assert "kept resizable" in summary and report["verify"]["other_sizes"]
    signature = {n: s for n, _, s in _activation_signatures(data)}["x"]
    assert -1 in signature
    _matches_at(data, report, model, shapes, seed=1)


# name: (model, the fixed symbol, words of its reason)
FIXED = {
    "flattened": (lambda: _model([helper.make_node("Flatten", ["x"], ["f"]),
                                  helper.make_node("Gemm", ["f", "w"], ["y"], transB=1)],
                                 [1, 2, "H"], [_weight("w", 3, 128)]),
                  "H", "the model does not convert at 96"),
}


@pytest.mark.parametrize("name", list(FIXED))
def test_a_dimension_the_graph_fixes_stays_at_its_size_and_says_why(tmp_path, name):
    build, symbol, words = FIXED[name]
    model = build()
    data, report, summary = _convert_cli(model, tmp_path)
    fixed = {d["symbol"]: d for d in report["dimensions"] if not d["resizable"]}
    assert words in fixed[symbol]["fixed_because"], fixed
    assert f"dynamic {symbol!r} fixed at 64: " in summary
    assert all(-1 not in s[1:] for _, _, s in _activation_signatures(data))
    shape = [d.dim_value or 64 for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(_run(data, report, {"x": x}, "builtin")["y"],
                               run_onnxruntime(model, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_a_model_that_does_not_convert_at_the_base_size_names_the_input_shape_to_pin(tmp_path):
    """A Gemm whose weight wants 10 features after a dynamic one: at 64 it cannot convert."""
    model = _model([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], [1, "F"],
                   [_weight("w", 3, 10)])
    onnx.save(model, tmp_path / "m.onnx")
    from click.testing import CliRunner

    from qconvert.cli import cli

    result = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite")])
    assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert "with dynamic 'F' set to 64; --input-shape x:1,64 pins them" in result.stderr
    assert not (tmp_path / "m.tflite").exists()


def test_input_shape_pins_a_dynamic_dimension(tmp_path):
    data, report, summary = _convert_cli(_segmenter(), tmp_path, "--input-shape", "x:1,3,32,48")
    assert report["dimensions"] == [] and "dynamic" not in summary.split("batch")[0]
    assert [i["shape"] for i in report["inputs"]] == [[1, 32, 48, 3]]


def test_int8_keeps_the_dimensions_resizable(tmp_path):
    """--quantize on the segmenter: int8 ops, H and W resizable, the check at three sizes on the
    calibration samples fitted to them; the file at sizes it was not converted at stays as close
    to onnxruntime as at its own."""
    model = _segmenter()
    calibration = tmp_path / "cal.npz"
    np.savez(calibration, x=np.random.default_rng(3).standard_normal((8, 1, 3, 64, 64)).astype(np.float32))
    data, report, summary = _convert_cli(model, tmp_path, "--quantize", "--calibration", str(calibration))
    assert report["quantization"]["int8_ops"] >= 3
    assert [d["symbol"] for d in report["dimensions"] if d["resizable"]] == ["H", "W"]
    assert len(report["verify"]["other_sizes"]) == 2 and report["verify"]["samples"] == 24
    for shape in [(1, 3, 64, 64), (1, 3, 96, 40), (2, 3, 31, 33)]:
        x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
        expected = run_onnxruntime(model, {"x": x})["y"]
        actual = _run(data, report, {"x": x}, "xnnpack")["y"]
        sqnr = 10 * np.log10(np.sum(expected ** 2) / np.sum((actual - expected) ** 2))
        assert sqnr > 30, (shape, sqnr)


def test_calibration_samples_give_the_dimensions_their_size(tmp_path):
    """Calibrated on 48x80 samples, the segmenter is written (and its ranges measured) at 48x80,
    still resizable, and right at 64x64."""
    model = _segmenter()
    calibration = tmp_path / "cal.npz"
    np.savez(calibration, x=np.random.default_rng(5).standard_normal((4, 1, 3, 48, 80)).astype(np.float32))
    data, report, _ = _convert_cli(model, tmp_path, "--quantize", "--calibration", str(calibration))
    assert {d["symbol"]: (d["size"], d["resizable"]) for d in report["dimensions"]} == {
        "H": (48, True), "W": (80, True)}
    assert report["inputs"][0]["shape"] == [1, 48, 80, 3]
    x = np.random.default_rng(6).standard_normal((1, 3, 64, 64)).astype(np.float32)
    expected = run_onnxruntime(model, {"x": x})["y"]
    actual = _run(data, report, {"x": x}, "xnnpack")["y"]
    assert 10 * np.log10(np.sum(expected ** 2) / np.sum((actual - expected) ** 2)) > 30


def test_a_slice_to_the_end_of_a_moving_axis_takes_minus_one(tmp_path):
    """The chunks' SLICEs run to the end of the sequence: STRIDED_SLICE with that axis's end
    masked, no SHAPE arithmetic, every op delegated to XNNPACK at another length (a SLICE of
    size -1 is not)."""
    from ai_edge_litert.interpreter import Interpreter

    data, report, _ = _convert_cli(_chunks(), tmp_path)
    assert "SHAPE" not in report["op_counts"], report["op_counts"]
    interpreter = Interpreter(model_content=data, num_threads=1)
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], [1, 21, 16])
    interpreter.allocate_tensors()
    from qconvert.check.inspect_tflite import interpreter_partitions

    partitions, total = interpreter_partitions(interpreter)
    assert sum(map(len, partitions)) == total == 3, (partitions, total)


def test_a_slice_ending_before_the_end_keeps_the_batch_resizable(tmp_path):
    _, report, _ = _convert_cli(_trimmed(), tmp_path)
    assert report["batch"]["resizable"], report["batch"]


def test_a_transposed_conv_of_blocks_needs_no_run_time_shape(tmp_path):
    """The U-Net step: no SHAPE arithmetic, the batch resizable too (TRANSPOSE_CONV's constant
    output shape kept both fixed, and XNNPACK off it)."""
    _, report, _ = _convert_cli(_upsampled(), tmp_path)
    assert "SHAPE" not in report["op_counts"] and "TRANSPOSE_CONV" not in report["op_counts"]
    assert report["batch"]["resizable"]


# --- a batch that leaves axis 0, probed as a dimension (DynamicDims.add_batch) ------------------
def _sequence_first():
    """A sequence-first layer ([S, B, 8], as RNNs and older attention take it): the batch on
    axis 1 between two transposes."""
    return _model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
                   helper.make_node("MatMul", ["t", "w"], ["u"]), helper.make_node("Relu", ["u"], ["r"]),
                   helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0, 2])],
                  ["B", "S", 8], [_weight("w", 8, 4)])


def _batch_into_channels():
    """The batch folded into the features ([S, B * 8]) by a Reshape the graph's Shape builds,
    then unfolded: it moves off axis 0 and into a product."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Shape", ["t"], ["shape"]),
             helper.make_node("Gather", ["shape", "first"], ["s"], axis=0),
             helper.make_node("Concat", ["s", "minus_one"], ["folded_shape"], axis=0),
             helper.make_node("Reshape", ["t", "folded_shape"], ["folded"]),
             helper.make_node("Tanh", ["folded"], ["h"]),
             helper.make_node("Reshape", ["h", "shape"], ["back"]),
             helper.make_node("Transpose", ["back"], ["y"], perm=[1, 0, 2])]
    return _model(nodes, ["B", "S", 8], [_ints("first", [0]), _ints("minus_one", [-1])])


@pytest.mark.parametrize("build", [_sequence_first, _batch_into_channels])
def test_a_batch_that_leaves_axis_0_stays_resizable_as_a_dimension(tmp_path, build):
    """Converted at batch 2 (at 1 a transpose of it is a reshape), run at batches 1, 2 and 5
    and other lengths against onnxruntime."""
    model = build()
    data, report, summary = _convert_cli(model, tmp_path)
    assert report["batch"]["resizable"] and "resizable as a dynamic dimension" in summary, summary
    assert report["batch"]["size"] == 2
    assert "x [1, " in " ".join(report["verify"]["other_sizes"]), report["verify"]["other_sizes"]
    _matches_at(data, report, model, [(1, 9, 8), (2, 64, 8), (5, 3, 8)], seed=3)


def test_a_batch_the_graph_fixes_stays_at_1_and_says_why(tmp_path):
    """A batch reduced away after it leaves axis 0 (a sum over [S, B, 8]'s axis 1 against a
    [1, 4]-wide table): no comparison follows it, so the file is the batch-1 one."""
    model = _model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
                    helper.make_node("Flatten", ["t"], ["f"], axis=1),
                    helper.make_node("MatMul", ["f", "w"], ["y"])],
                   ["B", "S", 8], [_weight("w", 8, 4)])
    data, report, summary = _convert_cli(model, tmp_path)
    assert not report["batch"]["resizable"] and report["batch"]["size"] == 1, report["batch"]
    x = np.random.default_rng(4).standard_normal((1, 64, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(data, report, {"x": x}, "builtin")["y"],
                               run_onnxruntime(model, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_a_size_times_another_is_not_computed_as_their_sum(tmp_path):
    """Segformer's attention: a RESHAPE target with two moving entries (no -1 can take both),
    one of them the batch times the sequence ([S, B, T, 8] to [S * B, T, 8]): each slope would
    hold at the other's converted size only (without the rule the file was wrong at all but the
    converted sizes), so the target is not followed as a constant: the model is loaded again
    with it computed when it runs (MUL of the two sizes), and batch, S and T stay resizable."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2, 3]),
             helper.make_node("Shape", ["t"], ["shape"]),
             helper.make_node("Gather", ["shape", "first"], ["s"], axis=0),
             helper.make_node("Gather", ["shape", "second"], ["b"], axis=0),
             helper.make_node("Gather", ["shape", "third"], ["tt"], axis=0),
             helper.make_node("Mul", ["s", "b"], ["sb"]),
             helper.make_node("Concat", ["sb", "tt", "eight"], ["flat_shape"], axis=0),
             helper.make_node("Reshape", ["t", "flat_shape"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["back"]),
             helper.make_node("Transpose", ["back"], ["y"], perm=[1, 0, 2, 3])]
    model = _model(nodes, ["B", "S", "T", 8], [_ints("first", [0]), _ints("second", [1]),
                                               _ints("third", [2]), _ints("eight", [8])])
    data, report, summary = _convert_cli(model, tmp_path)
    assert report["batch"]["resizable"], summary
    assert [d["symbol"] for d in report["dimensions"] if d["resizable"]] == ["S", "T"], summary
    for shape in [(1, 64, 64, 8), (1, 9, 20, 8), (3, 100, 3, 8), (2, 5, 7, 8)]:
        x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(_run(data, report, {"x": x}, "builtin")["y"],
                                   run_onnxruntime(model, {"x": x})["y"], rtol=1e-4, atol=1e-5)


# --- a constant the comparison cannot follow, computed by the graph instead ----------------------
def _causal(style: str):
    """Attention scores x x^T [1, S, S] plus a causal bias built from the length: positions
    compared (GPT-2's arange <= arange), Trilu of ones of [S, S], or the comparison Expanded to
    [1, S, S] by a shape Concat builds. Folded at 64 each is an [S, S] constant no table holds."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["x", "xt"], ["scores"]),
             helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["s"], axis=0)]
    inits = [_ints("one", 1), _ints("zero", 0), _ints("step", 1), _ints("axis0", [0]), _ints("axis1", [1]),
             numpy_helper.from_array(np.array(0.0, np.float32), "keep"),
             numpy_helper.from_array(np.array(-1e9, np.float32), "drop")]
    if style == "trilu":
        nodes += [helper.make_node("Unsqueeze", ["s", "axis0"], ["s1"]),
                  helper.make_node("Concat", ["s1", "s1"], ["square"], axis=0),
                  helper.make_node("ConstantOfShape", ["square"], ["ones"],
                                   value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
                  helper.make_node("Trilu", ["ones"], ["lower"], upper=0),
                  helper.make_node("Cast", ["lower"], ["mask"], to=TensorProto.BOOL)]
    else:
        nodes += [helper.make_node("Range", ["zero", "s", "step"], ["positions"]),
                  helper.make_node("Unsqueeze", ["positions", "axis0"], ["row"]),
                  helper.make_node("Unsqueeze", ["positions", "axis1"], ["column"]),
                  helper.make_node("LessOrEqual", ["row", "column"], ["mask"])]
    if style == "expanded":
        nodes += [helper.make_node("Unsqueeze", ["s", "axis0"], ["s2"]),
                  helper.make_node("Concat", ["one_vector", "s2", "s2"], ["target"], axis=0),
                  helper.make_node("Expand", ["mask", "target"], ["mask3"])]
        inits.append(_ints("one_vector", [1]))
    nodes += [helper.make_node("Where", ["mask3" if style == "expanded" else "mask", "keep", "drop"], ["bias"]),
              helper.make_node("Add", ["scores", "bias"], ["biased"]),
              helper.make_node("Softmax", ["biased"], ["y"], axis=-1)]
    return _model(nodes, [1, "S", 8], inits)


@pytest.mark.parametrize("style", ["compared", "trilu", "expanded"])
def test_a_causal_mask_from_the_length_is_computed_when_the_model_runs(tmp_path, style):
    model = _causal(style)
    data, report, summary = _convert_cli(model, tmp_path)
    assert [d["symbol"] for d in report["dimensions"] if d["resizable"]] == ["S"], summary
    _matches_at(data, report, model, [(1, 1, 8), (1, 37, 8), (1, 200, 8)], seed=6)


# --- a batch times the length: a mask flattened and gathered (transformers' attention mask) ---------
def _flattened_mask(embeddings: str = ""):
    """transformers' padding mask: the [B, S] mask flattened to [B * S, 1] and gathered at
    b * S + s (Range(B) times the length plus Range(S)), a constant grid of the two sizes once
    folded, applied to x [B, S, 16]. With embeddings "bert", BERT's too: a token-type row
    gathered by zeros expanded to [B, S] added first, then a position table gathered at its
    position_ids buffer cut to the length (the float pipeline merges the two into one [B, S, 16]
    constant); "roberta": the token types a GatherElements of the zeros buffer cut to the length
    and expanded to [B, S], at positions computed from the values (a CumSum of the mask)."""
    node = helper.make_node
    nodes = [node("ReduceSum", ["x", "last"], ["mask"], keepdims=0),
             node("Flatten", ["mask"], ["flat"], axis=2),
             node("Shape", ["x"], ["shape"]),
             node("Gather", ["shape", "zero"], ["b"], axis=0), node("Gather", ["shape", "one"], ["s"], axis=0),
             node("Range", ["zero", "b", "one"], ["rows"]), node("Range", ["zero", "s", "one"], ["columns"]),
             node("Unsqueeze", ["rows", "axis1"], ["row"]), node("Mul", ["row", "s"], ["starts"]),
             node("Unsqueeze", ["columns", "axis0"], ["column"]), node("Add", ["starts", "column"], ["at"]),
             node("Gather", ["flat", "at"], ["kept"], axis=0), node("Sigmoid", ["kept"], ["weight"])]
    inits = [_ints("last", [2]), _ints("zero", 0), _ints("one", 1), _ints("axis0", [0]), _ints("axis1", [1])]
    if not embeddings:
        nodes.append(node("Mul", ["x", "weight"], ["y"]))
        return _model(nodes, ["B", "S", 16], inits)
    nodes += [node("Shape", ["x"], ["its_shape"]),  # exporters repeat the shape arithmetic
              node("Slice", ["its_shape", "axis0", "two"], ["bs"]),
              node("Gather", ["its_shape", "one"], ["its_s"], axis=0),
              node("Unsqueeze", ["its_s", "axis0"], ["length"])]
    if embeddings == "roberta":
        nodes += [node("Greater", ["mask", "floor"], ["valid"]), node("Cast", ["valid"], ["ones"], to=TensorProto.INT64),
                  node("CumSum", ["ones", "one"], ["counted"]), node("Sub", ["counted", "one"], ["at_positions"]),
                  node("Slice", ["type_buffer", "axis0", "length", "axis1"], ["buffered"]),
                  node("Expand", ["buffered", "bs"], ["expanded"]),
                  node("GatherElements", ["expanded", "at_positions"], ["types"], axis=1)]
    else:
        nodes.append(node("ConstantOfShape", ["bs"], ["types"],
                          value=helper.make_tensor("v", TensorProto.INT64, [1], [0])))
    nodes += [
              node("Gather", ["type_table", "types"], ["type_rows"], axis=0),
              node("Slice", ["position_ids", "axis0", "length", "axis1"], ["ids"]),
              node("Gather", ["table", "ids"], ["positions"], axis=0),
              node("Mul", ["x", "weight"], ["masked"]), node("Add", ["masked", "type_rows"], ["typed"]),
              node("Add", ["typed", "positions"], ["y"])]
    inits += [_ints("two", [2]), numpy_helper.from_array(RNG.standard_normal((2, 16)).astype(np.float32), "type_table"),
              numpy_helper.from_array(RNG.standard_normal((512, 16)).astype(np.float32), "table"),
              _ints("position_ids", np.arange(512)[None]), _ints("type_buffer", np.zeros((1, 512))),
              numpy_helper.from_array(np.array(-1e30, np.float32), "floor")]
    return _model(nodes, ["B", "S", 16], inits)


@pytest.mark.parametrize("embeddings", ["", "bert", "roberta"])
def test_a_mask_gathered_at_batch_times_length_keeps_both_resizable(tmp_path, embeddings):
    """The grid b * S + s cannot be followed as a constant (each entry a product of the two
    sizes): the Gather's indices are computed when the model runs instead, bounded by the
    flattened mask's SHAPE; a merged embedding constant is the position table's cut plus the
    token-type row, broadcast to the batch; a GatherElements at computed positions builds its
    coordinate grids from the indices' SHAPE. Batch and length resizable, one file at each."""
    model = _flattened_mask(embeddings)
    data, report, summary = _convert_cli(model, tmp_path)
    assert report["batch"]["resizable"], summary
    assert [d["symbol"] for d in report["dimensions"] if d["resizable"]] == ["S"], summary
    _matches_at(data, report, model, [(1, 9, 16), (3, 20, 16), (2, 64, 16), (4, 1, 16)], seed=7)


# --- pads computed from the size: Swin's window padding ----------------------------------------
def _window_padded(style: str, pooled: bool = False):
    """x [1, 4, H, W] padded to whole windows by pads computed from its size, then partitioned
    into windows by a Reshape its padded Shape builds, a softmax over each window, partitioned
    back and cropped to H x W: Swin's (7 - W % 7) % 7 at the ends of channels-last height and
    width ("swin"); 4-wide windows padded on both sides, pad // 2 first ("centered"); or
    trimmed to whole 4-wide windows by negative end pads, -(W % 4), and not cropped ("trimmed").
    `pooled`: Swin's last stage, after a 16x16 average pool (64 and 96 pool to 4 and 6: both pad
    to 7; 160 pools to 10, which pads to 14)."""
    node = helper.make_node
    window = 7 if style == "swin" else 4
    x = "nhwc" if style == "swin" else "x"
    nodes = [node("AveragePool", ["x"], ["pooled"], kernel_shape=[16, 16], strides=[16, 16])] if pooled else []
    nodes += [node("Transpose", ["pooled" if pooled else "x"], ["nhwc"], perm=[0, 2, 3, 1])] if style == "swin" else []
    h_axis, w_axis = (1, 2) if style == "swin" else (2, 3)
    nodes += [node("Shape", [x], ["shape"]),
              node("Gather", ["shape", "h_axis"], ["h"], axis=0), node("Gather", ["shape", "w_axis"], ["w"], axis=0)]
    for d in ("h", "w"):
        nodes.append(node("Mod", [d, "window"], [f"{d}_mod"]))
        if style == "trimmed":
            nodes += [node("Neg", [f"{d}_mod"], [f"{d}_end"]), node("Mul", ["zero", f"{d}_mod"], [f"{d}_begin"])]
        else:
            nodes += [node("Sub", ["window", f"{d}_mod"], [f"{d}_short"]),
                      node("Mod", [f"{d}_short", "window"], [f"{d}_pad"])]
            if style == "centered":
                nodes += [node("Div", [f"{d}_pad", "two"], [f"{d}_begin"]),
                          node("Sub", [f"{d}_pad", f"{d}_begin"], [f"{d}_end"])]
            else:
                nodes += [node("Mul", ["zero", f"{d}_pad"], [f"{d}_begin"]),
                          node("Identity", [f"{d}_pad"], [f"{d}_end"])]
        nodes += [node("Unsqueeze", [f"{d}_{side}", "axis0"], [f"{d}_{side}1"]) for side in ("begin", "end")]
    nodes += [node("Concat", ["h_begin1", "w_begin1", "h_end1", "w_end1"], ["pads"], axis=0),
              node("Pad", [x, "pads", "", "hw_axes"], ["padded"]),
              node("Shape", ["padded"], ["padded_shape"]),
              node("Gather", ["padded_shape", "h_axis"], ["hp"], axis=0),
              node("Gather", ["padded_shape", "w_axis"], ["wp"], axis=0),
              node("Div", ["hp", "window"], ["nh"]), node("Div", ["wp", "window"], ["nw"]),
              node("Unsqueeze", ["nh", "axis0"], ["nh1"]), node("Unsqueeze", ["nw", "axis0"], ["nw1"])]
    if style == "swin":  # [1, nh, 7, nw, 7, 4], the window's 49 on axes 2 and 4
        nodes.append(node("Concat", ["one1", "nh1", "window1", "nw1", "window1", "four1"], ["windows"], axis=0))
        perm, axis = [0, 1, 3, 2, 4, 5], 3
    else:  # [1, 4, nh, 4, nw, 4]
        nodes.append(node("Concat", ["one1", "four1", "nh1", "window1", "nw1", "window1"], ["windows"], axis=0))
        perm, axis = [0, 1, 2, 4, 3, 5], 4
    nodes += [node("Reshape", ["padded", "windows"], ["win"]),
              node("Transpose", ["win"], ["grouped"], perm=perm),
              node("Softmax", ["grouped"], ["soft"], axis=axis),
              node("Transpose", ["soft"], ["ungrouped"], perm=perm),
              node("Reshape", ["ungrouped", "padded_shape"], ["back"])]
    if style == "trimmed":
        nodes.append(node("Identity", ["back"], ["y"]))
    else:
        nodes += [node("Unsqueeze", ["h", "axis0"], ["h1"]), node("Unsqueeze", ["w", "axis0"], ["w1"]),
                  node("Concat", ["h1", "w1"], ["ends"], axis=0),
                  node("Concat", ["h_begin1", "w_begin1"], ["starts"], axis=0),
                  node("Add", ["starts", "ends"], ["stops"]),
                  node("Slice", ["back", "starts", "stops", "hw_axes"], ["cropped"])]
        nodes.append(node("Transpose", ["cropped"], ["y"], perm=[0, 3, 1, 2]) if style == "swin"
                     else node("Identity", ["cropped"], ["y"]))
    inits = [_ints("h_axis", h_axis), _ints("w_axis", w_axis), _ints("window", window), _ints("two", 2),
             _ints("zero", 0), _ints("axis0", [0]), _ints("hw_axes", [h_axis, w_axis]), _ints("one1", [1]),
             _ints("window1", [window]), _ints("four1", [4])]
    return _model(nodes, [1, 4, "H", "W"], inits, opset=18)  # (Pad axes)


@pytest.mark.parametrize("style", ["swin", "centered", "trimmed"])
def test_pads_computed_from_the_size_keep_it_resizable(tmp_path, style):
    """The pads move with the size but not in proportion ((7 - W % 7) % 7 is 6 at 64, 2 at 96):
    no constant follows them, so the model is loaded again with them computed when it runs (PAD
    by a tensor, SLICE of a computed size) and its window Reshape reads its computed target.
    Height and width resizable, one file at sizes of every remainder."""
    model = _window_padded(style)
    data, report, summary = _convert_cli(model, tmp_path)
    assert [d["symbol"] for d in report["dimensions"] if d["resizable"]] == ["H", "W"], summary
    shapes = [(1, 4, 50, 33), (1, 4, 7, 14), (1, 4, 13, 9), (1, 4, 96, 80)]
    if style == "trimmed":
        shapes = [s[:2] + (max(s[2], 4), max(s[3], 4)) for s in shapes]
    _matches_at(data, report, model, shapes, seed=8)


def test_a_padded_size_that_stands_still_between_two_probes_stays_fixed(tmp_path):
    """Swin's last stage pads 64 and 96 alike (to one 7-wide window), 160 not: the model loaded
    with the pads computed passes the probe at 96, but a second probe at 160 disagrees, so
    height and width stay at 64, the summary saying why (without the second probe the file
    failed its own check at 128x160). The file is right at its size."""
    model = _window_padded("swin", pooled=True)
    data, report, summary = _convert_cli(model, tmp_path)
    fixed = {d["symbol"]: d["fixed_because"] for d in report["dimensions"] if not d["resizable"]}
    assert set(fixed) == {"H", "W"} and "96 above the sizes" in fixed["H"], summary
    _matches_at(data, report, model, [(1, 4, 64, 64)], seed=9)


def test_a_constant_shown_by_the_first_reload_is_computed_by_the_next(tmp_path):
    """The padding mask gathered at b * S + s, then attention scores of the masked x plus a
    causal bias from the length (MPNet's position bias in kind): the first probe stops at the
    mask's indices; the model loaded with them computed shows the bias, which a second reload
    computes too. Batch and length resizable."""
    model = _flattened_mask()
    graph, node = model.graph, helper.make_node
    graph.node[-1].output[0] = "masked"
    graph.node.extend([
        node("Transpose", ["masked"], ["masked_t"], perm=[0, 2, 1]),
        node("MatMul", ["masked", "masked_t"], ["scores"]),
        node("Shape", ["x"], ["x_shape"]),  # its own shape arithmetic, as exporters repeat it
        node("Gather", ["x_shape", "one"], ["length"], axis=0),
        node("Range", ["zero", "length", "one"], ["positions"]),
        node("Unsqueeze", ["positions", "axis0"], ["key_at"]),
        node("Unsqueeze", ["positions", "axis1"], ["query_at"]),
        node("LessOrEqual", ["key_at", "query_at"], ["causal"]),
        node("Where", ["causal", "keep", "drop"], ["bias"]),
        node("Add", ["scores", "bias"], ["biased"]),
        node("Softmax", ["biased"], ["y"], axis=-1)])
    graph.initializer.extend([numpy_helper.from_array(np.array(0.0, np.float32), "keep"),
                              numpy_helper.from_array(np.array(-1e9, np.float32), "drop")])
    data, report, summary = _convert_cli(model, tmp_path)
    assert report["batch"]["resizable"], summary
    assert [d["symbol"] for d in report["dimensions"] if d["resizable"]] == ["S"], summary
    _matches_at(data, report, model, [(1, 9, 16), (3, 20, 16), (2, 1, 16)], seed=10)
