"""Every fake-quant graph `qconvert fakequant` writes is a valid ONNX model (onnx.checker's full
check) that onnxruntime loads and runs, for the models the float conversion takes: old opsets
(7 to 11: the per-channel pairs need 13, the graph is upgraded with its IR version), weights also
listed among the graph inputs (as old exporters write them), If and Loop bodies, names that look
like the ones the pairs take, and models exported with their own Q/DQ pairs. Its outputs stay
within int8's error of the float model's. The precision planner builds its gated graph from the
same code: it measures these models too (issue 32)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qconvert.driver.options import PlanOptions
from qconvert.transforms.pipeline import QuantizeOptions
from tests.harness import convert_proto, fake_quant, run_tflite

F = TensorProto.FLOAT
C = 8


def _init(rng, name, shape, scale=1.0, offset=0.0):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale + offset).astype(np.float32), name)


def detector(opset: int, weights_as_inputs: bool = True, names=None) -> onnx.ModelProto:
    """A small face-detector-like CNN at `opset`: Conv + BatchNormalization + Clip(0, 6) (the
    opset's form: attributes before 11), a depthwise Conv + Relu, a pointwise Conv, a global
    average pool and a Gemm. `weights_as_inputs`: every initializer also a graph input, as
    exporters before ONNX IR 4 wrote them. `names` renames tensors ({old: new})."""
    rng = np.random.default_rng(opset)
    n = {**{k: k for k in ("x", "c1", "n1", "r1", "d1", "r2", "c3", "g", "f", "y", "w1", "b1", "wd",
                           "w3", "wg", "bg")}, **(names or {})}
    clip = (helper.make_node("Clip", [n["n1"]], [n["r1"]], min=0.0, max=6.0, name="relu6") if opset < 11 else
            helper.make_node("Clip", [n["n1"], "lo", "hi"], [n["r1"]], name="relu6"))
    nodes = [
        helper.make_node("Conv", [n["x"], n["w1"], n["b1"]], [n["c1"]], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", [n["c1"], "g1", "be1", "m1", "v1"], [n["n1"]], name="bn1"),
        clip,
        helper.make_node("Conv", [n["r1"], n["wd"]], [n["d1"]], pads=[1, 1, 1, 1], group=C, name="dw"),
        helper.make_node("Relu", [n["d1"]], [n["r2"]], name="relu2"),
        helper.make_node("Conv", [n["r2"], n["w3"]], [n["c3"]], name="pw"),
        helper.make_node("GlobalAveragePool", [n["c3"]], [n["g"]], name="gap"),
        helper.make_node("Flatten", [n["g"]], [n["f"]], name="flatten"),
        helper.make_node("Gemm", [n["f"], n["wg"], n["bg"]], [n["y"]], transB=1, name="fc"),
    ]
    inits = [_init(rng, n["w1"], (C, 3, 3, 3), .3), _init(rng, n["b1"], C, .1), _init(rng, "g1", C, .5, 1),
             _init(rng, "be1", C, .2), _init(rng, "m1", C, .1),
             numpy_helper.from_array(rng.uniform(0.5, 2, C).astype(np.float32), "v1"),
             _init(rng, n["wd"], (C, 1, 3, 3), .5), _init(rng, n["w3"], (2 * C, C, 1, 1), .4),
             _init(rng, n["wg"], (5, 2 * C), .5), _init(rng, n["bg"], 5, .1)]
    if opset >= 11:
        inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (("lo", 0), ("hi", 6))]
    inputs = [helper.make_tensor_value_info(n["x"], F, [1, 3, 16, 16])]
    if weights_as_inputs:
        inputs += [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in inits]
    graph = helper.make_graph(nodes, "detector", inputs, [helper.make_tensor_value_info(n["y"], F, [1, 5])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=4 if opset < 10 else 7)


def lookalike_names() -> onnx.ModelProto:
    """The detector at opset 13 with its weights as inputs and tensors named like what the pairs
    and their params would be called (`<tensor>_fq`, `<weight>_quantized`, a gate's input)."""
    return detector(13, names={"c1": "x_fq", "n1": "c1_fq_scale", "r1": "w1_quantized", "d1": "w1_scale",
                               "r2": "qconvert_gate_0", "c3": "r1_fq_q", "f": "y_fq_float", "w3": "w1_dq"})


def with_if(opset: int) -> onnx.ModelProto:
    """Conv + Relu, then If(sum > 0) choosing a branch Conv (with its own initializer) or a
    MaxPool of the outer tensor, then a Conv: the pairs sit in the outer graph, the bodies read
    outer tensors through them."""
    rng = np.random.default_rng(5)
    body_w = _init(rng, "bw", (C, C, 3, 3), .2)
    then = helper.make_graph([helper.make_node("Conv", ["r1", "bw"], ["t"], pads=[1, 1, 1, 1]),
                              helper.make_node("Relu", ["t"], ["tr"])], "then", [],
                             [helper.make_tensor_value_info("tr", F, [1, C, 8, 8])], [body_w])
    other = helper.make_graph([helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3],
                                                pads=[1, 1, 1, 1])], "else", [],
                              [helper.make_tensor_value_info("p", F, [1, C, 8, 8])])
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other, name="branch"),
             helper.make_node("Conv", ["z", "w2", "b2"], ["y"], name="conv2")]
    inits = [_init(rng, "w1", (C, 3, 3, 3), .3), _init(rng, "b1", C, .1), _init(rng, "w2", (4, C, 1, 1), .3),
             _init(rng, "b2", 4, .1), numpy_helper.from_array(np.array(0, np.float32), "zero")]
    graph = helper.make_graph(nodes, "with_if", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def with_loop(shadow: bool = False) -> onnx.ModelProto:
    """Conv + Relu, then a Loop of 3 steps (unrolled) whose body adds the outer Relu's output
    (read through its pair) to the carried value and scales it by a body initializer, then a
    Conv. `shadow`: the carried value is named `x`, like the outer input, which has a pair: the
    body reads its own x."""
    rng = np.random.default_rng(6)
    v = "x" if shadow else "v"
    body = helper.make_graph(
        [helper.make_node("Add", [v, "r1"], ["va"]),
         helper.make_node("Mul", ["va", "half"], ["v_next"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info(v, F, [1, C, 8, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_next", F, [1, C, 8, 8])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Loop", ["steps", "go", "r1"], ["v_final"], body=body, name="loop"),
             helper.make_node("Conv", ["v_final", "w2", "b2"], ["y"], name="conv2")]
    inits = [_init(rng, "w1", (C, 3, 3, 3), .3), _init(rng, "b1", C, .1), _init(rng, "w2", (4, C, 1, 1), .3),
             _init(rng, "b2", 4, .1), numpy_helper.from_array(np.array(3, np.int64), "steps"),
             numpy_helper.from_array(np.array(True), "go")]
    graph = helper.make_graph(nodes, "with_loop", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def qdq_exported(tmp_path) -> onnx.ModelProto:
    """The opset-13 detector quantized by onnxruntime's QDQ exporter (per channel: opset 13)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.samples = iter({"x": s} for s in _samples(detector(13))["x"])

        def get_next(self):
            return next(self.samples, None)

    onnx.save(detector(13, weights_as_inputs=False), tmp_path / "float.onnx")
    quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"), Reader(),
                    quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8)
    return onnx.load(tmp_path / "qdq.onnx")


MODELS = {
    "opset7_weights_as_inputs": lambda tmp: detector(7),
    "opset9_weights_as_inputs": lambda tmp: detector(9),
    "opset9": lambda tmp: detector(9, weights_as_inputs=False),
    "opset10": lambda tmp: detector(10, weights_as_inputs=False),
    "opset11_weights_as_inputs": lambda tmp: detector(11),
    "opset13_weights_as_inputs": lambda tmp: detector(13),
    "lookalike_names": lambda tmp: lookalike_names(),
    "if_opset11": lambda tmp: with_if(11),
    "if_opset13": lambda tmp: with_if(13),
    "loop": lambda tmp: with_loop(),
    "loop_shadowing": lambda tmp: with_loop(shadow=True),
    "qdq_exported": qdq_exported,
}


def _samples(model: onnx.ModelProto, count: int = 8) -> dict[str, np.ndarray]:
    """`count` samples of the model's one data input (the graph input no initializer gives)."""
    initializers = {i.name for i in model.graph.initializer}
    data = [i for i in model.graph.input if i.name not in initializers]
    shape = [d.dim_value for d in data[0].type.tensor_type.shape.dim]
    return {data[0].name: np.random.default_rng(7).uniform(-1, 1, [count, *shape]).astype(np.float32)}


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """The names the bodies of `graph`'s nodes read from outside themselves, at every depth."""
    reads = set()
    for node in graph.node:
        for a in node.attribute:
            for body in [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs):
                defined = ({i.name for i in body.input} | {t.name for t in body.initializer}
                           | {o for n in body.node for o in n.output})
                reads |= ({i for n in body.node for i in n.input} | _outer_reads(body)) - defined
    return reads


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    """The model's first output in onnxruntime with no graph optimization (the graph as written)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run([session.get_outputs()[0].name], feeds)[0]


@pytest.fixture(params=sorted(MODELS))
def case(request, tmp_path):
    """(name, the model, its calibration file, its samples). A QDQ-exported model is converted
    with its own pairs' params (no calibration)."""
    model = MODELS[request.param](tmp_path)
    samples = _samples(model)
    np.savez(tmp_path / "calibration.npz", **samples)
    calibration = None if request.param == "qdq_exported" else str(tmp_path / "calibration.npz")
    return request.param, model, calibration, samples


def test_the_fake_quant_graph_is_valid_and_runs_within_int8_error(case):
    name, model, calibration, samples = case
    written, report = fake_quant("<test>", data=model.SerializeToString(), quantize=QuantizeOptions(),
                                 calibration=calibration)
    fake = onnx.load_from_string(written)
    onnx.checker.check_model(fake, full_check=True)
    assert fake.ir_version >= helper.find_min_ir_version_for(fake.opset_import), name
    assert report.activations, name  # the pairs are there
    # A body reads an outer tensor with a pair through it, as the int8 model's IF/WHILE does.
    assert not _outer_reads(fake.graph) & set(report.activations), name
    tflite, tflite_report = convert_proto(model, quantize=QuantizeOptions(), calibration=calibration)
    (data_name, data), = samples.items()
    for sample in data[:3]:
        feeds = {data_name: sample}
        reference = _run(model, feeds)
        int8 = next(iter(run_tflite(tflite, tflite_report, feeds).values()))
        # The int8 model's error bounds the fake-quant graph's (the same params, float kernels),
        # with a few output steps for the kernels' own rounding.
        step = np.ptp(reference) / 255
        bound = 1.5 * np.max(np.abs(int8 - reference)) + 3 * step
        assert np.max(np.abs(_run(fake, feeds) - reference)) <= bound, name


@pytest.mark.parametrize("make", [lambda: detector(9), lambda: with_if(11)], ids=["opset9_weights_as_inputs", "if"])
def test_the_planner_measures_old_models(make, tmp_path):
    """The planner runs its gated fake-quant graph in onnxruntime: on an opset-9 model with its
    weights as inputs it measures every op's cost (no 'sensitivity not measured' note)."""
    model = make()
    np.savez(tmp_path / "calibration.npz", **_samples(model))
    _, report = convert_proto(model, quantize=QuantizeOptions(), calibration=str(tmp_path / "calibration.npz"),
                              plan=PlanOptions(60.0))
    plan = report.quantization.plan
    assert not plan.note, plan.note
    assert plan.promotions  # 60 dB is above int8's: something is promoted, by measured cost
