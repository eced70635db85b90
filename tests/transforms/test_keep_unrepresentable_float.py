"""keep_unrepresentable_float: an op whose values int8 cannot carry (a QDQ model's ADD whose output
scale is far finer than its inputs': requantization multiplier 256 or more; an attention mask at
float32's minimum) stays float between a DEQUANTIZE and a QUANTIZE, and the model runs like
onnxruntime; without the step the conversion is refused."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.errors import ConversionError
from qconvert.transforms.keep_unrepresentable_float import CANNOT_CARRY
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import (convert_proto, convert_quantized, make_model, run_onnxruntime, run_tflite,
                           without_quantize_step)

F = TensorProto.FLOAT


def cancelling_sum(out_scale: float):
    """y = (x1 + x2) as [8, 1], with the inputs' pairs at scale 1/16 and the sum's (and y's) at
    `out_scale` (x2 is about -x1: the sum is small)."""
    def pair(name, out):
        return [helper.make_node("QuantizeLinear", [name, f"s_{name}", "z"], [f"{name}_q"]),
                helper.make_node("DequantizeLinear", [f"{name}_q", f"s_{name}", "z"], [out])]
    nodes = pair("x1", "x1_dq") + pair("x2", "x2_dq")
    nodes.append(helper.make_node("Add", ["x1_dq", "x2_dq"], ["s"]))
    nodes += pair("s", "s_dq")
    nodes.append(helper.make_node("Reshape", ["s_dq", "shape"], ["n"]))
    nodes += pair("n", "y")
    inits = {"s_x1": np.array(1 / 16, np.float32), "s_x2": np.array(1 / 16, np.float32),
             "s_s": np.array(out_scale, np.float32), "s_n": np.array(out_scale, np.float32),
             "z": np.array(0, np.int8), "shape": np.array([8, 1], np.int64)}
    return make_model(nodes, {"x1": (F, (1, 8)), "x2": (F, (1, 8))}, {"y": F}, inits)


# Output multipliers 2 * (1/16) / (2^20 * out_scale): 512 (beyond XNNPACK's 256), and 2, which
# LiteRT's int8 ADD kernel aborts the process on in its prepare (EfficientWord-Net's QDQ model).
@pytest.mark.parametrize("out_scale", [2.0**-32, 2.0**-24])
def test_an_add_the_kernel_cannot_requantize_stays_float(out_scale):
    model = cancelling_sum(out_scale)
    flatbuffer, report = convert_proto(model, quantize=QuantizeOptions())
    (kept,) = report.quantization.float_ops
    assert kept.op == "ADD" and "QDQ pairs" in kept.reason and "multiplier" in kept.reason
    rng = np.random.default_rng(0)
    x1 = rng.integers(-100, 100, (1, 8)).astype(np.float32) / 16
    feeds = {"x1": x1, "x2": -x1 + rng.integers(-1, 2, (1, 8)).astype(np.float32) / 16}
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"],
                               run_onnxruntime(model, feeds)["y"], rtol=0, atol=out_scale)


def test_a_representable_add_stays_int8():
    _, report = convert_proto(cancelling_sum(1 / 16), quantize=QuantizeOptions())
    assert not report.quantization.float_ops and report.quantization.int8_ops == 2


def test_without_the_step_the_conversion_is_refused(monkeypatch):
    without_quantize_step(monkeypatch, "keep_unrepresentable_float")
    with pytest.raises(ConversionError, match="requantization multiplier"):
        convert_proto(cancelling_sum(2.0**-32), quantize=QuantizeOptions())


def masked_attention(mask_value: float):
    """Hugging Face's additive attention mask: scores = q k^T / 2 + (1 - mask) * mask_value, then
    Softmax and the values; q, k, v from one input by MatMul with constant weights."""
    rng = np.random.default_rng(1)
    weights = {f"w{n}": rng.normal(0, 0.5, (8, 8)).astype(np.float32) for n in "qkv"}
    nodes = [helper.make_node("MatMul", ["x", f"w{n}"], [n]) for n in "qkv"]
    nodes += [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
              helper.make_node("MatMul", ["q", "kt"], ["qk"]),
              helper.make_node("Mul", ["qk", "half"], ["scores"]),
              helper.make_node("Cast", ["mask"], ["maskf"], to=F),
              helper.make_node("Sub", ["one", "maskf"], ["inverted"]),
              helper.make_node("Mul", ["inverted", "lowest"], ["additive"]),
              helper.make_node("Unsqueeze", ["additive", "axis1"], ["additive3"]),
              helper.make_node("Add", ["scores", "additive3"], ["masked"]),
              helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    inits = {**weights, "half": np.array(0.5, np.float32), "one": np.array(1, np.float32),
             "lowest": np.array(mask_value, np.float32), "axis1": np.array([1], np.int64)}
    return make_model(nodes, {"x": (F, (1, 6, 8)), "mask": (TensorProto.INT64, (1, 6))}, {"y": F}, inits)


@pytest.mark.parametrize("mask_value", [float(np.finfo(np.float32).min), -1e30])
def test_an_attention_mask_at_the_float_minimum_stays_float(tmp_path, mask_value):
    """Every Hugging Face encoder adds (1 - mask) * float32's minimum to its attention scores
    (issue 30: the conversion was refused). The MUL that makes the mask stays float (int8 cannot
    multiply by float32's minimum), the model converts, the products, the mask's ADD and the
    SOFTMAX run int8 (saturate_masked_scores), and the output follows onnxruntime's with padded
    positions masked."""
    model = masked_attention(mask_value)
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (16, 1, 6, 8)).astype(np.float32)
    mask = np.ones((16, 1, 6), np.int64)
    mask[::2, :, 4:] = 0  # half the samples padded
    flatbuffer, report = convert_quantized(model, {"x": x, "mask": mask}, tmp_path)
    kept = {f.op for f in report.quantization.float_ops if f.reason.startswith(CANNOT_CARRY)}
    assert kept == {"MUL"}, report.quantization.float_ops
    assert report.quantization.int8_ops >= 3  # the products
    for k in (0, 1):
        feeds = {"x": x[k], "mask": mask[k]}
        want, got = run_onnxruntime(model, feeds)["y"], run_tflite(flatbuffer, report, feeds)["y"]
        error = np.sum((got - want) ** 2) / np.sum(want ** 2)
        assert error < 10 ** (-25 / 10), error  # better than 25 dB


def test_an_op_computing_with_a_constant_of_float32_extremes_stays_float(tmp_path):
    """x * float32's minimum, with x 0 throughout calibration: the product's range [0, 0] is
    representable, the constant has no int8 value (value_range leaves its extremes out). The MUL
    stays float, saying why, and the model runs like onnxruntime (the conversion raised KeyError)."""
    model = make_model([helper.make_node("Mul", ["x", "lowest"], ["m"]),
                        helper.make_node("Add", ["m", "y"], ["z"])],
                       {"x": (F, (1, 4)), "y": (F, (1, 4))}, {"z": F},
                       {"lowest": np.array(np.finfo(np.float32).min, np.float32)})
    rng = np.random.default_rng(0)
    calibration = {"x": np.zeros((4, 1, 4), np.float32), "y": rng.normal(size=(4, 1, 4)).astype(np.float32)}
    flatbuffer, report = convert_quantized(model, calibration, tmp_path)
    (kept,) = report.quantization.float_ops
    assert kept.op == "MUL" and kept.reason.startswith(CANNOT_CARRY) and "'lowest'" in kept.reason
    feeds = {"x": calibration["x"][0], "y": calibration["y"][0]}
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["z"], run_onnxruntime(model, feeds)["z"],
                               rtol=0, atol=2 * float(np.ptp(calibration["y"])) / 255)


def _near_cancelling(tmp_path, activations: str):
    """x1 + x2 in [-1, 1] each, their sum within 1e-5 of 0, calibrated and converted with
    `activations`: (flatbuffer, report, model, calibration)."""
    model = make_model([helper.make_node("Add", ["x1", "x2"], ["y"])],
                       {"x1": (F, (1, 8)), "x2": (F, (1, 8))}, {"y": F})
    rng = np.random.default_rng(0)
    x1 = rng.uniform(-1, 1, (8, 1, 8)).astype(np.float32)
    x1[0, 0, :2] = [-1, 1]
    x2 = (-x1 + rng.uniform(-1e-5, 1e-5, x1.shape)).astype(np.float32)
    calibration = {"x1": x1, "x2": x2}
    flatbuffer, report = convert_quantized(model, calibration, tmp_path, activations=activations)
    return flatbuffer, report, model, calibration


@pytest.mark.parametrize("activations", ["int8", "int16"])
def test_an_add_keeps_the_left_shift_of_its_activation_type(tmp_path, activations):
    """ADD rescales by 2^20 in int8 and by 2^15 in int16: an output scale 1e5 times finer than
    the inputs' is within int8's headroom and beyond int16's (LiteRT aborted the process in the
    16x8 ADD's prepare: a GRU's gates in a 16x8 plan). The int16 ADD stays float, the int8 one
    runs int8; both files load and follow onnxruntime (the int8 one within its inputs' step)."""
    flatbuffer, report, model, calibration = _near_cancelling(tmp_path, activations)
    kept = [f for f in report.quantization.float_ops if f.op == "ADD"]
    assert bool(kept) == (activations == "int16"), report.quantization.float_ops
    if kept:
        assert kept[0].reason.startswith(CANNOT_CARRY) and "2^15" in kept[0].reason
    feeds = {name: values[1] for name, values in calibration.items()}
    want = run_onnxruntime(model, feeds)["y"]
    step = 1e-6 if kept else 1 / 127  # a float ADD reads its float inputs; an int8 one rounds them
    np.testing.assert_allclose(run_tflite(flatbuffer, report, feeds)["y"], want, rtol=0, atol=step)
