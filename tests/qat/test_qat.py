"""qconvert.qat (quantization-aware training, the qat extra): fake-quant exactly where qconvert's
int8 graph quantizes, batch-norm folding for training, quant delay, the QDQ export that qconvert
converts with the trained params, and the end to end case: a model class where post-training
int8 loses accuracy (bench/qat_digits.py) trained here, fine-tuned with QAT, converted without
calibration and run in LiteRT."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

torch = pytest.importorskip("torch", reason="qconvert.qat needs torch: pip install -e '.[qat]'")

import qconvert  # noqa: E402
from bench import qat_digits  # noqa: E402
from qconvert.qat import export, fake_quant_sites, prepare_qat, weight_sites  # noqa: E402
from tests.harness import run_onnxruntime  # noqa: E402

pytestmark = pytest.mark.qat
nn = torch.nn
GUIDE = Path(__file__).resolve().parent.parent.parent / "docs" / "guide.md"  # its QAT example


class SmallCnn(nn.Module):
    """Conv+BN+ReLU, a residual block (Conv+BN, add, ReLU), a concatenation, max pooling,
    flatten, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.conv3 = nn.Conv2d(8, 4, 1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(12 * 4 * 4, 5)

    def forward(self, x):
        a = self.relu1(self.bn1(self.conv1(x)))
        b = torch.relu(self.bn2(self.conv2(a)) + a)
        c = torch.cat([b, self.conv3(b)], 1)
        return self.fc(torch.flatten(self.pool(c), 1))


def _trained_small_cnn(steps: int = 20):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    prepared = prepare_qat(SmallCnn(), torch.zeros(1, 3, 8, 8))
    optimizer = torch.optim.SGD(prepared.parameters(), 0.05)
    for _ in range(steps):
        loss = prepared(torch.randn(16, 3, 8, 8)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return prepared.eval()


def _activation_pairs(proto: onnx.ModelProto) -> dict[str, tuple[float, int]]:
    """{tensor an activation QuantizeLinear reads: (scale, zero point)}, in graph order."""
    constants = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    return {n.input[0]: (float(constants[n.input[1]]), int(constants[n.input[2]]))
            for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in constants}


def _tflite_params(flatbuffer: bytes, proto: onnx.ModelProto) -> dict[str, tuple[float, int]]:
    """{ONNX tensor a QDQ pair quantizes: (scale, zero point) of its .tflite tensor}, read from
    LiteRT's tensor details. qconvert names a tensor after its ONNX one (`_nhwc` channels-last,
    `_int8` a float graph input's or output's int8 copy); a pair whose DequantizeLinear writes a
    graph output is that output's int8 copy."""
    from ai_edge_litert.interpreter import Interpreter

    details = {d["name"]: d["quantization_parameters"]
               for d in Interpreter(model_content=flatbuffer).get_tensor_details()}
    outputs = {o.name for o in proto.graph.output}
    dq_writes = {n.input[0]: n.output[0] for n in proto.graph.node if n.op_type == "DequantizeLinear"}
    q_writes = {n.input[0]: n.output[0] for n in proto.graph.node if n.op_type == "QuantizeLinear"}
    found = {}
    for name in _activation_pairs(proto):
        written = dq_writes[q_writes[name]]
        base = written if written in outputs else name
        match = next(details[c] for c in (base + "_nhwc", base + "_int8", base) if c in details)
        found[name] = (float(match["scales"][0]), int(match["zero_points"][0]))
    return found


def test_fake_quant_positions_follow_qconvert_int8_graph():
    """Input; conv1+bn1+relu1 fused (one site, after the ReLU); conv2+bn2 (no activation: its own
    site, an ADD input); the add's ReLU fused into the ADD (site after the ReLU); conv3; the
    concatenation's output (its inputs relu and conv3 share its range); max pool and flatten add
    none; the linear's output. Weights of the four layers, per channel."""
    prepared = _trained_small_cnn()
    assert fake_quant_sites(prepared) == ["x", "relu1", "bn2", "relu", "conv3", "cat", "fc"]
    assert weight_sites(prepared) == ["qat_relu1", "qat_bn2", "qat_conv3", "qat_fc"]
    proto = export(prepared, None, torch.zeros(1, 3, 8, 8))
    pairs = _activation_pairs(proto)
    assert list(pairs) == ["x", "relu1", "bn2", "relu", "conv3", "cat", "fc"]
    assert pairs["relu"] == pairs["conv3"] == pairs["cat"], pairs  # one range for the concatenation
    weights = [n for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in pairs]
    assert len(weights) == 4 and all(a.name == "axis" and a.i == 0 for n in weights for a in n.attribute)
    # No Q/DQ on a bias: each layer's third input is a float initializer.
    initializers = {t.name for t in proto.graph.initializer}
    assert all(n.input[2] in initializers for n in proto.graph.node if n.op_type in ("Conv", "Gemm")
               and len(n.input) > 2)


def test_export_runs_like_the_torch_module_in_onnxruntime_and_litert():
    """The QDQ model in onnxruntime and its qconvert conversion (no calibration) in LiteRT both
    within one output step of the fake-quant module in eval mode; the .tflite carries the
    exported params, tensor by tensor."""
    prepared = _trained_small_cnn()
    proto = export(prepared, None, torch.zeros(1, 3, 8, 8))
    tflite, report = qconvert.convert(proto, quantize=True)
    assert report.quantization.float_ops == [], report.quantization.float_ops
    pairs = _activation_pairs(proto)
    assert _tflite_params(tflite, proto) == pairs
    step = pairs["fc"][0]
    inputs = torch.randn(20, 1, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = np.stack([prepared(x).numpy() for x in inputs])
    ort = np.stack([run_onnxruntime(proto, {"x": x.numpy()})["output"] for x in inputs])
    litert = qat_digits.tflite_logits(tflite, inputs.numpy()[:, 0], "x", "output")
    np.testing.assert_allclose(ort, want, rtol=0, atol=step * 1.001)
    np.testing.assert_allclose(litert, want[:, 0], rtol=0, atol=step * 1.001)


def test_batch_norm_folding_for_training_equals_the_float_layers():
    """Before quantization starts (quant_delay), the fused layer trains exactly like Conv2d ->
    BatchNorm2d in training mode (batch statistics; the sigma_batch / sigma_moving correction
    cancels) and moves the moving statistics alike; after freeze_bn_delay it computes the
    eval-mode float layers (moving statistics, folded)."""
    torch.manual_seed(1)
    float_model = nn.Sequential(nn.Conv2d(3, 6, 3, bias=True), nn.BatchNorm2d(6), nn.ReLU())
    prepared = prepare_qat(float_model, torch.zeros(1, 3, 6, 6), quant_delay=100, freeze_bn_delay=2)
    reference = float_model.train()
    for step in range(4):
        x = torch.randn(8, 3, 6, 6) * 3 + 1
        got = prepared.train()(x)
        if step < 2:
            want = reference(x)
        else:
            want = reference.eval()(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        bn = prepared.get_submodule("qat__2").bn
        torch.testing.assert_close(bn.running_var, reference[1].running_var, rtol=1e-5, atol=1e-6)


def test_quant_delay_passes_float_values_first():
    torch.manual_seed(2)
    float_model = nn.Sequential(nn.Linear(4, 3))
    prepared = prepare_qat(float_model, torch.zeros(1, 4), quant_delay=2)
    x = torch.randn(5, 4) * 10
    for _ in range(2):  # float: the float model's outputs exactly
        torch.testing.assert_close(prepared.train()(x), float_model(x), rtol=0, atol=0)
    quantized = prepared(x)
    assert not torch.equal(quantized, float_model(x))
    scale = prepared.get_submodule("fake_quant__0").observer.params()[0]
    assert (quantized / scale - torch.round(quantized / scale)).abs().max() < 1e-3  # on the grid


@pytest.fixture(scope="module")
def digits():
    """bench/qat_digits.py's model trained here: float, post-training int8 (qconvert calibrated
    on 64 samples, all int8: the precision plan keeps float what int8 loses, 0.991 here), QAT fine-tuned, exported and converted without calibration."""
    images, labels = qat_digits.samples(qat_digits.EVAL_SAMPLES, qat_digits.EVAL_SEED)
    calibration, _ = qat_digits.samples(qat_digits.CALIBRATION_SAMPLES, qat_digits.CALIBRATION_SEED)
    model = qat_digits.build()
    qat_digits.train(model, qat_digits.FLOAT_STEPS, qat_digits.FLOAT_LR, qat_digits.TRAIN_SEED)
    # The post-training baseline is TOCO's arithmetic (round to nearest, biases and channels as
    # they are): with qconvert's default rounding, bias correction and equalization, post-training
    # int8 reaches float here (0.991 against 0.992), and there is nothing left for QAT to recover.
    ptq, _ = qconvert.convert(qat_digits.float_onnx(model), quantize=True, precision="int8",
                              weight_rounding="nearest", bias_correction=False, equalization=False,
                              calibration={qat_digits.INPUT: calibration[:, None]})
    prepared, _ = qat_digits.qat_model(model)
    qdq = qat_digits.qat_onnx(prepared)
    qat, report = qconvert.convert(qdq, quantize=True)
    return {"labels": labels, "images": images, "float": qat_digits.logits(model, images),
            "ptq": qat_digits.tflite_logits(ptq, images), "torch": qat_digits.logits(prepared, images),
            "litert": qat_digits.tflite_logits(qat, images), "qdq": onnx.load_from_string(qdq),
            "tflite": qat, "report": report}


def test_qat_recovers_what_post_training_int8_loses(digits):
    labels = digits["labels"]
    float_acc, ptq_acc = (qat_digits.accuracy(digits[k], labels) for k in ("float", "ptq"))
    qat_acc = qat_digits.accuracy(digits["litert"], labels)
    print(f"float {float_acc:.3f}, PTQ int8 {ptq_acc:.3f}, QAT int8 (LiteRT) {qat_acc:.3f}")
    assert ptq_acc <= float_acc - 0.02, (float_acc, ptq_acc)
    assert qat_acc >= ptq_acc + 0.02, (ptq_acc, qat_acc)


def test_litert_agrees_with_the_fake_quant_module(digits):
    """Within one int8 step of the output on >= 99 % of the logits, accuracy within 0.5 points."""
    assert digits["report"].quantization.float_ops == []
    step = _activation_pairs(digits["qdq"])[_output_site(digits["qdq"])][0]
    close = np.abs(digits["litert"] - digits["torch"]) <= step * 1.001
    assert close.mean() >= 0.99, close.mean()
    labels = digits["labels"]
    litert, fake_quant = (qat_digits.accuracy(digits[k], labels) for k in ("litert", "torch"))
    assert abs(litert - fake_quant) <= 0.005, (litert, fake_quant)


def test_the_tflite_carries_the_trained_params(digits):
    """Activations: the .tflite's scale and zero point equal the exported pair's exactly (read
    back by tensor name from LiteRT). Weights: per-channel scales equal to float32 rounding (qconvert
    recomputes them from the dequantized weights), zero points 0."""
    proto, flatbuffer = digits["qdq"], digits["tflite"]
    assert _tflite_params(flatbuffer, proto) == _activation_pairs(proto)
    from ai_edge_litert.interpreter import Interpreter

    per_channel = sorted((d["quantization_parameters"]["scales"] for d in
                          Interpreter(model_content=flatbuffer).get_tensor_details()
                          if d["dtype"] == np.int8 and d["quantization_parameters"]["scales"].size > 1),
                         key=len)
    constants = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    exported = sorted((constants[n.input[1]] for n in proto.graph.node
                       if n.op_type == "QuantizeLinear" and n.input[0] in constants), key=len)
    assert len(per_channel) == len(exported) == 5
    for got, want in zip(sorted(per_channel, key=lambda s: (len(s), s[0])),
                         sorted(exported, key=lambda s: (len(s), s[0]))):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _output_site(proto: onnx.ModelProto) -> str:
    """The tensor whose pair writes the graph output."""
    dq = next(n for n in proto.graph.node if n.output[0] == proto.graph.output[0].name)
    return next(n.input[0] for n in proto.graph.node if n.output[0] == dq.input[0])


def test_the_readme_example_runs(tmp_path, monkeypatch):
    """The QAT example of the user guide (docs/guide.md, linked from the README) runs as shown."""
    text = GUIDE.read_text()
    section = text[text.index("\n### Quantization-aware training (qconvert.qat)\n"):]
    section = section[:section.index("\n#", 5)]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "docs/guide.md", "exec"), namespace)
    assert (tmp_path / "model_int8.tflite").read_bytes() == namespace["tflite"]


def test_the_base_package_never_imports_torch():
    code = ("import sys, qconvert, qconvert.cli, qconvert.driver.conversion, qconvert.qdq.importer; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _fit(prepared, inputs, target: float, lr: float, steps: int = 20):
    """A few SGD steps pulling the outputs towards `target` (ranges and weights move), then eval."""
    optimizer = torch.optim.SGD(prepared.parameters(), lr)
    for _ in range(steps):
        loss = (prepared(inputs()) - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return prepared.eval()


def _module_and_litert(prepared, tflite: bytes, report, images):
    """(the fake-quant module's outputs, LiteRT's) on NCHW `images`, one by one in LiteRT (its
    input and output channels-last)."""
    from ai_edge_litert.interpreter import Interpreter

    with torch.no_grad():
        expected = prepared(images).numpy()
    runner = Interpreter(model_content=tflite).get_signature_runner()
    got = np.concatenate([runner(**{report.inputs[0].name: np.transpose(x[None], (0, 2, 3, 1))})[
        report.outputs[0].name] for x in images.numpy()])
    return expected, np.transpose(got, (0, 3, 1, 2))


class SiluNet(nn.Module):
    """A detector-style stem and head: Conv+BN -> SiLU (TFLite: LOGISTIC then MUL), a Conv, and a
    sigmoid score."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.act = nn.SiLU()
        self.conv2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return torch.sigmoid(self.conv2(self.act(self.bn1(self.conv1(x)))))


def test_fixed_output_ops_take_the_kernel_params_and_silu_splits_as_qconvert_writes_it():
    """A sigmoid's fake-quant has LOGISTIC's params (1/256, -128) from the start; SiLU becomes
    sigmoid then product, each with its fake-quant; the sigmoid writing the model output has none
    (qconvert keeps it float); the export converts without calibration, LiteRT within one step of
    1/256 of the fake-quant module on >= 99 % of outputs."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    prepared = prepare_qat(SiluNet(), torch.zeros(1, 3, 8, 8))
    sites = fake_quant_sites(prepared)
    assert len(sites) == 5, sites  # input, bn1 (the conv's output), sigmoid, product, conv2
    fixed = [m for m in prepared.modules() if type(m).__name__ == "FixedFakeQuant"]
    assert [(m.scale, m.zero_point) for m in fixed] == [(1 / 256, -128)]
    _fit(prepared, lambda: torch.randn(16, 3, 8, 8), 0.3, 0.05)
    proto = export(prepared, None, torch.zeros(1, 3, 8, 8))
    types = [n.op_type for n in proto.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    assert types == ["Conv", "Sigmoid", "Mul", "Conv", "Sigmoid"], types
    tflite, report = qconvert.convert(proto, quantize=True)
    assert [f.op for f in report.quantization.float_ops] == ["LOGISTIC"]  # the output's
    assert report.quantization.int8_ops == 4 and report.quantization.qdq_tensors
    expected, got = _module_and_litert(prepared, tflite, report, torch.randn(32, 3, 8, 8))
    assert (np.abs(got - expected) <= 1 / 256 * 1.001).mean() >= 0.99


class C2fSppfNet(nn.Module):
    """YOLOv8's blocks: C2f (a split's halves concatenated with a bottleneck's output) and SPPF
    (a max pool's outputs concatenated), with nearest upsampling; SiLU throughout."""

    def __init__(self):
        super().__init__()

        def conv(c_in, c_out, k=3):
            return nn.Sequential(nn.Conv2d(c_in, c_out, k, 1, k // 2, bias=False), nn.BatchNorm2d(c_out),
                                 nn.SiLU())

        self.stem, self.cv1, self.m = conv(3, 8), conv(8, 8, 1), conv(4, 4)
        self.cv2, self.sppf1, self.sppf2 = conv(12, 8, 1), conv(8, 4, 1), conv(16, 8, 1)
        self.pool, self.up = nn.MaxPool2d(5, 1, 2), nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Conv2d(8, 3, 1)

    def forward(self, x):
        a, b = self.cv1(self.stem(x)).split(4, 1)
        h = self.cv2(torch.cat([a, b, self.m(b) + b], 1))
        s = self.sppf1(h)
        y1 = self.pool(s)
        y2 = self.pool(y1)
        h = self.sppf2(torch.cat([s, y1, y2, self.pool(y2)], 1))
        return self.head(self.up(h))


def test_concatenations_of_tied_inputs_requantize_as_tflite_does(caplog):
    """A concatenation of a split's halves or of max pools' outputs (params tied to their input):
    each such input keeps its params and is requantized to the concatenation's on its edge, as
    qconvert's QUANTIZE does; the export converts without calibration and without a warning, and
    LiteRT is within one int8 step of the fake-quant module on >= 99 % of the outputs."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    prepared = prepare_qat(C2fSppfNet(), torch.zeros(1, 3, 8, 8))
    assert sum(s.endswith(("_input_0", "_input_1", "_input_2", "_input_3"))
               for s in fake_quant_sites(prepared)) == 2 + 3  # split halves a, b; pools y1, y2, y3
    _fit(prepared, lambda: torch.rand(16, 3, 8, 8), 0.5, 0.02)
    proto = export(prepared, None, torch.zeros(1, 3, 8, 8))
    with caplog.at_level("WARNING", logger="qconvert"):
        tflite, report = qconvert.convert(proto, quantize=True)
    assert not [r for r in caplog.records if r.name == "qconvert"], caplog.text
    assert report.quantization.float_ops == []
    expected, got = _module_and_litert(prepared, tflite, report, torch.rand(32, 3, 8, 8))
    step = _activation_pairs(proto)[_output_site(proto)][0]
    assert (np.abs(got - expected) <= step * 1.001).mean() >= 0.99
