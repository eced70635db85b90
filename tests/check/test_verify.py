"""Verification (qconvert/check/verify.py): the metrics on hand-made outputs, and whole models run in
onnxruntime and LiteRT, paired by name, by order and shape, with and without the layout metadata."""

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.harness import convert
from qconvert.tflite import schema_generated as S
from qconvert.check.metrics import feature_axis, sqnr_db
from qconvert.check.verify import check_output, verify
from tests.harness import make_model

RNG = np.random.default_rng(5)
BOXES, CLASSES, ANCHORS = 4, 3, 50


def test_sqnr_cosine_errors_and_top1_by_hand():
    reference = np.array([[1.0, 1.0, -2.0]])
    actual = np.array([[1.1, 0.9, -2.0]])
    check = check_output("y", reference, actual)
    assert check.sqnr_db == pytest.approx(10 * math.log10(6 / 0.02))
    assert check.max_abs_error == pytest.approx(0.1) and check.mean_abs_error == pytest.approx(0.2 / 3)
    assert check.cosine == pytest.approx((1.1 + 0.9 + 4) / math.sqrt(6 * (1.21 + 0.81 + 4)))
    assert check.top1_agreement == 1.0  # argmax 0 in both
    assert sqnr_db(reference, reference) == math.inf and sqnr_db(np.zeros(2), np.ones(2)) == -math.inf
    swapped = check_output("y", np.array([[3.0, 1.0], [0.0, 2.0]]), np.array([[1.0, 3.0], [0.0, 2.0]]))
    assert swapped.top1_agreement == 0.5


def test_feature_axis_is_the_shortest_after_the_first():
    assert feature_axis((1, 84, 8400)) == 1 and feature_axis((1, 8400, 85)) == 2
    assert feature_axis((1, 4, 4)) == 2 and feature_axis((1, 1000)) is None and feature_axis((1, 1)) is None


def test_feature_axis_of_a_map_is_its_channels():
    assert feature_axis((1, 16, 4, 4)) == 1 and feature_axis((1, 1, 320, 320)) is None


def detector_outputs(samples: int = 4) -> np.ndarray:
    """[samples, 1, 4 + classes, anchors]: boxes in 0..320, class scores in 0..1."""
    boxes = RNG.uniform(0, 320, (samples, 1, BOXES, ANCHORS))
    scores = RNG.uniform(0, 1, (samples, 1, CLASSES, ANCHORS))
    return np.concatenate([boxes, scores], axis=2)


def test_worst_slice_shows_scores_rounded_away_under_boxes():
    reference = detector_outputs()
    actual = reference.copy()
    actual[:, :, BOXES:] = 0  # every class score gone, the boxes exact
    check = check_output("output0", reference, actual)
    assert check.sqnr_db > 20  # the boxes' energy hides it in the whole tensor
    assert check.worst_slice_sqnr_db < 5 and check.worst_slice.startswith("axis 1, index ")
    assert int(check.worst_slice.rsplit(" ", 1)[1]) >= BOXES


def detector_model(score_gain: float) -> onnx.ModelProto:
    """A detector head: boxes = 320 * sigmoid(conv), scores = sigmoid(conv) * score_gain,
    concatenated to [1, 4 + classes, anchors] (YOLOv8's output layout)."""
    x_shape = (1, 8, 5, 10)
    nodes = [helper.make_node("Conv", ["x", "wb"], ["b0"]), helper.make_node("Sigmoid", ["b0"], ["b1"]),
             helper.make_node("Mul", ["b1", "box_scale"], ["b2"]),
             helper.make_node("Conv", ["x", "ws"], ["s0"]), helper.make_node("Sigmoid", ["s0"], ["s1"]),
             helper.make_node("Mul", ["s1", "gain"], ["s2"]),
             helper.make_node("Concat", ["b2", "s2"], ["c"], axis=1),
             helper.make_node("Reshape", ["c", "shape"], ["output0"])]
    rng = np.random.default_rng(1)
    inits = {"wb": rng.standard_normal((BOXES, 8, 1, 1)).astype(np.float32),
             "ws": rng.standard_normal((CLASSES, 8, 1, 1)).astype(np.float32),
             "box_scale": np.float32(320), "gain": np.float32(score_gain),
             "shape": np.array([1, BOXES + CLASSES, ANCHORS], np.int64)}
    return make_model(nodes, {"x": (TensorProto.FLOAT, x_shape)}, {"output0": TensorProto.FLOAT}, inits)


def write(model: onnx.ModelProto, path, **options) -> str:
    flatbuffer, _ = convert("<test>", data=model.SerializeToString(), **options)
    path.write_bytes(bytes(flatbuffer))
    return str(path)


def test_a_detector_whose_scores_collapsed(tmp_path):
    """The .tflite of the same head with every score zeroed, verified against the real one."""
    good, broken = detector_model(1.0), detector_model(0.0)
    result = verify(good, write(broken, tmp_path / "broken.tflite"), count=3, min_sqnr=10)
    (check,) = result.outputs
    assert check.sqnr_db > 20 and check.worst_slice_sqnr_db < 5
    assert not result.passed and result.below(10) == [
        f"output0 ({check.worst_slice}) {check.worst_slice_sqnr_db:.1f} dB"]
    assert verify(good, write(good, tmp_path / "good.tflite"), count=3, min_sqnr=60).passed


def conv_model(names=("x", "y")) -> onnx.ModelProto:
    """Conv on a [1, 3, 10, 12] image to [1, 4, 10, 12]: channels-last I/O has distinct dims."""
    x, y = names
    w = np.random.default_rng(2).standard_normal((4, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", [x, "w"], [y], pads=[1, 1, 1, 1])
    return make_model([node], {x: (TensorProto.FLOAT, (1, 3, 10, 12))}, {y: TensorProto.FLOAT}, {"w": w})


def without_metadata(path) -> str:
    """The .tflite rewritten without its metadata (as another tool would write it)."""
    model = S.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    assert model.metadata
    model.metadata = None
    import flatbuffers

    builder = flatbuffers.Builder(0)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    stripped = path.with_name("stripped.tflite")
    stripped.write_bytes(builder.Output())
    return str(stripped)


def test_inputs_and_outputs_paired_by_order_and_layout_found(tmp_path):
    path = tmp_path / "conv.tflite"
    write(conv_model(), path)  # channels-last input and output, recorded in the metadata
    renamed = conv_model(("image", "features"))  # the same graph under other names
    for tflite in (str(path), without_metadata(path)):
        result = verify(renamed, tflite, count=2)
        assert [o.name for o in result.outputs] == ["features"] and result.worst.sqnr_db > 60


def test_int8_inputs_and_outputs_are_quantized_and_dequantized(tmp_path):
    model = conv_model()
    samples = [{"x": RNG.standard_normal((1, 3, 10, 12)).astype(np.float32)} for _ in range(8)]
    calibration = tmp_path / "cal.npz"
    np.savez(calibration, x=np.stack([s["x"] for s in samples]))
    from qconvert.transforms.pipeline import QuantizeOptions

    path = write(model, tmp_path / "int8.tflite", quantize=QuantizeOptions(io_type="int8"),
                 calibration=str(calibration))
    result = verify(model, path, samples)
    assert 30 < result.worst.sqnr_db < 60  # int8 rounding, not garbage and not float


# --- the float check ---------------------------------------------------------------------------
def test_output_rules_read_bounded_functions_through_data_movement():
    from qconvert.check.float_check import output_rules

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Flatten", ["t"], ["scores"]),  # Sigmoid's range: 1
             helper.make_node("Clip", ["c", "lo", "hi"], ["clipped"]),  # Clip(-6, 2): 6
             helper.make_node("Concat", ["s", "clipped"], ["both"], axis=1),  # the larger: 6
             helper.make_node("Concat", ["s", "c"], ["mixed"], axis=1),  # c is unbounded: none
             helper.make_node("ArgMax", ["c"], ["a"], axis=1),
             helper.make_node("Cast", ["a"], ["labels"], to=TensorProto.INT32)]  # ArgMax's step
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 3, 4, 4))},
                       {n: TensorProto.FLOAT for n in ("scores", "both", "mixed", "c")} | {"labels": TensorProto.INT32},
                       {"w": RNG.standard_normal((2, 3, 1, 1)).astype(np.float32),
                        "lo": np.float32(-6), "hi": np.float32(2)})
    rules = output_rules(model)
    assert (rules["scores"].floor, rules["scores"].bounded_by) == (1.0, "Sigmoid")
    assert (rules["both"].floor, rules["both"].bounded_by) == (6.0, "Clip")
    assert rules["mixed"].floor == 0 and rules["c"].floor == 0 and rules["c"].step is None
    assert rules["labels"].step.op_type == "ArgMax"


def test_the_float_check_by_hand():
    from qconvert.check.float_check import FLOAT32_EPS, OutputRule

    reference = np.array([[5e-7, 4e-7, 6e-7]])
    actual = reference + np.array([[1.2e-7, 0, -1e-7]])  # a saturated sigmoid in LiteRT
    plain = check_output("y", reference, actual)
    assert plain.scale == pytest.approx(6e-7) and plain.relative_error == pytest.approx(0.2)
    assert plain.sqnr_db < 20 and plain.bounded_by is None
    floored = check_output("y", reference, actual, OutputRule(1.0, "Sigmoid"))
    assert (floored.scale, floored.bounded_by) == (1.0, "Sigmoid")
    assert floored.relative_error == pytest.approx(1.2e-7)
    assert floored.ulps == pytest.approx(1.2e-7 / FLOAT32_EPS)
    assert check_output("y", np.zeros((1, 3)), np.zeros((1, 3))).relative_error == 0
    assert check_output("y", np.zeros((1, 3)), np.full((1, 3), 1e-30)).relative_error == math.inf
    labels = check_output("labels", np.array([[1, 2, 3]]), np.array([[1, 2, 4]]))
    assert labels.mismatches == 1 and labels.relative_error is None


def test_near_ties_of_an_argmax_and_a_comparison():
    """An index that differs counts when the value onnxruntime computed at the .tflite's index is
    within FLOAT_TOLERANCE of the scale from the one at its own; a comparison, when its operands
    are that close."""
    from qconvert.check.float_check import FLOAT_TOLERANCE, OutputRule, near_ties

    x = np.array([[[1.0, 1.0 + FLOAT_TOLERANCE / 2, 0.5], [0.0, 2.0, 1.0]]])  # [1 sample, 2, 3]
    argmax = helper.make_node("ArgMax", ["x"], ["a"], axis=-1, keepdims=0)
    ours = np.array([[1, 1]])
    assert near_ties(argmax, [x], ours, np.array([[0, 1]])).tolist() == [[True, True]]
    assert near_ties(argmax, [x], ours, np.array([[2, 0]])).tolist() == [[False, False]]
    check = check_output("a", ours, np.array([[0, 1]]), OutputRule(step=argmax), [x])
    assert (check.mismatches, check.near_ties) == (0, 1)
    check = check_output("a", ours, np.array([[0, 0]]), OutputRule(step=argmax), [x])
    assert (check.mismatches, check.near_ties) == (1, 1)
    greater = helper.make_node("Greater", ["x", "t"], ["g"])
    threshold = np.array([[1.0]])  # a constant: [1, *shape], broadcast like the ONNX op
    ties = near_ties(greater, [x, threshold], x > 1.0, x <= 1.0)
    assert ties.tolist() == [[[True, True, False], [False, False, True]]]


def test_a_corrupted_float_file_fails_the_float_check(tmp_path):
    good = detector_model(1.0)
    result = verify(good, write(good, tmp_path / "good.tflite"), count=1, float_check=True)
    assert result.passed and result.check == "float" and not result.float_failures()
    assert result.summary().startswith("verify: float, worst output 'output0' max error ")
    assert result.summary().endswith(" (1 sample)")
    wrong = verify(good, write(detector_model(0.5), tmp_path / "wrong.tflite"), count=1,
                   float_check=True)
    assert not wrong.passed
    (failure,) = wrong.float_failures()
    assert failure.startswith("output 'output0' max error ") and "above the float tolerance" in failure
    assert verify(good, str(tmp_path / "wrong.tflite"), count=1).passed  # SQNR, no threshold


def test_an_argmax_over_nearly_tied_classes_passes_the_float_check(tmp_path):
    """Two classes whose logits differ by 1e-7 relative at every pixel: LiteRT's and
    onnxruntime's sums over 256 channels pick differently where they round differently (1121 of
    4096 pixels on an AMD EPYC); each such label is a near-tie, none a mismatch."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2, 256, 1, 1)).astype(np.float32)
    w[1] = w[0] * np.float32(1 + 1e-7)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("ArgMax", ["c"], ["a"], axis=1, keepdims=0),
             helper.make_node("Cast", ["a"], ["labels"], to=TensorProto.INT32)]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, (1, 256, 64, 64))},
                       {"labels": TensorProto.INT32}, {"w": w})
    result = verify(model, write(model, tmp_path / "labels.tflite"), count=1, float_check=True)
    (check,) = result.outputs
    assert result.passed and check.mismatches == 0 and check.relative_error is None
    assert result.summary().startswith("verify: float, every output equal")


def _tiny_model(gain: float) -> onnx.ModelProto:
    """y = x * 1e-20 * gain: outputs of about 1e-40 for gain 1e-20, denormal in float32 (LiteRT
    flushes them to zero, onnxruntime keeps them); z = x beside it."""
    nodes = [helper.make_node("Mul", ["x", "small"], ["s"]), helper.make_node("Mul", ["s", "gain"], ["y"]),
             helper.make_node("Identity", ["x"], ["z"])]
    return make_model(nodes, {"x": (TensorProto.FLOAT, (2, 8))},
                      {"y": TensorProto.FLOAT, "z": TensorProto.FLOAT},
                      {"small": np.float32(1e-20), "gain": np.float32(gain)})


def test_denormal_outputs_pass_the_float_check(tmp_path):
    """Outputs all denormal (or zero) compare as zero: no false alarm; a normal error still fails."""
    model = _tiny_model(1e-20)
    path = write(model, tmp_path / "tiny.tflite")
    result = verify(model, path, count=2, float_check=True)
    assert result.passed, result.summary()
    assert {o.name: o.relative_error for o in result.outputs} == {"y": 0.0, "z": 0.0}
    wrong = verify(_tiny_model(1e-10), path, count=2, float_check=True)  # about 1e-30, normal
    assert not wrong.passed and "output 'y'" in wrong.float_failures()[0]


def test_denormals_compare_as_zero_by_hand():
    tiny = float(np.finfo(np.float32).tiny)
    reference = np.array([[1e-40, -3e-39, 0.0, tiny / 2]])
    assert check_output("y", reference, np.zeros((1, 4))).relative_error == 0
    assert check_output("y", reference, reference * 0.5).relative_error == 0
    assert check_output("y", reference, np.array([[0, 0, 0, tiny * 2]])).relative_error == math.inf


def test_near_ties_of_a_float16_model_are_float16_wide():
    """A model onnxruntime computes in float16 ties within FLOAT16_TOLERANCE, not float32's."""
    from qconvert.check.float_check import FLOAT16_TOLERANCE, FLOAT_TOLERANCE, near_ties

    x = np.array([[[1.0, 1.0 + 2 ** -10, 0.5]]])  # one float16 step apart
    argmax = helper.make_node("ArgMax", ["x"], ["a"], axis=-1, keepdims=0)
    ours, theirs = np.array([[1]]), np.array([[0]])
    assert near_ties(argmax, [x], ours, theirs, FLOAT_TOLERANCE).tolist() == [[False]]
    assert near_ties(argmax, [x], ours, theirs, FLOAT16_TOLERANCE).tolist() == [[True]]


def test_an_output_whose_declared_shape_needs_particular_inputs_says_so(tmp_path):
    """A Slice whose starts and ends are fed, its output declared [2]: the check's drawn operands
    give another shape; the message says the inputs do not fit the model (not that the file is
    wrong), and inputs that fit verify it exactly."""
    import subprocess
    import sys

    nodes = [helper.make_node("Slice", ["x", "s", "e"], ["y"])]
    model = make_model(nodes, {"x": (TensorProto.FLOAT, [6]), "s": (TensorProto.INT64, [1]),
                               "e": (TensorProto.INT64, [1])}, {"y": TensorProto.FLOAT})
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 2
    onnx.save(model, tmp_path / "m.onnx")
    run = subprocess.run([sys.executable, "-m", "qconvert", "m.onnx", "m.tflite"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 1 and not (tmp_path / "m.tflite").exists(), run.stderr
    assert "but the model declares [2]: the output's shape depends on input values" in run.stderr
    np.savez(tmp_path / "fit.npz", x=np.arange(12, dtype=np.float32).reshape(2, 6),
             s=np.array([[1], [3]], np.int64), e=np.array([[3], [5]], np.int64))
    run = subprocess.run([sys.executable, "-m", "qconvert", "m.onnx", "m.tflite", "--verify-data", "fit.npz"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and "max error 0 " in run.stderr, run.stderr
