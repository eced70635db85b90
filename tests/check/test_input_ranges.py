"""The values the default check draws each graph input from (check/input_ranges.py): ids below
the size of the table they index, a paired float input within its pair's grid; the generated
samples of a converted file take them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from qconvert.check.input_ranges import id_bounds, normalized_spans, pair_spans
from qconvert.check.runtimes import TFLiteModel, generated_samples, onnx_values
from tests.harness import convert_proto, make_model


def _embedding(rows: int = 300) -> onnx.ModelProto:
    """ids [1, 6] -> Cast -> Unsqueeze -> Gather from a table of `rows` rows, and the same ids
    through a second, 50-row table (the smaller bound wins)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
             helper.make_node("Unsqueeze", ["ids32", "axis"], ["ids3"]),
             helper.make_node("Gather", ["table", "ids3"], ["e"]),
             helper.make_node("Gather", ["small", "ids"], ["f"]),
             helper.make_node("ReduceSum", ["e", "axis"], ["es"], keepdims=0),
             helper.make_node("Add", ["es", "f"], ["y"])]
    inits = {"table": rng.normal(size=(rows, 8)).astype(np.float32),
             "small": rng.normal(size=(50, 8)).astype(np.float32), "axis": np.array([0], np.int64)}
    return make_model(nodes, {"ids": (TensorProto.INT64, (1, 6))}, {"y": TensorProto.FLOAT}, inits)


def test_ids_are_bounded_by_the_smallest_table_they_index():
    assert id_bounds(_embedding().graph) == {"ids": 50}
    single = _embedding()
    del single.graph.node[3]  # the 50-row Gather gone: only the 300-row table
    single.graph.node[-1].input[1] = "es"
    assert id_bounds(single.graph) == {"ids": 300}


def test_a_paired_input_takes_its_grid():
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 4))}, {"y": TensorProto.FLOAT},
                       {"s": np.float32(0.02), "z": np.uint8(100)})
    low, high = pair_spans(model.graph)["x"]
    assert np.isclose(low, -100 * 0.02) and np.isclose(high, 155 * 0.02)


def _normalized(divide: bool = True, other_reader: bool = False) -> onnx.ModelProto:
    """torchvision's detection transform: images [1, 3, 4, 4] split off the batch (Split,
    Squeeze), less a per-channel mean, over a per-channel std (or times its inverse)."""
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
    nodes = [helper.make_node("Split", ["images"], ["image"], axis=0, num_outputs=1),
             helper.make_node("Squeeze", ["image", "axis"], ["pixels"]),
             helper.make_node("Sub", ["pixels", "mean"], ["centred"]),
             helper.make_node("Div" if divide else "Mul", ["centred", "std"], ["y"])]
    outputs = {"y": TensorProto.FLOAT}
    if other_reader:
        nodes.append(helper.make_node("Relu", ["images"], ["z"]))
        outputs["z"] = TensorProto.FLOAT
    return make_model(nodes, {"images": (TensorProto.FLOAT, (1, 3, 4, 4))}, outputs,
                      {"mean": mean, "std": std if divide else 1 / std,
                       "axis": np.array([0], np.int64)}, opset=18)


def test_an_input_the_graph_normalizes_spans_two_deviations_about_its_mean():
    """Drawn standard normal, a detector's pixels made every score 1.0 and every box degenerate;
    the normalized values within two deviations are pixels in about [0, 1]."""
    for divide in (True, False):
        low, high = normalized_spans(_normalized(divide).graph)["images"]
        assert np.isclose(low, 0.406 - 2 * 0.225, atol=1e-6)
        assert np.isclose(high, 0.485 + 2 * 0.229, atol=1e-6)
    assert normalized_spans(_normalized(other_reader=True).graph) == {}  # Relu reads it raw


def test_the_check_draws_ids_over_the_table(tmp_path):
    """The converted embedding's default-check inputs: ids spread over [0, 50), not 0..9."""
    model = _embedding()
    flatbuffer, _ = convert_proto(model)
    (tmp_path / "e.tflite").write_bytes(flatbuffer)
    file = TFLiteModel(str(tmp_path / "e.tflite"))
    file.pair(inputs=onnx_values(model))
    ids = np.concatenate([s["ids"].ravel() for s in generated_samples(file, model, 8)])
    assert ids.min() >= 0 and ids.max() < 50 and ids.max() >= 40, ids


def test_an_input_whose_values_the_graph_does_not_say_is_named_as_a_guess(tmp_path):
    """Indices into a computed tensor (no table whose size bounds them) are a guess: drawn from
    0..9, and the check's summary names the input; ids of a constant table are not a guess."""
    import json

    from click.testing import CliRunner

    from qconvert.check.input_ranges import guessed_inputs
    from qconvert.cli import cli

    model = make_model([helper.make_node("Gather", ["x", "n"], ["y"])],
                       {"x": (TensorProto.FLOAT, (12,)), "n": (TensorProto.INT64, (3,))}, {"y": TensorProto.FLOAT})
    onnx.save(model, tmp_path / "g.onnx")
    run = CliRunner().invoke(cli, [str(tmp_path / "g.onnx"), str(tmp_path / "g.tflite"), "--json"])
    assert run.exit_code == 0, run.stderr
    assert json.loads(run.stdout)["verify"]["guessed"] == ["n"]
    assert "guessed: 'n' drawn from 0..9" in run.stderr
    assert guessed_inputs(_embedding().graph, {"ids": (1, 5)}) == set()


def _length_mask() -> onnx.ModelProto:
    """y = x * (Range(0, S) < length), S = x's dimension 1 (16): a sequence mask from a length."""
    def constant(name, value):
        return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(value, np.int64)))

    nodes = [helper.make_node("Shape", ["x"], ["s"]), constant("k", 1), constant("zero", 0), constant("one", 1),
             helper.make_node("Gather", ["s", "k"], ["S"]),
             helper.make_node("Range", ["zero", "S", "one"], ["positions"]),
             helper.make_node("Less", ["positions", "length"], ["kept"]),
             helper.make_node("Cast", ["kept"], ["keptf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["keptf", "axes"], ["mask"]),
             helper.make_node("Mul", ["x", "mask"], ["y"])]
    return make_model(nodes, {"x": (TensorProto.FLOAT, (1, 16, 4)), "length": (TensorProto.INT64, (1,))},
                      {"y": TensorProto.FLOAT}, {"axes": np.array([0, 2], np.int64)})


def test_a_length_is_drawn_within_the_dimension_it_masks(tmp_path):
    """A length compared with a dimension's positions is drawn in [1, 16]: a wide draw (up to
    2^31) would never mask a position, and the check would not see the mask work."""
    from qconvert.check.input_ranges import length_bounds

    model = _length_mask()
    assert length_bounds(model.graph, {"x": (1, 16, 4)}) == {"length": 16}
    flatbuffer, _ = convert_proto(model)
    (tmp_path / "m.tflite").write_bytes(flatbuffer)
    file = TFLiteModel(str(tmp_path / "m.tflite"))
    file.pair(inputs=onnx_values(model))
    lengths = np.concatenate([s["length"] for s in generated_samples(file, model, 16)])
    assert lengths.min() >= 1 and lengths.max() <= 16 and len(set(lengths)) > 4, lengths


@pytest.mark.parametrize("layout", [0, 1])
def test_sequence_lens_fed_to_a_recurrent_node_are_drawn_within_its_time_steps(tmp_path, layout):
    """A graph input read as a GRU's sequence_lens: drawn in [1, T] (onnxruntime refuses a longer
    one, which left the check unable to run), and not named a guess; the file matches."""
    from qconvert.check.input_ranges import guessed_inputs, length_bounds

    rng = np.random.default_rng(0)
    shape = (6, 2, 4) if layout == 0 else (2, 6, 4)
    model = make_model([helper.make_node("GRU", ["x", "W", "R", "", "lens"], ["y"], hidden_size=8, layout=layout)],
                       {"x": (TensorProto.FLOAT, shape), "lens": (TensorProto.INT32, (2,))},
                       {"y": TensorProto.FLOAT},
                       {"W": rng.standard_normal((1, 24, 4)).astype(np.float32),
                        "R": (rng.standard_normal((1, 24, 8)) / 3).astype(np.float32)}, opset=14)
    assert length_bounds(model.graph, {"x": shape}) == {"lens": 6}
    assert guessed_inputs(model.graph, {"x": shape, "lens": (2,)}) == set()
    if layout == 1:
        return  # onnxruntime runs layout 0 only
    import json

    from click.testing import CliRunner

    from qconvert.cli import cli

    onnx.save(model, tmp_path / "m.onnx")
    run = CliRunner().invoke(cli, [str(tmp_path / "m.onnx"), str(tmp_path / "m.tflite"), "--json",
                                   "--verify-samples", "8"])
    assert run.exit_code == 0, run.stderr
    verify = json.loads(run.stdout)["verify"]
    assert verify["passed"] and verify["guessed"] == [] and verify["samples"] == 8


def test_roi_align_batch_indices_are_drawn_below_the_image_batch(tmp_path):
    """A RoiAlign whose batch_indices are a graph input: the default check draws them below the
    image's batch of 2 (drawn wide, onnxruntime refused them and the check could not run), and
    the file passes it; LiteRT's file is run on those samples against onnxruntime."""
    from tests.test_dynamic_batch import _convert_cli

    node = helper.make_node("RoiAlign", ["x", "rois", "index"], ["y"], output_height=2,
                            output_width=2, sampling_ratio=2, spatial_scale=1.0)
    model = make_model([node], {"x": (TensorProto.FLOAT, (2, 3, 8, 8)), "rois": (TensorProto.FLOAT, (4, 4)),
                                "index": (TensorProto.INT64, (4,))}, {"y": TensorProto.FLOAT}, opset=16)
    assert id_bounds(model.graph) == {"index": 2}
    _, report, summary = _convert_cli(model, tmp_path)
    assert report["verify"]["passed"] and "'index'" not in summary, summary
