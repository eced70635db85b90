"""Shared test machinery: convert an ONNX model with qconvert, run the .tflite in ai-edge-litert's
interpreter and onnxruntime on the same inputs, and compare."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from ai_edge_litert.interpreter import Interpreter, OpResolverType
from onnx import TensorProto, helper, numpy_helper

from qconvert.driver import conversion
from qconvert.driver.options import InputOptions, Options, QuantizeRequest, WeightOptions
from qconvert.onnx.runtime import session_options
from qconvert.calibration.data import model_input_specs
from qconvert.check.runtimes import output_value
from qconvert.tflite.reader import read as read_tflite


# The onnx package's light models whose weights (100-550 MB) take a minute or more each to
# randomize, convert and run on 2 cores: their tests are marked slow (`make test-all` runs them;
# `make test` leaves them out: the other light models cover the same ops, LRN included).
BIG_LIGHT_MODELS = frozenset({"vgg19", "zfnet512", "alexnet", "bvlc_alexnet"})


def slow_params(values, slow=BIG_LIGHT_MODELS) -> list:
    """`values` for pytest.mark.parametrize, those in `slow` marked slow (pytest -m "not slow"
    deselects them)."""
    import pytest

    return [pytest.param(v, marks=pytest.mark.slow) if v in slow else v for v in values]

def conv_in_front(x_shape, channels: int) -> tuple[onnx.NodeProto, onnx.TensorProto]:
    """(node, weights): a 3x3 pad-1 Conv from "x" (NCHW `x_shape`) to "fm" with `channels`
    outputs, so that the op under test reads a feature map behind a layout transpose."""
    w = grid_weights((channels, x_shape[1], 3, 3), seed=1)
    return (helper.make_node("Conv", ["x", "w"], ["fm"], pads=[1, 1, 1, 1]),
            numpy_helper.from_array(w, "w"))


def small_classifier(rng: np.random.Generator, channels: int = 4, classes: int = 5,
                     output: str = "y") -> onnx.ModelProto:
    """x [1, 3, 8, 8] -> Conv (3x3, pad 1) -> Relu ("relu") -> GlobalAveragePool ("pool") ->
    Flatten ("flatten") -> Gemm ("gemm") -> `output`: a small classifier whose dense weights
    are drawn from `rng`."""
    node, w = conv_in_front((1, 3, 8, 8), channels)
    model = make_model([node, helper.make_node("Relu", ["fm"], ["r"], name="relu"),
                        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="pool"),
                        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
                        helper.make_node("Gemm", ["f", "gw", "gb"], [output], name="gemm")],
                       {"x": (onnx.TensorProto.FLOAT, (1, 3, 8, 8))}, {output: onnx.TensorProto.FLOAT},
                       {"gw": rng.standard_normal((channels, classes)).astype(np.float32),
                        "gb": rng.standard_normal(classes).astype(np.float32)})
    model.graph.initializer.append(w)
    return model


def grid_weights(shape, seed: int = 0, axis: int = 0) -> np.ndarray:
    """Random float32 weights that symmetric per-channel int8 quantization (along `axis`)
    represents exactly: integers in [-127, 127] times a per-channel step, each channel reaching
    127. Int8 tests use them so that weight rounding is not mistaken for the op's error."""
    rng = np.random.default_rng(seed)
    q = np.clip(np.round(rng.standard_normal(shape) * 40), -127, 127)
    q = np.moveaxis(q, axis, 0).reshape(shape[axis], -1).copy()
    q[:, 0] = 127
    q = q.reshape((shape[axis],) + tuple(np.delete(shape, axis)))
    steps = rng.uniform(0.5, 2.0, q.shape[0]) / 127
    w = q * steps.reshape((-1,) + (1,) * (q.ndim - 1))
    return np.ascontiguousarray(np.moveaxis(w, 0, axis)).astype(np.float32)


def make_model(nodes, inputs, outputs, inits=None, opset=13) -> onnx.ModelProto:
    """A test model: inputs {name: (elem_type, shape)}, outputs {name: elem_type},
    inits {name: array}; ir_version 8 so that onnxruntime loads it."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, list(s)) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def options_of(*, quantize=None, calibration=None, calibration_samples=None,
               calibration_method=None, keep_float=(), weights=None, weight_only_min_elements=1024,
               io_layout="nhwc", input_shapes=None, plan=None, target=None) -> Options:
    """The driver's Options from the pieces a test sets: `quantize` the quantize pipeline's
    QuantizeOptions, `weights` "int8" or "float16", `plan` a PlanOptions, `target` a --target
    name (the default's when None); no verification (the tests compare with onnxruntime
    themselves)."""
    from qconvert.quantize.calibration_methods import MINMAX
    from qconvert.targets import load_target

    request = None if quantize is None else QuantizeRequest(
        quantize, calibration, calibration_samples, calibration_method or MINMAX, tuple(keep_float),
        load_target(target))
    return Options(input=InputOptions(input_shapes or {}, io_layout), quantize=request,
                   weights=None if weights is None else WeightOptions(weights, weight_only_min_elements),
                   plan=plan)


def convert(source: str, *, data: bytes | None = None, **options):
    """The driver's (model bytes, report) for `source` (or `data`), options as options_of's."""
    return conversion.convert(source, options_of(**options), data=data)


def fake_quant(source: str, *, data: bytes | None = None, **options):
    """The driver's fakequant of `source` (or `data`), options as options_of's."""
    return conversion.fake_quant(source, options_of(**options), data=data)


def assert_refused_in_one_line(model: onnx.ModelProto, match: str, node: str | None = None) -> str:
    """Converting `model` raises a ConversionError of one line matching `match` (and naming the
    node `node` when given); returns the message."""
    import pytest

    from qconvert.errors import ConversionError

    with pytest.raises(ConversionError, match=match) as caught:
        convert_proto(model)
    message = str(caught.value)
    assert "\n" not in message and (node is None or f"'{node}'" in message), message
    return message


def convert_proto(model: onnx.ModelProto, **options):
    """(tflite bytes, report) for an in-memory ONNX model."""
    flatbuffer, report = convert("<test>", data=model.SerializeToString(), **options)
    return bytes(flatbuffer), report


def run_tflite(flatbuffer: bytes, report, feeds: dict[str, np.ndarray],
               reference_kernels: bool = False) -> dict[str, np.ndarray]:
    """Runs the model through its signature with ONNX-layout inputs; returns ONNX-layout outputs.
    reference_kernels: TFLite's reference kernels (BUILTIN_REF: no XNNPACK delegate, no optimized
    kernels), the implementations TFLite Micro's int8 kernels follow."""
    resolver = OpResolverType.BUILTIN_REF if reference_kernels else OpResolverType.AUTO
    interpreter = Interpreter(model_content=flatbuffer, num_threads=1,
                              experimental_op_resolver_type=resolver)
    runner = interpreter.get_signature_runner()
    args = {}
    for info in report.inputs:
        value = np.asarray(feeds[info.name])
        if info.layout_permutation:
            value = np.transpose(value, info.layout_permutation)
        # np.require, not np.ascontiguousarray: that makes a scalar one-dimensional.
        args[info.name] = np.require(value.astype(info.dtype), requirements="C")
    try:
        results = runner(**args)
    except ValueError as e:  # an empty output (a count of zero): read one by one
        if "Invalid tensor size" not in str(e):
            raise
        results = {name: output_value(interpreter, d["index"])
                   for name, d in runner.get_output_details().items()}
    outputs = {}
    for info in report.outputs:
        value = results[info.name]
        if info.layout_permutation:
            value = np.transpose(value, np.argsort(info.layout_permutation))
        outputs[info.name] = value
    return outputs


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs in onnxruntime, one thread; a graph with Q/DQ pairs runs unoptimized,
    MatMulInteger and ConvInteger compute exact sums, the same on every CPU
    (qconvert.onnx.runtime.session_options and reproducible_reference say why)."""
    from qconvert.onnx.runtime import reproducible_reference

    model = reproducible_reference(model) or model
    options = session_options(model)
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def random_feeds(model: onnx.ModelProto, seed: int = 0, shapes: dict | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (dims, dtype) in model_input_specs(model).items():
        shape = (shapes or {}).get(name) or [d or 1 for d in dims]
        if np.dtype(dtype).kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif np.dtype(dtype).kind == "b":
            feeds[name] = rng.random(shape) > 0.5
        else:
            feeds[name] = rng.integers(0, 5, shape).astype(dtype)
    return feeds


def assert_matches_onnxruntime(model: onnx.ModelProto, feeds=None, rtol=1e-4, atol=1e-5, **options):
    """Converts, runs both, asserts every output matches; returns (flatbuffer, report)."""
    feeds = feeds if feeds is not None else random_feeds(model)
    flatbuffer, report = convert_proto(model, **options)
    expected = run_onnxruntime(model, feeds)
    actual = run_tflite(flatbuffer, report, feeds)
    for name, want in expected.items():
        np.testing.assert_allclose(actual[name], want, rtol=rtol, atol=atol, err_msg=name)
    return flatbuffer, report


def calibration_set(model: onnx.ModelProto, count: int = 16, seed: int = 0, scale: float = 1.0,
                    shapes: dict | None = None) -> dict[str, np.ndarray]:
    """{input: [count, *shape]} samples drawn like random_feeds (float inputs: normal * scale)."""
    samples = [random_feeds(model, seed + k, shapes) for k in range(count)]
    return {name: np.stack([s[name] * scale if s[name].dtype.kind == "f" else s[name] for s in samples])
            for name in samples[0]}


def convert_quantized(model: onnx.ModelProto, calibration: dict[str, np.ndarray], tmp_path, **options):
    """(flatbuffer, report) for `model` converted with --quantize, calibrated on `calibration`
    ({input: [N, *shape]}) written to an .npz under tmp_path. QuantizeOptions fields (io_type,
    per_tensor_fc, default_range, activations, round_for_output, correct_bias, equalize) may be
    passed with the other convert() options."""
    from qconvert.transforms.pipeline import QuantizeOptions

    path = tmp_path / "calibration.npz"
    np.savez(path, **calibration)
    fields = {k: options.pop(k) for k in ("io_type", "per_tensor_fc", "default_range", "activations",
                                          "round_for_output", "correct_bias", "equalize")
              if k in options}
    return convert_proto(model, quantize=QuantizeOptions(**fields), calibration=str(path), **options)


def without_quantize_step(monkeypatch, name: str) -> None:
    """Conversions in the test run the quantize pipeline without the step `name`: for a test
    of what the step prevents, or of a kernel the step would keep out of the model."""
    from qconvert.transforms import pipeline

    steps = pipeline.quantize_steps
    monkeypatch.setattr(pipeline, "quantize_steps",
                        lambda options: [s for s in steps(options) if s[0] != name])


def without_float_step(monkeypatch, name: str) -> None:
    """Conversions in the test run the float pipeline without the step `name`: what the model
    becomes without it, next to what the step makes of it."""
    from qconvert.transforms import pipeline

    monkeypatch.setattr(pipeline, "FLOAT_STEPS", [s for s in pipeline.FLOAT_STEPS if s[0] != name])


def output_steps(flatbuffer: bytes) -> dict[str, float]:
    """The quantization step (scale) of the int8 tensor behind each float graph output, read
    from the written file: the input of the DEQUANTIZE that produces the output."""
    summary = read_tflite(flatbuffer)
    steps = {}
    for op in summary.operators:
        out = summary.tensors[op.outputs[0]]
        if op.name == "DEQUANTIZE" and out.name in summary.signature_outputs:
            steps[out.name] = summary.tensors[op.inputs[0]].scales[0]
    return steps


def snap_to_input_grid(flatbuffer: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Float feeds rounded to the int8 (int16) grid of the QUANTIZE that reads each graph input, so
    that onnxruntime sees exactly the values the quantized model computes with (input rounding is
    not the op's error)."""
    summary = read_tflite(flatbuffer)
    snapped = dict(feeds)
    for op in summary.operators:
        source, target = summary.tensors[op.inputs[0]], summary.tensors[op.outputs[0]]
        if op.name == "QUANTIZE" and source.name in feeds and source.dtype == "FLOAT32":
            scale, zero = target.scales[0], target.zero_points[0]
            info = np.iinfo(np.int16 if target.dtype == "INT16" else np.int8)
            q = np.clip(np.round(feeds[source.name] / scale) + zero, info.min, info.max)
            snapped[source.name] = ((q - zero) * scale).astype(feeds[source.name].dtype)
    return snapped


def assert_int8_matches_onnxruntime(model: onnx.ModelProto, tmp_path, calibration=None, feeds=None,
                                    steps: float = 2.0, allow_float: tuple[str, ...] = (),
                                    snap_inputs: bool = True, **options):
    """Converts with --quantize, runs the interpreter and onnxruntime on `feeds` (default: the
    first calibration sample, snapped to the int8 input grid unless snap_inputs is False), and
    asserts every float output is within `steps` quantization steps of onnxruntime's, and that no
    op stayed float except those in `allow_float`. Returns (flatbuffer, report)."""
    calibration = calibration if calibration is not None else calibration_set(model)
    if feeds is None:
        feeds = {name: samples[0] for name, samples in calibration.items()}
    flatbuffer, report = convert_quantized(model, calibration, tmp_path, **options)
    if snap_inputs:
        feeds = snap_to_input_grid(flatbuffer, feeds)
    stayed_float = [f.op for f in report.quantization.float_ops if f.op not in allow_float]
    assert not stayed_float, report.quantization.float_ops
    expected = run_onnxruntime(model, feeds)
    actual = run_tflite(flatbuffer, report, feeds)
    scales = output_steps(flatbuffer)
    for name, want in expected.items():
        if name in scales:
            np.testing.assert_allclose(actual[name], want, rtol=0, atol=steps * scales[name] * (1 + 1e-6),
                                       err_msg=f"{name}: more than {steps} steps of {scales[name]:g}")
        else:
            np.testing.assert_array_equal(actual[name], want, err_msg=name)
    return flatbuffer, report


def crashing_tflite(tmp_path, monkeypatch) -> tuple[onnx.ModelProto, Path]:
    """(an ONNX model, a .tflite of it that crashes LiteRT): requantization multipliers near 1e30
    abort LiteRT in ADD's prepare; qconvert keeps such an ADD float (keep_unrepresentable_float) and
    check_quantization refuses to write them, so the file is written here without those steps. Fails the calling test when LiteRT stops crashing on it."""
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                       {"a": (TensorProto.FLOAT, (1, 8)), "b": (TensorProto.FLOAT, (1, 8))},
                       {"y": TensorProto.FLOAT})
    without_quantize_step(monkeypatch, "check_quantization")
    without_quantize_step(monkeypatch, "keep_unrepresentable_float")
    calibration = {"a": np.full((4, 1, 8), 1e36, np.float32), "b": np.full((4, 1, 8), -1e-3, np.float32)}
    flatbuffer, _ = convert_quantized(model, calibration, tmp_path)
    path = tmp_path / "crashes.tflite"
    path.write_bytes(flatbuffer)
    crash = subprocess.run([sys.executable, "-c", "from ai_edge_litert.interpreter import Interpreter; "
                            f"Interpreter(model_path={str(path)!r}).allocate_tensors()"], capture_output=True)
    assert crash.returncode < 0, "the file no longer crashes LiteRT: find another one for this test"
    return model, path
