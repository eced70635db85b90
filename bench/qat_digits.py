"""qat-digits: a model class where post-training int8 loses accuracy and quantization-aware
training (qconvert.qat) recovers it; the QAT table of `make bench` and tests/qat use it.

The structure: a classifier fed raw pixel values (0..255, a camera frame as it comes) whose stem
concatenates its input (the input skip of a DenseNet-style stem, as a frozen 1x1 projection that
copies the pixels: prepare_qat refuses to concatenate a model input itself) with batch-normed
conv features bounded by ReLU6. TFLite's CONCATENATION holds both at one int8 scale: the pixels'
range (0..255) sets a step near 1, and the features (0..6) keep at most seven levels whatever the
training does, so post-training int8 rounds away what the float model reads from them. QAT trains
with that rounding: the network learns to put its information where the grid keeps it. (With a
trainable projection and a plain ReLU, training may or may not learn ranges that survive int8:
post-training int8 lost 0 to 5 points over four seeds; this way 6 to 25, QAT recovering each to
within 0.6 points of float.)
Then: Conv+BN+ReLU, max pooling, a residual block (Conv+BN, add, ReLU), global average pooling,
a dense layer: logits [1, 10].

Data, made here with numpy: the ten digits of a 5x7 pixel font drawn twice the size (10x14) at a
random place of a 16x16 frame, with a random background level (0..190) and contrast (20..60), and
Gaussian noise (sigma 6), rounded to integers in [0, 255]. Metric: accuracy.

Everything is deterministic (seeded numpy streams, torch.manual_seed, one torch thread). torch is
imported when a function needs it: bench.py imports this module without the qat extra.
"""

from __future__ import annotations

import io
import time
import warnings

import numpy as np

SIZE = 16
CLASSES = 10
FLOAT_STEPS, QAT_STEPS, BATCH = 1500, 200, 64
FLOAT_LR, QAT_LR = 3e-3, 1e-3
FREEZE_BN_DELAY = 150  # of the QAT steps: batch norms use their moving statistics after these
SEED = 0
# Seeds of the sample streams: training, QAT fine-tuning, calibration, evaluation.
TRAIN_SEED, QAT_SEED, CALIBRATION_SEED, EVAL_SEED = 1, 4, 3, 2
CALIBRATION_SAMPLES, EVAL_SAMPLES = 64, 1000
INPUT, OUTPUT = "x", "logits"

_FONT = ["01110 10001 10011 10101 11001 10001 01110", "00100 01100 00100 00100 00100 00100 01110",
         "01110 10001 00001 00010 00100 01000 11111", "11111 00010 00100 00010 00001 10001 01110",
         "00010 00110 01010 10010 11111 00010 00010", "11111 10000 11110 00001 00001 10001 01110",
         "00110 01000 10000 11110 10001 10001 01110", "11111 00001 00010 00100 01000 01000 01000",
         "01110 10001 10001 01110 10001 10001 01110", "01110 10001 10001 01111 00001 00010 01100"]
# [10, 14, 10]: each glyph's pixels doubled in both directions.
GLYPHS = np.array([[[c == "1" for c in row] for row in glyph.split()] for glyph in _FONT],
                  np.float32).repeat(2, axis=1).repeat(2, axis=2)


def samples(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(images [count, 1, 16, 16] float32 in 0..255, labels [count] int64) from the seed's stream."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, count)
    gh, gw = GLYPHS.shape[1:]
    top = rng.integers(0, SIZE - gh + 1, count)
    left = rng.integers(0, SIZE - gw + 1, count)
    # Each glyph placed by index arithmetic: rows top + [0, gh), columns left + [0, gw).
    images = np.zeros((count, SIZE, SIZE), np.float32)
    rows = (top[:, None] + np.arange(gh))[:, :, None]
    cols = (left[:, None] + np.arange(gw))[:, None, :]
    images[np.arange(count)[:, None, None], rows, cols] = GLYPHS[labels]
    background = rng.uniform(0, 190, (count, 1, 1))
    contrast = rng.uniform(20, 60, (count, 1, 1))
    images = background + contrast * images + rng.normal(0, 6, images.shape)
    return np.clip(np.round(images), 0, 255)[:, None].astype(np.float32), labels


def build():
    """The float model (see the module docstring), seeded."""
    import torch
    from torch import nn

    class RawConcatNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.raw = nn.Conv2d(1, 4, 1)  # the input skip: copies of the raw pixels, frozen
            self.features = nn.Sequential(nn.Conv2d(1, 12, 3, padding=1, bias=False),
                                          nn.BatchNorm2d(12), nn.ReLU6())
            self.mix = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
                                     nn.ReLU())
            self.pool = nn.MaxPool2d(2)
            self.block = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
            self.gap = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(16, CLASSES)

        def forward(self, x):
            h = self.pool(self.mix(torch.cat([self.raw(x), self.features(x)], 1)))
            h = torch.relu(self.block(h) + h)
            return self.fc(torch.flatten(self.gap(h), 1))

    torch.manual_seed(SEED)
    model = RawConcatNet()
    with torch.no_grad():
        model.raw.weight.fill_(1.0)
        model.raw.bias.zero_()
    model.raw.requires_grad_(False)
    return model


def train(model, steps: int, lr: float, seed: int):
    """Adam with a cosine decay, cross-entropy, BATCH samples per step from the seed's stream
    (all drawn at once from the stream); returns the last loss."""
    import torch

    torch.set_num_threads(1)  # deterministic, and two test workers share the two cores
    optimizer = torch.optim.Adam(model.parameters(), lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    model.train()
    images, labels = samples(steps * BATCH, seed)
    for step in range(steps):
        part = slice(step * BATCH, (step + 1) * BATCH)
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(images[part])),
                                                 torch.from_numpy(labels[part]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval()
    return float(loss.detach())


def logits(model, images: np.ndarray) -> np.ndarray:
    """The torch model's outputs in eval mode, [N, 10]."""
    import torch

    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(images)).numpy()


def float_onnx(model) -> bytes:
    """The float model as ONNX (TorchScript exporter, opset 17, batch 1), input "x", output
    "logits"."""
    import torch

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(model.eval(), (torch.zeros(1, 1, SIZE, SIZE),), buffer, opset_version=17,
                          dynamo=False, input_names=[INPUT], output_names=[OUTPUT])
    return buffer.getvalue()


def qat_model(model):
    """prepare_qat of a copy of the trained float model, fine-tuned QAT_STEPS steps; returns
    (prepared module in eval mode, seconds)."""
    import torch

    from qconvert.qat import prepare_qat

    start = time.perf_counter()
    prepared = prepare_qat(model, torch.zeros(1, 1, SIZE, SIZE), freeze_bn_delay=FREEZE_BN_DELAY)
    train(prepared, QAT_STEPS, QAT_LR, QAT_SEED)
    return prepared.eval(), time.perf_counter() - start


def qat_onnx(prepared) -> bytes:
    """The QDQ ONNX model export() writes for the prepared module."""
    import torch

    from qconvert.qat import export

    proto = export(prepared, None, torch.zeros(1, 1, SIZE, SIZE), input_names=[INPUT],
                   output_names=[OUTPUT])
    return proto.SerializeToString()


def tflite_logits(flatbuffer: bytes, images: np.ndarray, input_name: str = INPUT,
                  output_name: str = OUTPUT) -> np.ndarray:
    """The .tflite's float outputs in LiteRT (1 thread), one sample at a time; its input is NHWC
    (qconvert's default image layout)."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_content=flatbuffer, num_threads=1).get_signature_runner()
    nhwc = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    return np.concatenate([runner(**{input_name: nhwc[i:i + 1]})[output_name] for i in range(len(nhwc))])


def accuracy(outputs: np.ndarray, labels: np.ndarray) -> float:
    return float((outputs.argmax(axis=1) == labels).mean())


COLUMNS = ["model", "float accuracy", "PTQ int8 accuracy", "QAT int8 accuracy (LiteRT)",
           "QAT = fake-quant (1 step)", "int8 .tflite (KB)", "status"]
HEADER = """
QAT (bench/qat_digits.py, the model class of tests/qat): a classifier fed raw 0..255 pixels whose
stem concatenates them (a frozen 1x1 copy) with batch-normed ReLU6 features (one int8 scale for
both). Trained here (float {float_steps} steps, then {qat_steps} QAT steps with
qconvert.qat.prepare_qat), scored on {eval} samples made here.
float: the torch model; PTQ int8: `qconvert --quantize --precision int8` calibrated on {calibration} other samples, in
LiteRT; QAT int8: qconvert.qat.export's QDQ model converted with `--quantize` and no calibration, in
LiteRT; QAT = fake-quant: the share of its logits within one int8 output step of the fake-quant
torch model (eval mode); size: the QAT .tflite.
"""


def header() -> str:
    return HEADER.format(float_steps=FLOAT_STEPS, qat_steps=QAT_STEPS,
                         eval=EVAL_SAMPLES, calibration=CALIBRATION_SAMPLES)


def bench_rows(out_dir) -> tuple[list[dict], list[str]]:
    """The QAT table's row and note line; conversions run in this process (qconvert.convert),
    a failure becomes the row's status."""
    from pathlib import Path

    import qconvert

    row = dict.fromkeys(COLUMNS, "-")
    row.update(model="qat-digits")
    try:
        images, labels = samples(EVAL_SAMPLES, EVAL_SEED)
        calibration, _ = samples(CALIBRATION_SAMPLES, CALIBRATION_SEED)
        start = time.perf_counter()
        model = build()
        train(model, FLOAT_STEPS, FLOAT_LR, TRAIN_SEED)
        float_seconds = time.perf_counter() - start
        ptq, _ = qconvert.convert(float_onnx(model), quantize=True, precision="int8",
                                  calibration={INPUT: calibration[:, None]})
        prepared, qat_seconds = qat_model(model)
        qdq = qat_onnx(prepared)
        qat, _ = qconvert.convert(qdq, quantize=True)
        Path(out_dir, "qat-digits.qdq.onnx").write_bytes(qdq)
        Path(out_dir, "qat-digits.int8.tflite").write_bytes(qat)
        fake_quant, litert = logits(prepared, images), tflite_logits(qat, images)
        step = _output_step(qat)
        row.update({"float accuracy": f"{accuracy(logits(model, images), labels):.3f}",
                    "PTQ int8 accuracy": f"{accuracy(tflite_logits(ptq, images), labels):.3f}",
                    "QAT int8 accuracy (LiteRT)": f"{accuracy(litert, labels):.3f}",
                    "QAT = fake-quant (1 step)":
                        f"{(np.abs(litert - fake_quant) <= step * 1.001).mean() * 100:.1f} %",
                    "int8 .tflite (KB)": f"{len(qat) / 1024:.1f}", "status": "ok"})
        note = (f"- qat-digits: float training {float_seconds:.0f} s, QAT fine-tuning {qat_seconds:.0f} s "
                f"(1 torch thread); QAT torch fake-quant accuracy {accuracy(fake_quant, labels):.3f}")
    except Exception as e:  # training, export, conversion or a run: a row, never a crash
        row["status"] = f"{type(e).__name__}: {e}".splitlines()[0]
        note = "- qat-digits: failed"
    return [row], [note]


def _output_step(flatbuffer: bytes) -> float:
    """The scale of the int8 tensor the output's DEQUANTIZE reads (the logits' int8 step)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=flatbuffer)
    details = {d["index"]: d for d in interpreter.get_tensor_details()}
    for op in interpreter._get_ops_details():
        if op["op_name"] == "DEQUANTIZE" and details[op["outputs"][0]]["name"] == OUTPUT:
            return float(details[op["inputs"][0]]["quantization_parameters"]["scales"][0])
    raise RuntimeError("no DEQUANTIZE writes the output")
